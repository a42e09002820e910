-- CONTRACT v3 §13 "Rerun" (issue 26 item 4): a task reproduced from the record of an ended
-- one. The rerun's row names its source and where its model replies and tool results come
-- from, so that every continuation (a crash resume, an approval, a pause), whose message
-- is rebuilt from the row, reruns the same way.
ALTER TABLE tasks ADD COLUMN rerun_of uuid;
ALTER TABLE tasks ADD COLUMN rerun_llm text CHECK (rerun_llm IN ('recorded', 'live'));
ALTER TABLE tasks ADD COLUMN rerun_tools text CHECK (rerun_tools IN ('recorded', 'live'));

-- A source's reruns (and an evaluation run's items) are found by their source.
CREATE INDEX tasks_rerun_of_idx ON tasks (rerun_of) WHERE rerun_of IS NOT NULL;

-- An attempt answered from a source's record instead of the provider: 'recorded' (null:
-- the provider answered). Its tokens are the source's, so an evaluation can compare them.
ALTER TABLE llm_calls ADD COLUMN served_from text;
