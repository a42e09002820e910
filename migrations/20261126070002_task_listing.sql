-- CONTRACT v3 §14 "Listing": `agentd tasks` and `GET /v1/tasks` page through tasks newest
-- first by the keyset (created_at, task_id), filtered by status and agent (the agent filter
-- uses tasks_agent_created_idx).
CREATE INDEX tasks_created_idx ON tasks (created_at, task_id);
CREATE INDEX tasks_status_created_idx ON tasks (status, created_at, task_id);
