-- CONTRACT v3 §15 "Who may steer": who decided a gated call as agentd verified it (the key
-- that signed the control message, the gateway token's tenant and note, the CLI's OS user,
-- `agentd` for an expiry), beside the free-text decided_by; null when nothing verified it.
ALTER TABLE approvals ADD COLUMN decided_by_verified text;

-- A cancel for a task id that no table knows leaves a tombstone: a `cancelled` row without
-- agent and input (CONTRACT §2). Workers remove those older than control.tombstone_secs
-- with their event; this index finds them without reading every task.
CREATE INDEX tasks_tombstone_idx ON tasks (finished_at)
    WHERE status = 'cancelled' AND agent_id IS NULL AND input IS NULL;
