#!/usr/bin/env bash
# agentd against the LangGraph + PostgreSQL peer, in one run on this machine: the loads of
# scripts/bench-ab.sh, agentd-bench (release build) and benches/peer/run.sh alternating in
# every round (the order flips each round, so both see the same host), then the median of
# each figure per system and how many times better agentd is. Usage:
#
#   bash benches/peer/compare.sh [--smoke] [--release-dir DIR] [--peer-args "ARGS"] [ROUNDS]
#
#   ROUNDS         rounds of the three loads (default 3)
#   --smoke        small sizes (20 x 6 one at a time, 100 x 6 at 50, 100 x 3 calls of 1 s
#                  at once): proves the set-up, measures nothing worth quoting
#   --release-dir  where agentd and agentd-bench are (default target/release, built with
#                  `cargo build --release --bins` when missing)
#   --peer-args    extra options for the peer, e.g. "--durability sync" or "--savers 50"
#
# The four figures of issue 29 come from three loads: one task at a time (200 x 6
# recursions), 50 at once (1000 x 6, instant model; throughput and host CPU per recursion)
# and 1000 at once (1000 x 3 model calls of 1 s; wall time and peak RSS). Every run's JSON
# line goes to target/peer-compare/runs.jsonl, their stderr to stderr.log there.
# Needs the local PostgreSQL (both) and RabbitMQ (agentd); PyPI once, for the peer's venv.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

usage() { sed -n '2,20p' "$here/compare.sh" | sed 's/^# \{0,1\}//'; }
fail() { echo "benches/peer/compare.sh: $*" >&2; exit 2; }

rounds=3 smoke=0 release="" peer_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --smoke) smoke=1 ;;
    --release-dir) release=${2:?--release-dir needs a folder}; shift ;;
    --peer-args) peer_args=${2?--peer-args needs a value}; shift ;;
    [0-9]*) rounds=$1 ;;
    *) usage >&2; fail "unknown argument: $1" ;;
  esac
  shift
done
[ "$rounds" -ge 1 ] 2>/dev/null || fail "ROUNDS must be a whole number of at least 1"

if [ -z "$release" ]; then
  release=target/release
  if [ ! -x "$release/agentd-bench" ] || [ ! -x "$release/agentd" ]; then
    echo "[compare] building agentd in release (cargo build --release --bins)" >&2
    cargo build --release --bins || fail "the release build failed"
  fi
fi
for bin in agentd agentd-bench; do
  [ -x "$release/$bin" ] || fail "no $release/$bin (build with cargo build --release --bins)"
done

bash "$here/run.sh" --setup
venv=${PEER_VENV:-$root/target/peer-venv}
admin=${PEER_ADMIN_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
"$venv/bin/python" - "$admin" <<'PY' || fail "PostgreSQL is not reachable (see above)"
import sys, psycopg
try:
    psycopg.connect(sys.argv[1], connect_timeout=5).close()
except psycopg.OperationalError as err:
    sys.exit(f"cannot connect to {sys.argv[1]}: {str(err).strip()}")
PY

if [ "$smoke" = 1 ]; then
  loads=(
    "one_at_a_time|--tasks 20 --steps 5 --concurrency 1"
    "fifty_at_once|--tasks 100 --steps 5 --concurrency 50"
    "thousand_x3_1s|--tasks 100 --steps 2 --concurrency 100 --llm-latency-ms 1000"
  )
else
  loads=(
    "one_at_a_time|--tasks 200 --steps 5 --concurrency 1"
    "fifty_at_once|--tasks 1000 --steps 5 --concurrency 50"
    "thousand_x3_1s|--tasks 1000 --steps 2 --concurrency 1000 --llm-latency-ms 1000"
  )
fi

out=target/peer-compare
mkdir -p "$out"
: > "$out/runs.jsonl"
: > "$out/stderr.log"
for round in $(seq 1 "$rounds"); do
  systems=(agentd langgraph)
  [ $((round % 2)) = 0 ] && systems=(langgraph agentd)
  for load in "${loads[@]}"; do
    name=${load%%|*}
    args=${load#*|}
    for system in "${systems[@]}"; do
      echo "== round $round $name $system" >> "$out/stderr.log"
      if [ "$system" = agentd ]; then
        # shellcheck disable=SC2086
        cmd=("$release/agentd-bench" $args --worker-bin "$release/agentd")
      else
        # shellcheck disable=SC2086
        cmd=(bash "$here/run.sh" $args $peer_args)
      fi
      if line=$("${cmd[@]}" 2>>"$out/stderr.log" | tail -n 1) && [ "${line:0:1}" = "{" ]; then
        printf '{"round":%s,"load":"%s","system":"%s","result":%s}\n' \
          "$round" "$name" "$system" "$line" >> "$out/runs.jsonl"
        echo "[compare] round $round $name $system done" >&2
      else
        printf '{"round":%s,"load":"%s","system":"%s","error":"failed, see %s/stderr.log"}\n' \
          "$round" "$name" "$system" "$out" >> "$out/runs.jsonl"
        echo "[compare] round $round $name $system FAILED (see $out/stderr.log)" >&2
      fi
    done
  done
done
if [ "$smoke" = 1 ]; then
  echo "(smoke sizes: the figures prove the set-up only)"
  python3 "$here/compare.py" --smoke "$out/runs.jsonl"
else
  python3 "$here/compare.py" "$out/runs.jsonl"
fi
