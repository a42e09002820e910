"""The peer's fake OpenAI-compatible model: agentd-bench's tool-steps script, in Python.

Runs as its own process (so its CPU is read apart from the agent's) on a free port of
127.0.0.1, real loopback HTTP/1.1 with keep-alive (aiohttp). `POST /v1/chat/completions`
answers like agentd's scripted model (src/scripted_model/steps.rs): while fewer than
`--steps` recursions ran, counted as the assistant messages in the request, one native
`calculate` call with `{"expression": "<done>+1"}` and id `call_<done>`; then a final
answer. Every reply first waits `--latency-ms` and reports 1,000 prompt and 50 completion
tokens. `GET /stats` says how many completions it answered and how many requests it could
not read. It prints `PORT <n>` on stdout once it listens, and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import socket
import sys

from aiohttp import web


def raise_fd_limit() -> None:
    """1000 tasks at once are 1000 connections: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def seed_content(action_type: str, output: dict, done: int) -> str:
    """The content agentd's scripted model sends: a seed-002 object as JSON text, so
    both peers receive replies of about the same size."""
    return json.dumps(
        {
            "trace_id": "scripted",
            "observe": f"fake observe before {action_type}",
            "thought": f"fake thought choosing {action_type}",
            "action": {"action_type": action_type, "output": output},
            "abstract": f"step {done}",
            "short_term_memory_append": "",
        },
        separators=(",", ":"),
    )


def reply_for(done: int, steps: int) -> dict:
    """The completion for the recursion after `done` finished ones."""
    if done >= steps:
        answer = {"answer": f"done after {steps} steps"}
        message = {"role": "assistant", "content": seed_content("ANSWER", answer, done)}
        finish = "stop"
    else:
        call = {
            "id": f"call_{done}",
            "type": "function",
            "function": {
                "name": "calculate",
                "arguments": json.dumps({"expression": f"{done}+1"}, separators=(",", ":")),
            },
        }
        message = {
            "role": "assistant",
            "content": seed_content("CALL_TOOL", {}, done),
            "tool_calls": [call],
        }
        finish = "tool_calls"
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
    }


class Model:
    def __init__(self, steps: int, latency_s: float) -> None:
        self.steps = steps
        self.latency_s = latency_s
        self.answered = 0
        self.unreadable = 0

    async def chat(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
            messages = body["messages"]
            done = sum(1 for m in messages if m.get("role") == "assistant")
        except (ValueError, KeyError, TypeError, AttributeError):
            self.unreadable += 1
            return web.json_response(
                {"error": {"message": "fake model: unreadable request", "code": 400}},
                status=400,
            )
        if body.get("stream") is True:
            self.unreadable += 1
            return web.json_response(
                {"error": {"message": "fake model: streaming is not scripted", "code": 400}},
                status=400,
            )
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        self.answered += 1
        return web.json_response(reply_for(done, self.steps))

    async def stats(self, _request: web.Request) -> web.Response:
        return web.json_response({"answered": self.answered, "unreadable": self.unreadable})


async def serve(steps: int, latency_ms: float) -> None:
    raise_fd_limit()
    model = Model(steps, latency_ms / 1000.0)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", model.chat)
    app.router.add_get("/stats", model.stats)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # A thousand tasks connect at once: a backlog that holds them all.
    sock.listen(4096)
    site = web.SockSite(runner, sock, backlog=4096)
    await site.start()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=5, help="calculate recursions before the answer"
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="wait before each reply")
    args = parser.parse_args()
    asyncio.run(serve(args.steps, args.latency_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
