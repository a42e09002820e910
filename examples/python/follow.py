"""Follow agentd's progress events (CONTRACT §3), deduplicated by (task_id, seq).

    python follow.py [TASK_ID] [--timeout 60]

Binds an exclusive queue to the fanout exchange `agentd.events` and prints one line per
event: `task_id seq type`. Delivery is at least once, so an event may arrive twice (same
event_id and seq): it is printed once. A gap in a task's seq is reported. With a TASK_ID,
only that task is followed and the program exits after its terminal event.
"""

import argparse
import json
import os
import sys
import time

import pika

AMQP_URL = os.environ.get("AGENTD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
EVENTS_EXCHANGE = os.environ.get("AGENTD_EVENTS_EXCHANGE", "agentd.events")
TERMINAL = {"task.completed", "task.failed", "task.cancelled"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_id", nargs="?")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    queue = channel.queue_declare(queue="", exclusive=True).method.queue
    channel.queue_bind(queue=queue, exchange=EVENTS_EXCHANGE)
    print("following", file=sys.stderr, flush=True)

    last_seq = {}  # task_id -> highest seq printed
    pending = {}  # task_id -> {seq: event} that arrived ahead of a gap
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        method, _properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            connection.sleep(0.05)
            continue
        event = json.loads(body)
        task_id = event["task_id"]
        if args.task_id and task_id != args.task_id:
            continue
        seq = event["seq"]
        if seq <= last_seq.get(task_id, 0) or seq in pending.get(task_id, {}):
            continue  # a duplicate: at-least-once delivery
        pending.setdefault(task_id, {})[seq] = event
        # Print in seq order; a later event waits for the ones before it.
        while last_seq.get(task_id, 0) + 1 in pending[task_id]:
            current = pending[task_id].pop(last_seq.get(task_id, 0) + 1)
            last_seq[task_id] = current["seq"]
            print(f"{task_id} {current['seq']} {current['type']}", flush=True)
            if args.task_id and current["type"] in TERMINAL:
                connection.close()
                return 0
        if pending[task_id]:
            print(f"gap in {task_id} after seq {last_seq.get(task_id, 0)}", file=sys.stderr)
    print(f"stopped after {args.timeout} s", file=sys.stderr)
    connection.close()
    return 0 if not args.task_id else 2


if __name__ == "__main__":
    sys.exit(main())
