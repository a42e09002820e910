-- Issue 12 (CONTRACT v2 §9): completion delivery to producers. A task message with the AMQP
-- property reply_to gets its terminal event on that queue, once, after it is committed.

ALTER TABLE tasks
    -- The producer's queue (routing key on the default exchange) and the correlation_id to
    -- send with the terminal event (the message's, else the task_id).
    ADD COLUMN reply_to text,
    ADD COLUMN correlation_id text,
    -- When the broker confirmed the reply; null while it is owed.
    ADD COLUMN replied_at timestamptz;

-- The replies still owed: small, read by every worker's sweep and after each task ends.
CREATE INDEX tasks_reply_owed_idx ON tasks (task_id)
    WHERE reply_to IS NOT NULL AND replied_at IS NULL;
