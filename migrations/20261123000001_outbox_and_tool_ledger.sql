-- Issue 11 (CONTRACT v2 §3 and §7): the event outbox and the exactly-once tool ledger.

-- The outbox. Every event is stored before it is published; these columns say how far the
-- broker has confirmed a task's events, so that what a dead worker stored and never
-- published goes out later (a resume, a redelivery of the ended task, the periodic sweep).
ALTER TABLE tasks
    -- The highest seq stored for the task.
    ADD COLUMN event_seq bigint NOT NULL DEFAULT 0,
    -- Every event up to this seq is known to be confirmed by the broker (may lag behind).
    ADD COLUMN confirmed_seq bigint NOT NULL DEFAULT 0,
    -- Set when a task is handed over to nobody (it ended) with events not yet confirmed;
    -- cleared once they are. The sweep reads this flag through its own small index.
    ADD COLUMN outbox_pending boolean NOT NULL DEFAULT false;
CREATE INDEX tasks_outbox_idx ON tasks (updated_at) WHERE outbox_pending;

-- The tool ledger: a call of a tool with effects is recorded `started` (with its effect
-- and idempotency key) and committed before it runs; its outcome is committed when it ends.
ALTER TABLE tool_calls
    ALTER COLUMN success DROP NOT NULL,
    ALTER COLUMN duration_ms DROP NOT NULL,
    -- started, succeeded, failed, unknown, awaiting_approval, rejected
    ADD COLUMN state text,
    -- read_only, idempotent, side_effect
    ADD COLUMN effect text,
    -- "<task_id>:<tool_call_id>" for every call of a tool that is not read-only.
    ADD COLUMN idempotency_key text,
    ADD COLUMN started_at timestamptz,
    ADD COLUMN finished_at timestamptz;
UPDATE tool_calls SET state = CASE WHEN success THEN 'succeeded' ELSE 'failed' END;
