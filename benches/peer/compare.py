"""The table compare.sh prints: per load, the median of each figure for agentd and for the
LangGraph peer, and how many times better agentd is (> 1: agentd better). Standard library
only. Usage: python3 compare.py [--smoke] RUNS_JSONL (--smoke: no met/missed verdicts)

Each line of RUNS_JSONL is {"round", "load", "system": "agentd" | "langgraph", "result":
the bench's JSON line} or, for a failed run, {"round", "load", "system", "error"}.
"""

from __future__ import annotations

import json
import statistics
import sys

# (field, higher is better, what it is)
FIELDS = [
    ("wall_s", False, "wall time, s"),
    ("recursions_per_s", True, "recursions/s"),
    ("ms_per_recursion_p50", False, "ms per recursion p50"),
    ("ms_per_recursion_p99", False, "ms per recursion p99"),
    ("peak_rss_mib", False, "peak RSS of the agent process, MiB"),
    ("host_cpu_ms_per_recursion", False, "host CPU ms/recursion, every process"),
    (
        "host_cpu_ms_per_recursion_without_model",
        False,
        "host CPU ms/recursion, less model + driver",
    ),
    ("worker_cpu_ms_per_recursion", False, "agent process CPU ms/recursion"),
    ("postgres_cpu_ms_per_recursion", False, "PostgreSQL CPU ms/recursion"),
]

# Issue 29's targets, (load, field, label, target, met(agentd, langgraph)); they hold for the
# full sizes only, not for --smoke.
HEADLINE = [
    ("one_at_a_time", "ms_per_recursion_p50", "one task at a time: ms per recursion p50",
     "<= 1.2", lambda a, p: a <= 1.2),
    ("fifty_at_once", "recursions_per_s", "50 at once: recursions/s",
     ">= 10x LangGraph", lambda a, p: a >= 10 * p),
    ("thousand_x3_1s", "wall_s", "1000 x 3 LLM calls of 1 s: wall s",
     "<= 3.4", lambda a, p: a <= 3.4),
    ("thousand_x3_1s", "peak_rss_mib", "1000 x 3 LLM calls of 1 s: peak RSS MiB",
     "<= 64", lambda a, p: a <= 64),
    ("fifty_at_once", "host_cpu_ms_per_recursion", "50 at once: host CPU ms/recursion",
     "<= 0.7", lambda a, p: a <= 0.7),
    ("fifty_at_once", "host_cpu_ms_per_recursion_without_model", "  same, less model + driver",
     "", None),
]  # fmt: skip
SYSTEMS = ("agentd", "langgraph")


def derive(result: dict) -> dict:
    """agentd-bench's model runs inside the bench process, with its publisher and event
    consumer: its CPU (bench_cpu_s) is what the peer's fake model CPU is on the other side."""
    recursions = result.get("recursions") or 0
    if (
        "host_cpu_ms_per_recursion_without_model" not in result
        and recursions
        and "bench_cpu_s" in result
    ):
        result["host_cpu_ms_per_recursion_without_model"] = (
            (result["host_busy_cpu_s"] - result["bench_cpu_s"]) * 1e3 / recursions
        )
    return result


def medians(runs: list[dict]) -> dict:
    """{(load, system): {field: median}}"""
    out: dict = {}
    for run in runs:
        if "result" not in run:
            continue
        cell = out.setdefault((run["load"], run["system"]), {})
        for field, value in derive(run["result"]).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                cell.setdefault(field, []).append(value)
    return {key: {f: statistics.median(v) for f, v in cell.items()} for key, cell in out.items()}


def better(field: str, agentd: float | None, peer: float | None) -> str:
    if agentd is None or peer is None or agentd <= 0 or peer <= 0:
        return "-"
    higher = next((h for f, h, _ in FIELDS if f == field), False)
    return f"{(agentd / peer if higher else peer / agentd):.2f}x"


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def main(path: str, smoke: bool = False) -> int:
    with open(path) as lines:
        runs = [json.loads(line) for line in lines if line.strip()]
    table = medians(runs)
    loads = list(dict.fromkeys(r["load"] for r in runs))
    failures = [r for r in runs if "error" in r]
    for load in loads:
        counts = {
            s: sum(1 for r in runs if r["load"] == load and r["system"] == s and "result" in r)
            for s in SYSTEMS
        }
        print(f"== {load} (runs: agentd {counts['agentd']}, langgraph {counts['langgraph']})")
        print(f"  {'':44} {'agentd':>12} {'langgraph':>12} {'agentd better':>14}")
        for field, _, label in FIELDS:
            a = table.get((load, "agentd"), {}).get(field)
            p = table.get((load, "langgraph"), {}).get(field)
            print(f"  {label:44} {fmt(a):>12} {fmt(p):>12} {better(field, a, p):>14}")
        a = table.get((load, "agentd"), {}).get("host_load_1m")
        p = table.get((load, "langgraph"), {}).get("host_load_1m")
        print(f"  {'host load (1 min) at the start, not a result':44} {fmt(a):>12} {fmt(p):>12}")
    sizes = "smoke sizes: no verdict" if smoke else "medians"
    print(f"== issue 29's targets ({sizes})")
    print(f"  {'':44} {'agentd':>12} {'langgraph':>12} {'agentd better':>14}  target")
    for load, field, label, target, met in HEADLINE:
        a = table.get((load, "agentd"), {}).get(field)
        p = table.get((load, "langgraph"), {}).get(field)
        verdict = ""
        if met is not None and a is not None and p is not None and not smoke:
            verdict = "met" if met(a, p) else "missed"
        line = f"  {label:44} {fmt(a):>12} {fmt(p):>12} {better(field, a, p):>14}"
        print(f"{line}  {target} {verdict}".rstrip())
    for run in failures:
        print(f"FAILED: round {run['round']} {run['load']} {run['system']}: {run['error']}")
    return 1 if failures else 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--smoke"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args[0], smoke="--smoke" in sys.argv[1:]))
