#!/usr/bin/env bash
# How long the partitioning migration (migrations/20261127010001_partitioned_trace.sql) takes
# on a database that already holds a trace (docs/scaling.md#partitioned-trace-tables).
#
#   scripts/partition-migration-timing.sh [EVENTS] [TASKS] [DAYS]
#
# Makes a throwaway database (agentd_partition_timing_<random>) on the local PostgreSQL,
# applies every migration before the partitioning one, fills it as agentd-bench's
# --preload-tasks/--preload-events does (TASKS ended tasks, EVENTS events spread over them,
# five recursions, five LLM attempts and four tool calls each; here created over the last
# DAYS days), then times the migration in one transaction, as agentd applies it, checks the
# row counts and drops the database (KEEP_DATABASE=1 keeps it, to look at plans: its name is
# printed). Defaults: 1,000,000 events, 10,000 tasks, 30 days. PGHOST/PGPORT/PGUSER as for
# psql (default 127.0.0.1:5432, postgres).
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${1:-1000000}
TASKS=${2:-10000}
DAYS=${3:-30}
PER_TASK=$(( EVENTS / TASKS ))
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
DB=agentd_partition_timing_$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
PARTITIONING=20261127010001

psql -qX -d postgres -c "CREATE DATABASE $DB"
if [ -n "${KEEP_DATABASE:-}" ]; then
  echo "database: $DB (kept)"
else
  trap 'psql -qX -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"' EXIT
fi
run() { psql -qX -v ON_ERROR_STOP=1 -d "$DB" "$@"; }

for file in migrations/*.sql; do
  version=$(basename "$file" | cut -d_ -f1)
  [ "$version" -lt "$PARTITIONING" ] || continue
  run -1 -f "$file" >/dev/null
done

echo "filling: $TASKS tasks over $DAYS days, $PER_TASK events each"
run <<SQL
INSERT INTO tasks (task_id, agent_id, input, status, iterations, answer, plan, created_at,
                   started_at, finished_at, updated_at, event_seq, confirmed_seq)
SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'preloaded task ' || n,
       'completed', 5, 'done', '[]'::jsonb, at, at, at, at, $PER_TASK, $PER_TASK
FROM generate_series(1, $TASKS) AS n,
     LATERAL (SELECT now() - make_interval(secs => n * ($DAYS * 86400.0 / $TASKS)) AS at) t;
INSERT INTO events (task_id, seq, event_id, type, payload, created_at)
SELECT t.task_id, s, gen_random_uuid(), 'recursion.completed',
       jsonb_build_object('seq', s, 'type', 'recursion.completed',
                          'data', jsonb_build_object('iteration', s)), t.created_at
FROM tasks t, generate_series(1, $PER_TASK) AS s;
INSERT INTO recursions (trace_id, task_id, iteration, action_type, observe, thought, abstract,
                        output, status, started_at, finished_at)
SELECT gen_random_uuid(), t.task_id, i, 'CALL_TOOL', 'observed', 'thought', 'abstract',
       '{}'::jsonb, 'done', t.created_at, t.created_at
FROM tasks t, generate_series(1, 5) AS i;
INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms,
                       prompt_tokens, completion_tokens, created_at)
SELECT r.task_id, r.trace_id, r.iteration, 1, '200', 700, 100, 20, r.started_at
FROM recursions r;
INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, result,
                        duration_ms, state, effect)
SELECT r.task_id, r.trace_id, 'call_' || r.iteration, 'calculate',
       '{"expression": "1+1"}'::jsonb, true, '2'::jsonb, 1, 'succeeded', 'read_only'
FROM recursions r WHERE r.iteration <= 4;
VACUUM ANALYZE;
SQL
run -Atc "SELECT 'before: ' || pg_size_pretty(pg_database_size(current_database()))"

start=$(date +%s.%N)
run -1 -f "migrations/${PARTITIONING}_partitioned_trace.sql" >/dev/null
end=$(date +%s.%N)
printf 'migration: %.1f s\n' "$(echo "$end - $start" | bc)"

run -Atc "SELECT 'after: ' || pg_size_pretty(pg_database_size(current_database())) || ', ' ||
                 (SELECT count(*) FROM events) || ' events, ' ||
                 (SELECT count(*) FROM recursions) || ' recursions, ' ||
                 (SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass)
                 || ' partitions of events'"
