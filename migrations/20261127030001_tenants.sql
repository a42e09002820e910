-- CONTRACT v3 §15 "Tenants" (issue 28 items 1 to 3): a tenant on every task-scoped row,
-- scoped API tokens, row-level security for the role agentd_reader, and fair shares.

-- Every row of a task's data names its tenant, set when it is written (the worker copies
-- the task's tenant into each row it writes: row-level security depends on it). Rows that
-- exist already belong to `default`, the tenant of every task until now.
ALTER TABLE agents ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE tasks ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE recursions ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE llm_calls ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE tool_calls ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE approvals ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE events ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE llm_request_parts ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
-- schedules, schedule_fires, operator_actions and conversations carry tenant_id already.

-- Within a tenant, `high` goes first when slots free (the task message's `priority`).
ALTER TABLE tasks ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CHECK (priority IN ('high', 'normal'));

-- Fair shares: a tenant with a row here never has more than max_running tasks running
-- across the fleet (null: no limit; 0 holds every new task). Over it a task waits (reason
-- tenant_limit) and starts in arrival order as slots free; freed slots go to the waiting
-- tenants by weighted round robin.
CREATE TABLE tenants (
    tenant_id text PRIMARY KEY CHECK (length(tenant_id) BETWEEN 1 AND 200),
    max_running int CHECK (max_running >= 0),
    weight int NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The queue of a tenant's waiting tasks, in the order they start: high priority first,
-- then arrival. Partial: the rows of running tasks never enter it.
CREATE INDEX tasks_tenant_queue_idx ON tasks (tenant_id, (priority = 'high') DESC, created_at,
                                              recorded_seq)
    WHERE status = 'waiting' AND wait_reason = 'tenant_limit';

-- Scoped tokens for the gateway: only the SHA-256 (hex) of a token is kept. Scopes: read,
-- submit, decide, operate, admin; tenant `*` with admin sees every tenant.
CREATE TABLE api_tokens (
    token_sha256 text PRIMARY KEY CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
    tenant_id text NOT NULL CHECK (length(tenant_id) BETWEEN 1 AND 200),
    scopes text[] NOT NULL
        CHECK (cardinality(scopes) >= 1
               AND scopes <@ ARRAY['read', 'submit', 'decide', 'operate', 'admin']),
    expires_at timestamptz,
    note text,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- Row-level security. The role agentd_reader (no login of its own) sees the rows whose
-- tenant_id is the session's `agentd.tenant` setting; a tenant's analysts get a login in
-- that role (docs/sql.md). A login listed in tenant_readers reads only its own tenant,
-- whatever it sets agentd.tenant to (a role may change its own settings). The table's
-- owner (agentd itself) and superusers are not subject to these policies; other roles
-- keep seeing every row, as before this migration.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentd_reader') THEN
        CREATE ROLE agentd_reader NOLOGIN;
    END IF;
EXCEPTION
    -- Another database of the same server created it meanwhile.
    WHEN duplicate_object OR unique_violation THEN NULL;
    WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'the role agentd_reader does not exist and this user may not create it'
            USING HINT = 'as a superuser run CREATE ROLE agentd_reader NOLOGIN, then agentd migrate again';
END $$;

CREATE TABLE tenant_readers (
    login name PRIMARY KEY,
    tenant_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The tenant a reader's session may see: its agentd.tenant setting, unless its login is
-- bound to another tenant in tenant_readers (then none). SECURITY DEFINER: a reader cannot
-- read or change tenant_readers itself.
CREATE FUNCTION agentd_reader_tenant() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path FROM CURRENT
AS $$
    SELECT CASE
        WHEN NOT EXISTS (SELECT 1 FROM tenant_readers r WHERE r.login = session_user)
          OR EXISTS (SELECT 1 FROM tenant_readers r
                     WHERE r.login = session_user
                       AND r.tenant_id = current_setting('agentd.tenant', true))
        THEN current_setting('agentd.tenant', true)
    END
$$;
REVOKE ALL ON FUNCTION agentd_reader_tenant() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agentd_reader_tenant() TO agentd_reader;

DO $$
DECLARE
    scoped text;
BEGIN
    FOREACH scoped IN ARRAY ARRAY['agents', 'tasks', 'recursions', 'llm_calls', 'tool_calls',
                                  'approvals', 'events', 'llm_request_parts', 'schedules',
                                  'schedule_fires', 'operator_actions', 'conversations',
                                  'tenants']
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
    -- An agent's versions and channels are its tenant's: visible with the agent (the
    -- policies of agents apply inside the subquery).
    FOREACH scoped IN ARRAY ARRAY['agent_versions', 'agent_channels']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', scoped);
        EXECUTE format(
            'CREATE POLICY tenant_rows ON %I FOR SELECT TO agentd_reader '
            'USING (EXISTS (SELECT 1 FROM agents a WHERE a.agent_id = %I.agent_id))',
            scoped, scoped);
        EXECUTE format(
            'CREATE POLICY other_roles ON %I '
            'USING (NOT pg_has_role(current_user, ''agentd_reader'', ''MEMBER'')) '
            'WITH CHECK (NOT pg_has_role(current_user, ''agentd_reader'', ''MEMBER''))', scoped);
        EXECUTE format('GRANT SELECT ON %I TO agentd_reader', scoped);
    END LOOP;
END $$;

-- The record's view reads its tables as whoever queries it, so their policies hold for it.
ALTER VIEW llm_call_bodies SET (security_invoker = true);
GRANT SELECT ON llm_call_bodies TO agentd_reader;
