"""One measured peer run: the database and the fake model set up, the warm-up, the load
between two readings of /proc, the checks (every final state, the model's call count, the
threads in PostgreSQL, a few states read back through the checkpointer) and the summary.
"""

from __future__ import annotations

import sys

import agent
import bench_env
import drive
import procfs
import report
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

# Final states read back through the checkpointer after the run, to check what it stored.
SAMPLED_STATES = 3


class RunFailed(Exception):
    """The load ran but something in it did not do what the script says."""


async def read_stored(pool) -> report.Stored:
    """Counts and row bytes of the measured threads (the warm-up's are left out)."""
    measured = "thread_id NOT LIKE 'warmup-%'"
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                f"""SELECT
                  (SELECT count(DISTINCT thread_id) FROM checkpoints WHERE {measured}) AS threads,
                  (SELECT count(*) FROM checkpoints WHERE {measured}) AS checkpoints,
                  (SELECT count(*) FROM checkpoint_writes WHERE {measured}) AS writes,
                  (SELECT count(*) FROM checkpoint_blobs WHERE {measured}) AS blobs,
                  (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c WHERE {measured})
                  + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w WHERE {measured})
                  + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b WHERE {measured})
                  AS bytes"""
            )
        ).fetchone()
    return report.Stored(
        row["threads"], row["checkpoints"], row["writes"], row["blobs"], int(row["bytes"])
    )


async def check_states(graph, results, steps: int) -> None:
    """A few final states read back from PostgreSQL: finished, with every message."""
    for result in results[:SAMPLED_STATES]:
        state = await graph.aget_state(drive.config_for(result.thread_id, steps))
        messages = state.values.get("messages", [])
        if state.next or len(messages) != 2 * steps + 2:
            raise RunFailed(
                f"thread {result.thread_id}: the stored state has {len(messages)} messages "
                f"and next {state.next}, expected {2 * steps + 2} and ()"
            )


class Window:
    """The /proc readings at the start of the load, and what was used since."""

    def __init__(self, model_pid: int) -> None:
        self.model_pid = model_pid
        self.load = procfs.load_average()
        self.rss_mib = procfs.vm_kib("self", "VmRSS") / 1024
        self.processes = procfs.cpu_by_process()
        self.host = procfs.host_busy_secs()
        self.me = procfs.process_cpu_secs("self")
        self.model = procfs.process_cpu_secs(model_pid)

    def resources(self) -> report.Resources:
        services = procfs.cpu_by_service(self.processes, procfs.cpu_by_process())
        return report.Resources(
            peak_rss_mib=procfs.vm_kib("self", "VmHWM") / 1024,
            rss_before_load_mib=self.rss_mib,
            worker_cpu_s=procfs.process_cpu_secs("self") - self.me,
            model_cpu_s=procfs.process_cpu_secs(self.model_pid) - self.model,
            host_busy_s=procfs.host_busy_secs() - self.host,
            postgres_cpu_s=services.get("postgres", 0.0),
            rabbitmq_cpu_s=services.get("rabbitmq", 0.0),
            host_load_1m=self.load,
        )


async def measure_load(args, url: str, model) -> dict:
    pool = AsyncConnectionPool(
        url,
        min_size=args.db_pool,
        max_size=args.db_pool,
        open=False,
        # What LangGraph's documentation gives AsyncPostgresSaver's pool.
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    await pool.open(wait=True, timeout=30)
    try:
        # One saver is LangGraph's documented setup. Each holds an asyncio.Lock around every
        # database operation, pool or not, so --savers N (N graphs on one pool, tasks dealt
        # round robin) shows what that lock costs.
        savers = [AsyncPostgresSaver(pool) for _ in range(args.savers)]
        await savers[0].setup()
        chat = agent.chat_model(model.base_url)
        graphs = [agent.build(args.graph, chat, saver) for saver in savers]
        graph = graphs[0]
        for index in range(args.warmup):
            warm = await drive.run_task(graph, index, args.steps, args.durability, "warmup-")
            if warm.problem:
                raise RunFailed(f"the warm-up task failed: {warm.problem}")
        answered_before = (await model.stats())["answered"]
        print(
            f"[peer] {args.tasks} tasks x {args.steps + 1} recursions, concurrency "
            f"{args.concurrency}, LLM latency {args.llm_latency_ms} ms, graph {args.graph}, "
            f"durability {args.durability}, pool {args.db_pool}, savers {args.savers}",
            file=sys.stderr,
        )
        window = Window(model.pid)

        async def answered() -> int:
            return (await model.stats())["answered"] - answered_before

        results = await drive.run_load(
            graphs,
            args.tasks,
            args.concurrency,
            args.steps,
            args.durability,
            args.timeout_s,
            answered,
        )
        resources = window.resources()
        problems = [f"thread {r.thread_id}: {r.problem}" for r in results if r.problem]
        if problems:
            raise RunFailed(
                f"{len(problems)} of {args.tasks} tasks failed:\n  " + "\n  ".join(problems[:5])
            )
        stats = await model.stats()
        llm_calls = stats["answered"] - answered_before
        recursions = sum(r.recursions for r in results)
        if stats["unreadable"] or llm_calls != args.tasks * (args.steps + 1):
            raise RunFailed(
                f"the model answered {llm_calls} calls ({stats['unreadable']} unreadable), expected {args.tasks * (args.steps + 1)}"
            )
        stored = await read_stored(pool)
        if stored.threads != args.tasks:
            raise RunFailed(f"checkpoints hold {stored.threads} threads, expected {args.tasks}")
        await check_states(graph, results, args.steps)
        return report.summary(args, results, recursions, llm_calls, resources, stored)
    finally:
        await pool.close()


async def run(args) -> dict:
    name, url = await bench_env.create_database(args.admin_url)
    print(f"[peer] database {name}", file=sys.stderr)
    try:
        model = await bench_env.FakeModel.start(args.steps, args.llm_latency_ms)
        try:
            return await measure_load(args, url, model)
        finally:
            await model.stop()
    finally:
        await bench_env.drop_database(args.admin_url, name)
