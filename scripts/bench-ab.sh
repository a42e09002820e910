#!/usr/bin/env bash
# Paired A/B of two agentd builds with agentd-bench: the same three loads, alternating
# "before" and "now" in each round so that both see the same host load, then the median of
# each figure per build. Usage:
#   scripts/bench-ab.sh BEFORE_RELEASE_DIR [ROUNDS]     (default 3 rounds)
# BEFORE_RELEASE_DIR holds the earlier build's agentd and agentd-bench (e.g. a worktree's
# target/release): each build runs with its own bench, which migrates its own schema. The
# "now" build is target/release (run `cargo build --release --bins` first). Figures an older
# bench does not print are derived where possible (host CPU per recursion from
# host_busy_cpu_s) or left out.
# One JSON line per run goes to target/bench-ab/runs.jsonl; the medians are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: scripts/bench-ab.sh BEFORE_RELEASE_DIR [ROUNDS]}
rounds=${2:-3}
now=target/release
out=target/bench-ab
mkdir -p "$out"
: > "$out/runs.jsonl"
loads=(
  "one_at_a_time|--tasks 200 --steps 5 --concurrency 1"
  "fifty_at_once|--tasks 1000 --steps 5 --concurrency 50"
  "thousand_x3_1s|--tasks 1000 --steps 2 --concurrency 1000 --llm-latency-ms 1000"
)
for round in $(seq 1 "$rounds"); do
  for load in "${loads[@]}"; do
    name=${load%%|*}
    args=${load#*|}
    for build in before now; do
      dir=$now
      [ "$build" = before ] && dir=$before
      # shellcheck disable=SC2086
      line=$("$dir/agentd-bench" $args --worker-bin "$dir/agentd" 2>>"$out/stderr.log" | tail -n 1)
      printf '{"round":%s,"load":"%s","build":"%s","result":%s}\n' \
        "$round" "$name" "$build" "$line" >> "$out/runs.jsonl"
      echo "round $round $name $build done" >&2
    done
  done
done
python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
for run in runs:
    result = run["result"]
    recursions = result.get("recursions") or (result.get("tasks", 0) * result.get("recursions_per_task", 0))
    if "host_cpu_ms_per_recursion" not in result and result.get("host_busy_cpu_s") and recursions:
        result["host_cpu_ms_per_recursion"] = result["host_busy_cpu_s"] * 1e3 / recursions
fields = ["wall_s", "recursions_per_s", "ms_per_recursion_p50", "ms_per_recursion_p99",
          "start_latency_ms_p50", "peak_rss_mib", "host_cpu_ms_per_recursion",
          "worker_cpu_ms_per_recursion", "postgres_cpu_ms_per_recursion",
          "rabbitmq_cpu_ms_per_recursion"]
for load in dict.fromkeys(r["load"] for r in runs):
    print(f"== {load}")
    for field in fields:
        cells = []
        for build in ("before", "now"):
            values = [r["result"].get(field) for r in runs
                      if r["load"] == load and r["build"] == build]
            values = [v for v in values if isinstance(v, (int, float))]
            cells.append(f"{statistics.median(values):.3f}" if values else "-")
        print(f"  {field:32} before {cells[0]:>10}   now {cells[1]:>10}")
PY
