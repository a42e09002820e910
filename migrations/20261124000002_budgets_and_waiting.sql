-- Issue 12 (CONTRACT v2 §4, §8, §2): budgets and cost, and the `waiting` status.

-- What an agent's tasks may spend when their message names no budget (CONTRACT §8).
ALTER TABLE agents ADD COLUMN budget jsonb;

ALTER TABLE tasks
    -- Summed over every LLM attempt of the task; cost_usd is null when the model has no price.
    ADD COLUMN prompt_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN completion_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_usd double precision DEFAULT 0,
    -- Tool calls run.
    ADD COLUMN tool_call_count bigint NOT NULL DEFAULT 0,
    -- The budget in force (the message's, else the agent's; a resume may replace it).
    ADD COLUMN budget jsonb,
    -- Why a `waiting` task waits (paused, budget).
    ADD COLUMN wait_reason text,
    -- Set by a resume for the worker that takes the task up again: why, and a new budget.
    ADD COLUMN resume_reason text,
    ADD COLUMN resume_budget jsonb;

-- Every attempt's model and cost (null when the model has no price or no usage was reported).
ALTER TABLE llm_calls
    ADD COLUMN model text,
    ADD COLUMN cost_usd double precision;

-- `waiting` (v2): the task waits for someone; no worker holds it.
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('pending', 'running', 'waiting', 'completed', 'failed', 'cancelled', 'rejected'));
CREATE INDEX tasks_waiting_idx ON tasks (updated_at) WHERE status = 'waiting';

-- Guidance injected while no worker held the task (`inject` on a waiting task), handed to
-- the machine by the worker that takes it up again.
ALTER TABLE tasks ADD COLUMN pending_guidance jsonb;
