-- Retention (`agentd prune`, `[retention]`): ended tasks are selected by finished_at.
CREATE INDEX tasks_finished_idx ON tasks (finished_at) WHERE finished_at IS NOT NULL;
