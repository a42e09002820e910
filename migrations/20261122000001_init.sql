-- agentd trace tables (CONTRACT §4). Forward-only: later changes get their own file.

CREATE TABLE agents (
    agent_id      uuid PRIMARY KEY,
    name          text NOT NULL,
    model         text NOT NULL,
    max_iteration integer NOT NULL DEFAULT 30 CHECK (max_iteration > 0),
    -- The tool names the agent may call; NULL means every built-in tool.
    tools         text[],
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tasks (
    task_id         uuid PRIMARY KEY,
    -- No foreign key: a task naming an unknown agent is still recorded (status rejected).
    agent_id        uuid,
    conversation_id uuid,
    input           text,
    constraints     jsonb NOT NULL DEFAULT '[]'::jsonb,
    stream          boolean NOT NULL DEFAULT false,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled', 'rejected')),
    iterations      integer NOT NULL DEFAULT 0,
    answer          text,
    error           text,
    -- max_iteration, llm_error, rejected or internal when status = failed/rejected.
    fail_reason     text,
    plan            jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- Crash resume: the serialized core machine after the last committed recursion.
    checkpoint      jsonb,
    -- Single runner: the worker holding the task and until when (renewed while it runs).
    lease_owner     uuid,
    lease_until     timestamptz
);
CREATE INDEX tasks_agent_created_idx ON tasks (agent_id, created_at);
CREATE INDEX tasks_conversation_idx ON tasks (conversation_id, created_at) WHERE conversation_id IS NOT NULL;
CREATE INDEX tasks_status_idx ON tasks (status) WHERE status IN ('pending', 'running');

CREATE TABLE recursions (
    trace_id    uuid PRIMARY KEY,
    task_id     uuid NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    iteration   integer NOT NULL,
    step_id     text,
    action_type text,
    observe     text NOT NULL DEFAULT '',
    thought     text NOT NULL DEFAULT '',
    abstract    text NOT NULL DEFAULT '',
    output      jsonb,
    status      text NOT NULL CHECK (status IN ('done', 'error')),
    error_log   text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    UNIQUE (task_id, iteration)
);

CREATE TABLE tool_calls (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id      uuid NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    trace_id     uuid NOT NULL,
    tool_call_id text NOT NULL,
    name         text NOT NULL,
    arguments    jsonb,
    success      boolean NOT NULL,
    result       jsonb,
    error        text,
    duration_ms  bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (trace_id, tool_call_id)
);
CREATE INDEX tool_calls_task_idx ON tool_calls (task_id);

CREATE TABLE llm_calls (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id           uuid NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    trace_id          uuid NOT NULL,
    iteration         integer NOT NULL,
    attempt           integer NOT NULL,
    -- "200", or the error class: http_429, timeout, connect, decode, ...
    status            text NOT NULL,
    latency_ms        bigint NOT NULL,
    prompt_tokens     bigint,
    completion_tokens bigint,
    error             text,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX llm_calls_task_idx ON llm_calls (task_id);

CREATE TABLE events (
    task_id    uuid NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    event_id   uuid NOT NULL UNIQUE,
    type       text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq)
);

