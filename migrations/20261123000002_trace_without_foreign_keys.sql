-- Issue 13: the trace tables keep no foreign keys to `tasks`. Their integrity comes from the
-- single writer per task (the lease fences every step, and the step's rows are inserted by
-- the same statement that checks it), and `agentd prune` deletes table by table. A foreign
-- key costs a lookup in `tasks` and a trigger per inserted row, on every recursion.
ALTER TABLE recursions DROP CONSTRAINT IF EXISTS recursions_task_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT IF EXISTS tool_calls_task_id_fkey;
ALTER TABLE llm_calls DROP CONSTRAINT IF EXISTS llm_calls_task_id_fkey;
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_task_id_fkey;

-- The machine checkpoint is read back whole by the worker that resumes the task and by
-- nobody else: text costs no jsonb parsing on every step.
ALTER TABLE tasks ALTER COLUMN checkpoint TYPE text USING checkpoint::text;
