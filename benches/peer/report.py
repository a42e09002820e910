"""Turning a peer run into its JSON line, with agentd-bench's field names where a field
means the same (src/bin/agentd_bench/report.rs) and `peer_` or plain new names where not.
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass
from importlib import metadata

PACKAGES = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-postgres",
    "langgraph-prebuilt",
    "langchain-core",
    "langchain-openai",
    "openai",
    "psycopg",
    "psycopg-pool",
    "aiohttp",
)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def percentile(values: list[float], p: float) -> float:
    """Nearest rank, as agentd-bench computes it; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = math.ceil(p / 100.0 * len(ordered))
    return ordered[min(max(rank, 1), len(ordered)) - 1]


@dataclass
class Resources:
    peak_rss_mib: float
    rss_before_load_mib: float
    worker_cpu_s: float
    model_cpu_s: float
    host_busy_s: float
    postgres_cpu_s: float
    rabbitmq_cpu_s: float
    host_load_1m: float


@dataclass
class Stored:
    """What the checkpointer left in PostgreSQL after the run."""

    threads: int
    checkpoints: int
    checkpoint_writes: int
    checkpoint_blobs: int
    bytes: int


def summary(args, results, recursions: int, llm_calls: int, res: Resources, stored: Stored) -> dict:
    first = min(r.started for r in results)
    last = max(r.ended for r in results)
    wall_s = last - first
    per = max(recursions, 1)
    calls = args.steps + 1
    task_ms = [(r.ended - r.started) * 1e3 for r in results]
    per_recursion = [(ms - args.llm_latency_ms * calls) / calls for ms in task_ms]
    r = lambda value, digits: round(value, digits)
    return {
        "peer": "langgraph",
        "graph": args.graph,
        "durability": args.durability,
        "versions": versions(),
        "tasks": args.tasks,
        "steps": args.steps,
        "concurrency": args.concurrency,
        "llm_latency_ms": args.llm_latency_ms,
        "db_pool": args.db_pool,
        "savers": args.savers,
        "warmup_tasks": args.warmup,
        "recursions": recursions,
        "llm_calls": llm_calls,
        "wall_s": r(wall_s, 3),
        "recursions_per_s": r(recursions / max(wall_s, 1e-9), 1),
        "tasks_per_s": r(args.tasks / max(wall_s, 1e-9), 1),
        "ms_per_recursion_p50": r(percentile(per_recursion, 50), 3),
        "ms_per_recursion_p99": r(percentile(per_recursion, 99), 3),
        "task_ms_p50": r(percentile(task_ms, 50), 2),
        "task_ms_p99": r(percentile(task_ms, 99), 2),
        "peak_rss_mib": r(res.peak_rss_mib, 1),
        "rss_before_load_mib": r(res.rss_before_load_mib, 1),
        "worker_cpu_s": r(res.worker_cpu_s, 2),
        "worker_cpu_ms_per_recursion": r(res.worker_cpu_s * 1e3 / per, 3),
        "model_cpu_s": r(res.model_cpu_s, 2),
        "host_busy_cpu_s": r(res.host_busy_s, 2),
        "host_cpu_ms_per_recursion": r(res.host_busy_s * 1e3 / per, 3),
        "host_cpu_ms_per_recursion_without_model": r(
            (res.host_busy_s - res.model_cpu_s) * 1e3 / per, 3
        ),
        "postgres_cpu_s": r(res.postgres_cpu_s, 2),
        "postgres_cpu_ms_per_recursion": r(res.postgres_cpu_s * 1e3 / per, 3),
        "rabbitmq_cpu_s": r(res.rabbitmq_cpu_s, 2),
        "checkpoint_threads": stored.threads,
        "checkpoint_rows": stored.checkpoints,
        "checkpoint_write_rows": stored.checkpoint_writes,
        "checkpoint_blob_rows": stored.checkpoint_blobs,
        "checkpoint_bytes_per_recursion": r(stored.bytes / per, 1),
        "host_load_1m": res.host_load_1m,
        "host_cores": os.cpu_count() or 1,
        "all_completed": True,
    }
