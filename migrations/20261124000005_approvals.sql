-- Issue 12 (CONTRACT v2 §4, §7): tool approvals.

-- Which tools of an agent need a person's decision (names or globs such as `everything__*`),
-- how long a request waits (default 86400 s) and what its expiry does (reject or fail).
ALTER TABLE agents
    ADD COLUMN approval_tools text[],
    ADD COLUMN approval_timeout_secs int CHECK (approval_timeout_secs > 0),
    ADD COLUMN on_approval_expiry text CHECK (on_approval_expiry IN ('reject', 'fail'));

-- One row per gated tool call: the request, then the first decision (later ones change
-- nothing). The task waits (status waiting, wait_reason approval) until every gated call
-- of its reply has a decision.
CREATE TABLE approvals (
    task_id uuid NOT NULL,
    tool_call_id text NOT NULL,
    -- The recursion whose reply made the call.
    trace_id uuid NOT NULL,
    name text NOT NULL,
    arguments jsonb,
    effect text,
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    -- approve, edit, reject, respond, or expired; null while it waits.
    decision text CHECK (decision IN ('approve', 'edit', 'reject', 'respond', 'expired')),
    -- edit: the arguments the call runs with.
    arguments_edited jsonb,
    -- respond: the result the model gets instead of running the tool.
    result jsonb,
    -- reject: why (shown to the model).
    reason text,
    decided_by text,
    decided_at timestamptz,
    PRIMARY KEY (task_id, tool_call_id)
);
CREATE INDEX approvals_pending_idx ON approvals (expires_at) WHERE decision IS NULL;
CREATE INDEX approvals_trace_idx ON approvals (trace_id);
