-- Issue 15 (CONTRACT v2 §4, §10): one task at a time per conversation.

-- enqueue (default: a new turn waits, reason conversation, until the conversation's running
-- task ends) or reject (the new turn ends rejected).
ALTER TABLE agents ADD COLUMN conversation_policy text
    CHECK (conversation_policy IN ('enqueue', 'reject'));

-- The conversations whose next turn waits, for the worker that frees them.
CREATE INDEX tasks_conversation_waiting_idx ON tasks (conversation_id, created_at)
    WHERE status = 'waiting' AND wait_reason = 'conversation';
