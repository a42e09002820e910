-- CONTRACT v3 §15 "Conversations": a conversation belongs to one agent and one tenant, those
-- of its first admitted turn. A task naming a conversation_id that belongs to another agent
-- (or tenant) is rejected, so it never sees that conversation's earlier turns.
CREATE TABLE conversations (
    conversation_id uuid PRIMARY KEY,
    agent_id uuid NOT NULL,
    tenant_id text NOT NULL DEFAULT 'default',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Conversations that exist already belong to the agent of their earliest recorded turn.
INSERT INTO conversations (conversation_id, agent_id, created_at)
SELECT DISTINCT ON (conversation_id) conversation_id, agent_id, created_at
FROM tasks
WHERE conversation_id IS NOT NULL AND agent_id IS NOT NULL
ORDER BY conversation_id, created_at, recorded_seq;
