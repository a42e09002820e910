-- CONTRACT v3 §13 "Evaluation runs" (issue 26 item 5): a run reruns selected ended tasks of
-- an agent against a version and compares each rerun with its source, one row per task.

CREATE TABLE eval_runs (
    eval_run_id   uuid PRIMARY KEY,
    name          text,
    agent_id      uuid NOT NULL,
    -- The version the reruns run on; null with a channel (named in `channel`) or with
    -- neither (each rerun then takes its source's version, as a rerun does).
    agent_version int,
    channel       text,
    -- What selected the tasks: {"where", "limit"} (the CLI's SQL) or the gateway's
    -- structured selection {"task_ids", "status", "since", "limit"}.
    selector      jsonb NOT NULL,
    llm_mode      text NOT NULL CHECK (llm_mode IN ('recorded', 'live')),
    tools_mode    text NOT NULL CHECK (tools_mode IN ('recorded', 'live')),
    -- Rerun messages published per second.
    rate          double precision NOT NULL CHECK (rate > 0),
    status        text NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'completed', 'cancelled')),
    tenant_id     text NOT NULL DEFAULT 'default',
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);
CREATE INDEX eval_runs_agent_idx ON eval_runs (agent_id, created_at);
CREATE INDEX eval_runs_running_idx ON eval_runs (created_at) WHERE status = 'running';

-- One row per selected task. rerun_task_id = UUIDv5(eval_run_id, source_task_id): a run
-- published twice (a crash, a resume) names the same reruns, which a worker runs once.
-- status: pending (not published yet), published, then the rerun's end (completed,
-- failed, cancelled, rejected), when the comparison columns are filled.
CREATE TABLE eval_items (
    eval_run_id                uuid NOT NULL REFERENCES eval_runs (eval_run_id) ON DELETE CASCADE,
    source_task_id             uuid NOT NULL,
    rerun_task_id              uuid NOT NULL UNIQUE,
    status                     text NOT NULL DEFAULT 'pending'
                               CHECK (status IN ('pending', 'published', 'completed', 'failed',
                                                 'cancelled', 'rejected')),
    answer_equal               boolean,
    actions_equal              boolean,
    first_divergence_iteration int,
    iterations_delta           int,
    tokens_delta               bigint,
    cost_delta_usd             double precision,
    passed                     boolean,
    tenant_id                  text NOT NULL DEFAULT 'default',
    published_at               timestamptz,
    finished_at                timestamptz,
    PRIMARY KEY (eval_run_id, source_task_id)
);
-- The items still waiting for their rerun: what the sweep looks at.
CREATE INDEX eval_items_open_idx ON eval_items (rerun_task_id)
    WHERE status IN ('pending', 'published');

-- Row-level security as for every tenant-scoped table (20261127030001_tenants.sql).
DO $$
DECLARE
    scoped text;
BEGIN
    FOREACH scoped IN ARRAY ARRAY['eval_runs', 'eval_items']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', scoped);
        EXECUTE format(
            'CREATE POLICY tenant_rows ON %I FOR SELECT TO agentd_reader '
            'USING (tenant_id = agentd_reader_tenant())', scoped);
        EXECUTE format(
            'CREATE POLICY other_roles ON %I '
            'USING (NOT pg_has_role(current_user, ''agentd_reader'', ''MEMBER'')) '
            'WITH CHECK (NOT pg_has_role(current_user, ''agentd_reader'', ''MEMBER''))', scoped);
        EXECUTE format('GRANT SELECT ON %I TO agentd_reader', scoped);
    END LOOP;
END $$;
