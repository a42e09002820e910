"""langgraph-peer: the LangGraph + PostgreSQL peer of agentd-bench (docs/performance.md,
"The LangGraph peer").

    benches/peer/run.sh --tasks N --steps K --concurrency C [--llm-latency-ms L]

Creates a fresh database `langgraph_peer_<random>` on the local PostgreSQL, starts the fake
OpenAI-compatible model (fake_model.py, its own process, real loopback HTTP: every task
makes K `calculate` calls, then answers; each reply waits L ms), builds a LangGraph ReAct
agent checkpointed by AsyncPostgresSaver on a connection pool, runs N tasks with C in flight
(each its own thread_id), checks every final state and the stored checkpoints, prints
progress on stderr and one JSON line on stdout, then stops the model and drops the database.
Exit status 1 when anything failed, 2 when the environment is not ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys

DURABILITIES = ("async", "sync", "exit")
# For the automatic timeout, generous on a loaded 2-core machine: per recursion of a task,
# beyond the model's latency, and per recursion of the whole load, because one
# AsyncPostgresSaver runs its database operations one at a time for all tasks.
TIMEOUT_MS_PER_RECURSION = 250
TIMEOUT_MS_PER_SERIAL_RECURSION = 50


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benches/peer/run.sh",
        description="Benchmarks a LangGraph ReAct agent with AsyncPostgresSaver against a fake "
        "OpenAI-compatible model, with agentd-bench's loads and field names.",
    )
    parser.add_argument("--tasks", type=int, default=100, help="tasks to run (default 100)")
    parser.add_argument(
        "--steps",
        type=int,
        default=5,
        help="calculate recursions per task before the answer (default 5)",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="tasks in flight (default 1)")
    parser.add_argument(
        "--llm-latency-ms", type=int, default=0, help="the fake model's wait per reply (default 0)"
    )
    parser.add_argument(
        "--db-pool",
        type=int,
        default=0,
        help="checkpointer pool size (default: concurrency + 4, at most 32, as agentd's worker)",
    )
    parser.add_argument(
        "--durability",
        choices=DURABILITIES,
        default="async",
        help="LangGraph's durability mode (default async, LangGraph's own default)",
    )
    parser.add_argument(
        "--graph",
        choices=("stategraph", "prebuilt"),
        default="stategraph",
        help="the agent's shape (see agent.py; default stategraph)",
    )
    parser.add_argument(
        "--savers",
        type=int,
        default=1,
        help="AsyncPostgresSaver instances sharing the pool, tasks dealt round robin (default 1, LangGraph's documented setup; each saver runs one database operation at a time)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="tasks run before the measured load, not counted (default 1)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=0,
        help="give up after this long (default: from the load)",
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("PEER_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="PostgreSQL to create the run's database on (default $PEER_ADMIN_URL or postgres@127.0.0.1:5432)",
    )
    args = parser.parse_args(argv)
    for name in ("tasks", "concurrency", "savers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.steps < 0 or args.llm_latency_ms < 0 or args.warmup < 0 or args.db_pool < 0:
        parser.error("--steps, --llm-latency-ms, --warmup and --db-pool cannot be negative")
    if args.db_pool == 0:
        args.db_pool = min(args.concurrency + 4, 32)
    if args.timeout_s <= 0:
        waves = -(-args.tasks // args.concurrency)
        recursions = args.steps + 1
        per_task_ms = recursions * (args.llm_latency_ms + TIMEOUT_MS_PER_RECURSION)
        serial_ms = args.tasks * recursions * TIMEOUT_MS_PER_SERIAL_RECURSION
        args.timeout_s = 60 + (waves * per_task_ms + serial_ms) / 1000
    return args


def raise_fd_limit() -> None:
    """A thousand tasks at once hold a thousand model connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # Nothing leaves the machine: no LangSmith tracing whatever the environment says.
    os.environ["LANGSMITH_TRACING"] = "false"
    os.environ["LANGCHAIN_TRACING_V2"] = "false"
    try:
        # Here, not at the top: --help works without the venv.
        import bench_env
        import measure
    except ImportError as err:
        print(
            f"langgraph-peer: {err}: run it through benches/peer/run.sh, which makes the venv",
            file=sys.stderr,
        )
        return 2
    raise_fd_limit()
    try:
        summary = asyncio.run(measure.run(args))
    except bench_env.SetupError as err:
        print(f"langgraph-peer: {err}", file=sys.stderr)
        return 2
    except (measure.RunFailed, TimeoutError) as err:
        print(f"langgraph-peer: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("langgraph-peer: interrupted", file=sys.stderr)
        return 1
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
