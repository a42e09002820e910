#!/usr/bin/env bash
# A throwaway PostgreSQL streaming replica of the machine's server, beside (never instead
# of) it: a base backup (`pg_basebackup -R`) in its own data directory, its own port and
# socket directory, started with the same PostgreSQL binaries as the primary and run as the
# `postgres` OS user. Readers point `database.read_url` at it (docs/scaling.md).
#
#   scripts/pg-replica.sh start        # base backup, start, wait until it streams; prints its URL
#   scripts/pg-replica.sh status       # running or not; in recovery; replayed and lag bytes
#   scripts/pg-replica.sh url [DB]     # postgres://postgres@127.0.0.1:PORT/DB (default agentd)
#   scripts/pg-replica.sh pause        # pg_wal_replay_pause() on the replica (it falls behind)
#   scripts/pg-replica.sh resume       # pg_wal_replay_resume()
#   scripts/pg-replica.sh stop         # stop it and delete its directory
#
# Environment (all optional): AGENTD_REPLICA_DIR (default /tmp/agentd-pg-replica; must be
# reachable by the postgres user), AGENTD_REPLICA_PORT (default 5433), AGENTD_PRIMARY_HOST
# and AGENTD_PRIMARY_PORT (default 127.0.0.1 5432), PG_BIN (the directory holding pg_ctl
# and pg_basebackup; default: the newest /usr/lib/postgresql/*/bin).
#
# The primary needs streaming replication allowed from 127.0.0.1 for the user postgres.
# `start` checks that a base backup can connect and, when it cannot, adds the line
#     host replication all 127.0.0.1/32 trust
# at the top of the primary's pg_hba.conf (once: it is never added twice) and reloads the
# primary's configuration (pg_reload_conf(): no restart, no connection dropped). `stop`
# leaves that line in place. Nothing else of the primary is changed.
set -euo pipefail

DIR=${AGENTD_REPLICA_DIR:-/tmp/agentd-pg-replica}
PORT=${AGENTD_REPLICA_PORT:-5433}
PRIMARY_HOST=${AGENTD_PRIMARY_HOST:-127.0.0.1}
PRIMARY_PORT=${AGENTD_PRIMARY_PORT:-5432}
HBA_LINE="host replication all 127.0.0.1/32 trust"

die() { echo "pg-replica: $*" >&2; exit 1; }

if [[ -z ${PG_BIN:-} ]]; then
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [[ -n $PG_BIN ]] || PG_BIN=$(dirname "$(command -v pg_ctl || echo /nonexistent/pg_ctl)")
fi
[[ -x $PG_BIN/pg_ctl && -x $PG_BIN/pg_basebackup ]] ||
  die "no pg_ctl and pg_basebackup in $PG_BIN (set PG_BIN)"

# Runs a command as the postgres OS user (the server refuses to run as root).
as_postgres() {
  if [[ $(id -un) == postgres ]]; then
    "$@"
  elif [[ $(id -u) == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    die "run this as root or as the postgres user (the replica runs as postgres)"
  fi
}

primary_sql() { psql -X -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U postgres -d postgres -Atqc "$1"; }
replica_sql() { psql -X -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atqc "$1"; }
running() { [[ -f $DIR/data/postmaster.pid ]] && as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; }

# Lets a base backup connect: adds the replication line to the primary's pg_hba.conf once.
allow_replication() {
  if psql -X "host=$PRIMARY_HOST port=$PRIMARY_PORT user=postgres replication=true dbname=postgres" \
       -Atqc "IDENTIFY_SYSTEM" >/dev/null 2>&1; then
    return 0
  fi
  local hba
  hba=$(primary_sql "SHOW hba_file") || die "cannot reach the primary on $PRIMARY_HOST:$PRIMARY_PORT"
  if ! grep -qxF "$HBA_LINE" "$hba"; then
    echo "pg-replica: adding '$HBA_LINE' to $hba and reloading the primary" >&2
    sed -i "1i $HBA_LINE" "$hba" 2>/dev/null || as_postgres sed -i "1i $HBA_LINE" "$hba" ||
      die "cannot edit $hba: add '$HBA_LINE' at its top and run SELECT pg_reload_conf()"
  fi
  primary_sql "SELECT pg_reload_conf()" >/dev/null
  sleep 0.2
}

# The replica's own configuration: everything it needs is in its data directory (the
# primary's, on Debian, lives in /etc and is not part of the backup).
configure() {
  local data=$DIR/data max
  max=$(primary_sql "SHOW max_connections")
  as_postgres tee "$data/postgresql.conf" >/dev/null <<EOF
# Written by scripts/pg-replica.sh: a throwaway hot standby of $PRIMARY_HOST:$PRIMARY_PORT.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
max_connections = $max
hot_standby = on
hot_standby_feedback = on
ssl = off
fsync = off
cluster_name = 'agentd-replica'
log_line_prefix = '%m [%p] %q%u@%d '
EOF
  as_postgres tee "$data/pg_hba.conf" >/dev/null <<EOF
local all all trust
host all all 127.0.0.1/32 trust
EOF
}

start() {
  [[ -e $DIR/data ]] && die "$DIR/data exists: run '$0 stop' first"
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then die "port $PORT is taken"; fi
  allow_replication
  mkdir -p "$DIR"
  chown postgres: "$DIR" 2>/dev/null || true
  chmod 700 "$DIR" 2>/dev/null || true
  # -R: standby.signal and primary_conninfo; -c fast: an immediate checkpoint, not a paced one.
  as_postgres "$PG_BIN/pg_basebackup" -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U postgres \
    -D "$DIR/data" -R -X stream -c fast >"$DIR/basebackup.log" 2>&1 ||
    die "pg_basebackup failed: $(tail -n 3 "$DIR/basebackup.log")"
  configure
  as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -l "$DIR/replica.log" -w -t 60 start >/dev/null ||
    die "the replica did not start (see $DIR/replica.log)"
  local tries=0
  until [[ $(replica_sql "SELECT pg_is_in_recovery()" 2>/dev/null) == t ]]; do
    (( ++tries < 100 )) || die "the replica does not answer on port $PORT (see $DIR/replica.log)"
    sleep 0.1
  done
  tries=0
  until [[ $(primary_sql "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND application_name = 'agentd-replica'") -ge 1 ]]; do
    (( ++tries < 200 )) || die "the replica does not stream from the primary (see $DIR/replica.log)"
    sleep 0.1
  done
  url agentd
}

stop() {
  if [[ -d $DIR ]]; then
    if [[ -f $DIR/data/postmaster.pid ]]; then
      as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        as_postgres "$PG_BIN/pg_ctl" -D "$DIR/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
  fi
}

status() {
  if ! running; then echo "stopped ($DIR)"; return 3; fi
  local replayed lag
  replayed=$(replica_sql "SELECT pg_is_in_recovery() || ' ' || pg_last_wal_replay_lsn() || ' ' || pg_is_wal_replay_paused()")
  lag=$(primary_sql "SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), -1) FROM pg_stat_replication WHERE application_name = 'agentd-replica'")
  read -r recovery lsn paused <<<"$replayed"
  echo "running port=$PORT in_recovery=$recovery replayed=$lsn paused=$paused lag_bytes=$lag dir=$DIR"
}

url() { echo "postgres://postgres@127.0.0.1:$PORT/${1:-agentd}"; }

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) url "${2:-agentd}" ;;
  pause) replica_sql "SELECT pg_wal_replay_pause()" >/dev/null ;;
  resume) replica_sql "SELECT pg_wal_replay_resume()" >/dev/null ;;
  *) sed -n '2,25p' "$0" >&2; exit 2 ;;
esac
