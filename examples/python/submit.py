"""Submit one task to agentd and wait for its outcome on a reply queue (CONTRACT §2, §9).

    python submit.py AGENT_ID "What is 6*7?" [--task-id UUID] [--timeout 60]

The task message goes to the default exchange with routing key `agentd.tasks`, persistent,
as JSON. Its AMQP `reply_to` names an exclusive queue this program declared: agentd
publishes the task's terminal event there (task.completed, task.failed or task.cancelled)
with our `correlation_id`, once it is committed. Exit 0 when the task completed.
"""

import argparse
import json
import os
import sys
import time
import uuid

import pika

AMQP_URL = os.environ.get("AGENTD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
TASKS_QUEUE = os.environ.get("AGENTD_TASKS_QUEUE", "agentd.tasks")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent_id")
    parser.add_argument("input")
    parser.add_argument("--task-id", default=str(uuid.uuid4()))
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    # A server-named, exclusive queue: it goes away with this connection.
    reply_queue = channel.queue_declare(queue="", exclusive=True).method.queue
    correlation_id = str(uuid.uuid4())

    task = {"task_id": args.task_id, "agent_id": args.agent_id, "input": args.input}
    channel.confirm_delivery()
    channel.basic_publish(
        exchange="",
        routing_key=TASKS_QUEUE,
        body=json.dumps(task).encode(),
        properties=pika.BasicProperties(
            content_type="application/json",
            delivery_mode=2,  # persistent
            reply_to=reply_queue,
            correlation_id=correlation_id,
        ),
    )
    print(f"submitted {args.task_id}", file=sys.stderr)

    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(reply_queue, auto_ack=True)
        if method is None:
            connection.sleep(0.1)
            continue
        if properties.correlation_id != correlation_id:
            continue  # not ours
        event = json.loads(body)
        print(json.dumps(event))
        connection.close()
        return 0 if event["type"] == "task.completed" else 1
    print(f"no outcome within {args.timeout} s", file=sys.stderr)
    connection.close()
    return 2


if __name__ == "__main__":
    sys.exit(main())
