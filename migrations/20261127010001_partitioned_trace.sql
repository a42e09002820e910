-- Issue 29 item 1: the trace tables partitioned by the creation time of their task.
--
-- `recursions`, `tool_calls`, `llm_calls` (with the §12 record: request_parts, response),
-- `llm_request_parts` and `events` become range-partitioned on a new column
-- `task_created_at` (= tasks.created_at of the row's task, written by every insert), so all
-- of a task's rows live in the partition of its creation however long it runs, and
-- retention drops whole partitions instead of deleting rows (store::prune,
-- store::partitions). A partitioned table's unique keys must contain the partition key:
-- each contract key gains `task_created_at`, which is one value per task, so
-- (task_id, iteration), (task_id, seq), (trace_id, tool_call_id) keep their meaning.
--
-- The tables that exist are renamed, the partitioned ones created with daily partitions
-- for every day that has tasks, today and the next three days (the worker makes later
-- ones, at the configured interval: [partitions]) and a default partition, the rows moved
-- (rows of a task that no longer exists go to the default partition, at the epoch), the
-- old tables dropped and the keys and indexes built on the new ones. It all runs in the
-- migration's one transaction: either every row moved or nothing changed. Writers wait
-- for it (docs/scaling.md says how long it takes). Columns, row-level security, policies and
-- grants that a later-numbered migration gave the old tables before this one ran (the
-- tenants', on a database migrated before this file existed) are carried over.

-- 1. The old tables step aside (their index names are freed when they are dropped).
ALTER TABLE recursions RENAME TO recursions_unpartitioned;
ALTER TABLE tool_calls RENAME TO tool_calls_unpartitioned;
ALTER SEQUENCE tool_calls_id_seq RENAME TO tool_calls_unpartitioned_id_seq;
ALTER TABLE llm_calls RENAME TO llm_calls_unpartitioned;
ALTER SEQUENCE llm_calls_id_seq RENAME TO llm_calls_unpartitioned_id_seq;
ALTER TABLE llm_request_parts RENAME TO llm_request_parts_unpartitioned;
ALTER TABLE events RENAME TO events_unpartitioned;

-- 2. The partitioned tables: the columns of the old ones, in their order, with their
-- defaults, checks and identities (`LIKE`, so that a column another migration added before
-- this one ran, such as tenant_id, comes along), then task_created_at, the partition key:
-- tasks.created_at of the row's task.
CREATE TABLE recursions (
    LIKE recursions_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY,
    task_created_at timestamptz NOT NULL
) PARTITION BY RANGE (task_created_at);
CREATE TABLE tool_calls (
    LIKE tool_calls_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY,
    task_created_at timestamptz NOT NULL
) PARTITION BY RANGE (task_created_at);
CREATE TABLE llm_calls (
    LIKE llm_calls_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY,
    task_created_at timestamptz NOT NULL
) PARTITION BY RANGE (task_created_at);
CREATE TABLE llm_request_parts (
    LIKE llm_request_parts_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    task_created_at timestamptz NOT NULL
) PARTITION BY RANGE (task_created_at);
CREATE TABLE events (
    LIKE events_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    task_created_at timestamptz NOT NULL
) PARTITION BY RANGE (task_created_at);

-- 3. Daily partitions (named as core::partitions names them) and a default partition.
DO $$
DECLARE
    day timestamptz;
    parent text;
BEGIN
    FOR day IN
        SELECT DISTINCT date_trunc('day', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        FROM tasks
        UNION
        SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
               + make_interval(days => ahead)
        FROM generate_series(0, 3) AS ahead
    LOOP
        FOREACH parent IN ARRAY
            ARRAY['recursions', 'tool_calls', 'llm_calls', 'llm_request_parts', 'events']
        LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                parent || '_p' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD'), parent,
                to_char(day AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                to_char((day + interval '1 day') AT TIME ZONE 'UTC',
                        'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
        END LOOP;
    END LOOP;
    FOREACH parent IN ARRAY
        ARRAY['recursions', 'tool_calls', 'llm_calls', 'llm_request_parts', 'events']
    LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', parent || '_default', parent);
    END LOOP;
END $$;

-- 4. The rows move, each with its task's creation time (the new tables are the old columns
-- then task_created_at, so `old.*` and the key line up).
INSERT INTO recursions
SELECT r.*, COALESCE(t.created_at, 'epoch')
FROM recursions_unpartitioned r LEFT JOIN tasks t ON t.task_id = r.task_id;

INSERT INTO tool_calls OVERRIDING SYSTEM VALUE
SELECT c.*, COALESCE(t.created_at, 'epoch')
FROM tool_calls_unpartitioned c LEFT JOIN tasks t ON t.task_id = c.task_id;

INSERT INTO llm_calls OVERRIDING SYSTEM VALUE
SELECT l.*, COALESCE(t.created_at, 'epoch')
FROM llm_calls_unpartitioned l LEFT JOIN tasks t ON t.task_id = l.task_id;

INSERT INTO llm_request_parts
SELECT p.*, COALESCE(t.created_at, 'epoch')
FROM llm_request_parts_unpartitioned p LEFT JOIN tasks t ON t.task_id = p.task_id;

INSERT INTO events
SELECT e.*, COALESCE(t.created_at, 'epoch')
FROM events_unpartitioned e LEFT JOIN tasks t ON t.task_id = e.task_id;

-- Row-level security, its policies and the grants of the old tables, where a migration
-- made them before this one ran (the tenants' of CONTRACT v3 §15), hold on the new ones.
DO $$
DECLARE
    parent text;
    old regclass;
    policy record;
    grant_ record;
BEGIN
    FOREACH parent IN ARRAY
        ARRAY['recursions', 'tool_calls', 'llm_calls', 'llm_request_parts', 'events']
    LOOP
        old := (parent || '_unpartitioned')::regclass;
        IF (SELECT relrowsecurity FROM pg_class WHERE oid = old) THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', parent);
        END IF;
        IF (SELECT relforcerowsecurity FROM pg_class WHERE oid = old) THEN
            EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', parent);
        END IF;
        FOR policy IN
            SELECT p.polname, p.polpermissive, p.polcmd,
                   pg_get_expr(p.polqual, p.polrelid) AS qual,
                   pg_get_expr(p.polwithcheck, p.polrelid) AS with_check,
                   (SELECT string_agg(CASE WHEN r = 0 THEN 'PUBLIC'
                                           ELSE quote_ident(pg_get_userbyid(r)) END, ', ')
                    FROM unnest(p.polroles) AS r) AS roles
            FROM pg_policy p WHERE p.polrelid = old
        LOOP
            EXECUTE format('CREATE POLICY %I ON %I AS %s FOR %s TO %s%s%s',
                policy.polname, parent,
                CASE WHEN policy.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
                CASE policy.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT'
                                   WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
                policy.roles,
                COALESCE(' USING (' || policy.qual || ')', ''),
                COALESCE(' WITH CHECK (' || policy.with_check || ')', ''));
        END LOOP;
        FOR grant_ IN
            SELECT a.privilege_type,
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                        ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS grantee
            FROM pg_class c, aclexplode(c.relacl) AS a
            WHERE c.oid = old AND a.grantee <> c.relowner
        LOOP
            EXECUTE format('GRANT %s ON %I TO %s', grant_.privilege_type, parent,
                           grant_.grantee);
        END LOOP;
    END LOOP;
END $$;

-- 5. The §12 view reads the new llm_calls (a view follows a renamed table, so it is made
-- again), and gains task_created_at; llm_request_text gets a form that names the
-- partition key, so that reading one request's parts visits one partition.
CREATE FUNCTION llm_request_text(p_task_id uuid, p_parts uuid[], p_task_created_at timestamptz)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN count(p.part_id) = cardinality(p_parts)
                THEN string_agg(p.content, '' ORDER BY r.ord) END
    FROM unnest(p_parts) WITH ORDINALITY AS r (part_id, ord)
    LEFT JOIN llm_request_parts p ON p.task_id = p_task_id
                                 AND p.task_created_at = p_task_created_at
                                 AND p.part_id = r.part_id
$$;

-- (security_invoker: the tables' row-level security holds for whoever reads the view, as
-- the tenants' migration sets it; CREATE OR REPLACE would otherwise reset it.)
CREATE OR REPLACE VIEW llm_call_bodies WITH (security_invoker = true) AS
SELECT c.id AS llm_call_id,
       c.task_id,
       c.iteration,
       c.attempt,
       llm_try_jsonb(llm_request_text(c.task_id, c.request_parts, c.task_created_at))
           AS request,
       c.response,
       c.task_created_at
FROM llm_calls c
WHERE c.request_parts IS NOT NULL;

DROP TABLE recursions_unpartitioned, tool_calls_unpartitioned, llm_calls_unpartitioned,
           llm_request_parts_unpartitioned, events_unpartitioned;

-- 6. Keys and indexes, built once over the moved rows (on every partition, and on every
-- partition made later). Each unique key of CONTRACT §4 plus the partition key.
ALTER TABLE recursions ADD CONSTRAINT recursions_pkey PRIMARY KEY (trace_id, task_created_at);
ALTER TABLE recursions ADD CONSTRAINT recursions_task_id_iteration_key
    UNIQUE (task_id, iteration, task_created_at);

ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_pkey PRIMARY KEY (id, task_created_at);
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_trace_id_tool_call_id_key
    UNIQUE (trace_id, tool_call_id, task_created_at);
CREATE INDEX tool_calls_task_idx ON tool_calls (task_id);
CREATE INDEX tool_calls_unknown_idx ON tool_calls (task_id) WHERE state = 'unknown';

ALTER TABLE llm_calls ADD CONSTRAINT llm_calls_pkey PRIMARY KEY (id, task_created_at);
CREATE INDEX llm_calls_task_idx ON llm_calls (task_id);
CREATE INDEX llm_calls_request_key_idx ON llm_calls (request_key)
    WHERE request_key IS NOT NULL;

ALTER TABLE llm_request_parts ADD CONSTRAINT llm_request_parts_pkey
    PRIMARY KEY (task_id, part_id, task_created_at);

ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (task_id, seq, task_created_at);
ALTER TABLE events ADD CONSTRAINT events_event_id_key UNIQUE (event_id, task_created_at);

-- 7. Row ids continue after the moved ones.
SELECT setval(pg_get_serial_sequence('tool_calls', 'id'), COALESCE(max(id), 0) + 1, false)
FROM tool_calls;
SELECT setval(pg_get_serial_sequence('llm_calls', 'id'), COALESCE(max(id), 0) + 1, false)
FROM llm_calls;

-- The planner's statistics for the moved rows (autovacuum never analyzes a partitioned
-- parent, and would take a while to get to the new partitions).
ANALYZE recursions, tool_calls, llm_calls, llm_request_parts, events;
