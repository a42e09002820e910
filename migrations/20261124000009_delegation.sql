-- Issue 15 (CONTRACT v2 §4, §10): delegation to other agents.

-- The agents an agent may delegate to (the `delegate` tool is offered when it lists any).
ALTER TABLE agents ADD COLUMN delegates uuid[];

ALTER TABLE tasks
    -- The task that delegated this one (its `delegate` call), and the root of the tree.
    ADD COLUMN parent_task_id uuid,
    ADD COLUMN root_task_id uuid,
    -- The parent's tool call this task answers.
    ADD COLUMN parent_tool_call_id text;

-- A root's root_task_id is its own task_id: `WHERE root_task_id = $1` is the whole tree.
UPDATE tasks SET root_task_id = task_id WHERE root_task_id IS NULL;
CREATE FUNCTION tasks_default_root() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.root_task_id := COALESCE(NEW.root_task_id, NEW.task_id);
    RETURN NEW;
END $$;
CREATE TRIGGER tasks_default_root BEFORE INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION tasks_default_root();

CREATE INDEX tasks_root_idx ON tasks (root_task_id);
-- One child per delegate call.
CREATE UNIQUE INDEX tasks_parent_call_idx ON tasks (parent_task_id, parent_tool_call_id)
    WHERE parent_task_id IS NOT NULL;
