-- Issue 27 items 2 and 3 (CONTRACT v3 §14): stall detection and unknown outcomes held for
-- a person.

-- agents.stall: {"repeat": N, "action": "nudge" | "answer" | "pause" | "fail"}; null reads
-- as the default, {"repeat": 0} turns detection off. agents.on_unknown: what a side-effecting
-- call whose outcome is unknown after a crash does: tell_model (CONTRACT §7) or hold (the
-- task waits, reason unknown_outcome, for a person's resolve).
ALTER TABLE agents
    ADD COLUMN stall jsonb DEFAULT '{"repeat": 3, "action": "nudge"}'::jsonb
        CHECK (stall IS NULL OR jsonb_typeof(stall) = 'object'),
    ADD COLUMN on_unknown text NOT NULL DEFAULT 'tell_model'
        CHECK (on_unknown IN ('tell_model', 'hold'));

-- What a person decided about a held call: one row per decision, the first per call wins
-- (the unique index). action: succeeded, failed, retry or skip; payload: {"result"} or
-- {"error"} as given.
CREATE TABLE operator_actions (
    action_id uuid PRIMARY KEY,
    task_id uuid NOT NULL,
    tool_call_id text,
    action text NOT NULL CHECK (action IN ('succeeded', 'failed', 'retry', 'skip')),
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    reason text NOT NULL,
    by text,
    -- Who decided as the system knows it (CONTRACT §15), when something verified it.
    verified_by text,
    tenant_id text NOT NULL DEFAULT 'default',
    at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX operator_actions_call_idx ON operator_actions (task_id, tool_call_id)
    WHERE tool_call_id IS NOT NULL;

-- Held calls are found by state.
CREATE INDEX tool_calls_unknown_idx ON tool_calls (task_id) WHERE state = 'unknown';
