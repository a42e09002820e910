-- Issue 15 (CONTRACT v2 §4, §10): where a task was forked or replayed from.

ALTER TABLE tasks
    -- The task this one continues (a fork) or repeats (a replay, `agentd replay`).
    ADD COLUMN forked_from_task_id uuid,
    -- The recursion it starts from: 0 for a replay (from the beginning).
    ADD COLUMN forked_from_iteration int;
CREATE INDEX tasks_forked_from_idx ON tasks (forked_from_task_id)
    WHERE forked_from_task_id IS NOT NULL;
