"""Running the load: `tasks` graph invocations, `concurrency` in flight (a new one starts
each time one ends, as agentd-bench keeps its window full), each on its own thread_id, each
checked against the script: `steps` calculate calls with the right results, then the answer.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

# How often progress goes to stderr.
PROGRESS_EVERY_S = 2.0


@dataclass
class TaskResult:
    thread_id: str
    started: float
    ended: float
    # Model calls the task made (AI messages in its final state).
    recursions: int
    problem: str | None


def check(messages: list, steps: int) -> tuple[int, str | None]:
    """The recursions in a final state and what is wrong with it, if anything."""
    ai = [m for m in messages if isinstance(m, AIMessage)]
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    if len(ai) != steps + 1 or len(tools) != steps:
        return (
            len(ai),
            f"{len(ai)} model replies and {len(tools)} tool results, expected {steps + 1} and {steps}",
        )
    for done, result in enumerate(tools):
        if result.content != str(done + 1) or result.status != "success":
            return len(ai), f"tool result {done} is {result.content!r} ({result.status})"
    last = ai[-1]
    if last.tool_calls or f"done after {steps} steps" not in str(last.content):
        return len(ai), f"the last reply is not the answer: {str(last.content)[:120]!r}"
    return len(ai), None


def config_for(thread_id: str, steps: int) -> dict:
    # Two super-steps per tool recursion plus the answer; the default limit (25) would
    # stop tasks of more than 11 steps.
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": 2 * steps + 10}


async def run_task(graph, index: int, steps: int, durability: str, prefix: str = "") -> TaskResult:
    thread_id = f"{prefix}{uuid.uuid4()}"
    message = HumanMessage(f"bench task {index}: add numbers with the calculate tool")
    started = time.perf_counter()
    try:
        state = await graph.ainvoke(
            {"messages": [message]}, config_for(thread_id, steps), durability=durability
        )
        ended = time.perf_counter()
        recursions, problem = check(state["messages"], steps)
    except Exception as err:  # noqa: BLE001 - a failed task is reported, not fatal
        ended = time.perf_counter()
        recursions, problem = 0, f"{type(err).__name__}: {err}"
    return TaskResult(thread_id, started, ended, recursions, problem)


async def run_load(
    graphs: list,
    tasks: int,
    concurrency: int,
    steps: int,
    durability: str,
    timeout_s: float,
    answered: Callable[[], Awaitable[int]],
) -> list[TaskResult]:
    """Every task's result, or TimeoutError after `timeout_s`. `answered` says how many
    model calls the model has answered so far (for the progress lines)."""
    results: list[TaskResult] = []
    next_index = 0
    began = time.perf_counter()

    async def lane() -> None:
        nonlocal next_index
        while next_index < tasks:
            index = next_index
            next_index += 1
            graph = graphs[index % len(graphs)]
            results.append(await run_task(graph, index, steps, durability))

    async def progress() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            secs = time.perf_counter() - began
            calls = await answered()
            print(
                f"[peer] {secs:6.1f} s: {len(results)}/{tasks} ended, "
                f"{next_index - len(results)} running, {calls} model calls answered "
                f"({calls / secs:.0f}/s)",
                file=sys.stderr,
            )

    reporter = asyncio.create_task(progress())
    try:
        lanes = asyncio.gather(*(lane() for _ in range(min(concurrency, tasks))))
        try:
            await asyncio.wait_for(lanes, timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"timed out after {timeout_s:.0f} s: {next_index} of {tasks} tasks started, "
                f"{len(results)} ended (raise --timeout-s)"
            ) from None
    finally:
        reporter.cancel()
    return results
