//! Where each message of the AsyncAPI document goes on the broker: the server, the channels
//! (the tasks queue and the two fanout exchanges with their AMQP bindings), the operations
//! of a client, and the message objects with the AMQP properties each message carries.

use serde_json::{Map, Value, json};

use super::{AMQP_BINDING, CONTROL_EXCHANGE, EVENTS_EXCHANGE, Message, TASKS_QUEUE};

pub(super) fn servers() -> Value {
    json!({
        "rabbitmq": {
            "host": "{host}:{port}",
            "protocol": "amqp",
            "protocolVersion": "0.9.1",
            "description": "The RabbitMQ of `amqp.url` (virtual host `/` by default).",
            "variables": {
                "host": {"default": "127.0.0.1"},
                "port": {"default": "5672"},
            },
        },
    })
}

pub(super) fn task_message(payload: Value) -> Value {
    json!({
        "name": "task",
        "title": "Task message",
        "summary": "One task for an agent.",
        "description": "Persistent (delivery_mode 2) JSON with content_type application/json \
            (another content type, invalid JSON, a missing or blank field, an unknown agent or \
            a body over worker.max_message_bytes is dead-lettered to agentd.tasks.dead with \
            the reason in header x-agentd-reason). A task_id published twice runs once. \
            With the AMQP property reply_to, the task's terminal event is also published, \
            once and after it is committed, to the default exchange with routing key = \
            reply_to and the message's correlation_id (the task_id when absent): see the \
            reply of operation sendTask.",
        "contentType": "application/json",
        "correlationId": {
            "description": "The AMQP property correlation_id, returned on the reply.",
            "location": "$message.header#/correlation_id",
        },
        "payload": payload,
    })
}

pub(super) fn control_message(message: &Message) -> Value {
    json!({
        "name": message.name,
        "title": message.name,
        "summary": message.summary,
        "description": format!(
            "Persistent JSON, AMQP `type` = `{}`. Every worker receives it; the one holding \
            the task acts on it, and a message published while no worker runs waits in \
            agentd.control.pending. With control.signing_keys configured (CONTRACT v3 §15) \
            it is applied only when signed: headers x-agentd-key-id and x-agentd-signature \
            (lowercase hex HMAC-SHA256 of the body under that key).",
            message.name
        ),
        "contentType": "application/json",
        "headers": {
            "type": "object",
            "properties": {
                crate::core::signing::KEY_ID_HEADER: {
                    "type": "string",
                    "description": "The id of the key the message is signed with (control.signing_keys)."
                },
                crate::core::signing::SIGNATURE_HEADER: {
                    "type": "string",
                    "pattern": "^[0-9a-fA-F]{64}$",
                    "description": "Hex HMAC-SHA256 of the exact body bytes under that key's secret."
                }
            }
        },
        "payload": message.payload,
        "bindings": {"amqp": {"messageType": message.name, "bindingVersion": AMQP_BINDING}},
    })
}

pub(super) fn event_message(message: &Message) -> Value {
    json!({
        "name": message.name,
        "title": message.name,
        "summary": message.summary,
        "description": format!(
            "Persistent JSON, AMQP `type` = `{}`, `message_id` = the payload's event_id, \
            header task_id; also stored as the payload of a row of table events.",
            message.name
        ),
        "contentType": "application/json",
        "headers": {"$ref": "#/components/schemas/EventHeaders"},
        "payload": message.payload,
        "bindings": {"amqp": {"messageType": message.name, "bindingVersion": AMQP_BINDING}},
    })
}

/// `{name: {"$ref": "#/components/messages/name"}}` for each message.
fn message_refs<'a>(names: impl Iterator<Item = &'a str>) -> Map<String, Value> {
    names
        .map(|name| {
            let reference = json!({"$ref": format!("#/components/messages/{name}")});
            (name.to_owned(), reference)
        })
        .collect()
}

fn fanout(name: &str) -> Value {
    json!({
        "amqp": {
            "is": "routingKey",
            "exchange": {
                "name": name,
                "type": "fanout",
                "durable": true,
                "autoDelete": false,
                "vhost": "/",
            },
            "bindingVersion": AMQP_BINDING,
        },
    })
}

/// The events that end a task: what a reply carries.
const TERMINAL: [&str; 3] = ["task.completed", "task.failed", "task.cancelled"];

pub(super) fn channels(controls: &[Message], events: &[Message]) -> Value {
    json!({
        "tasks": {
            "address": TASKS_QUEUE,
            "title": "Tasks in",
            "description": "The routing key of the quorum queue agentd.tasks on the default \
                exchange. The queue has x-delivery-limit (worker.max_deliveries, default 5) \
                and dead-letters through the fanout exchange agentd.tasks.dead; a task whose \
                message the broker dead-letters ends failed, reason delivery_limit.",
            "messages": message_refs(std::iter::once("task")),
            "bindings": {
                "amqp": {
                    "is": "routingKey",
                    "exchange": {"type": "default", "vhost": "/"},
                    "bindingVersion": AMQP_BINDING,
                },
            },
        },
        "control": {
            "address": CONTROL_EXCHANGE,
            "title": "Control messages",
            "description": "Durable fanout exchange (the routing key is ignored): every \
                worker receives every control message, named by its AMQP `type`; a message \
                of an unknown type is ignored (with a warning in the worker's log).",
            "messages": message_refs(controls.iter().map(|m| m.name.as_str())),
            "bindings": fanout(CONTROL_EXCHANGE),
        },
        "replies": {
            "address": null,
            "title": "Replies to producers",
            "description": "The queue named by a task message's reply_to (on the default \
                exchange; typically the producer's exclusive queue): the task's terminal \
                event, the same JSON as on agentd.events, with the message's correlation_id \
                (the task_id when absent), published once after it is committed (a worker \
                that died before sending it leaves it owed in the tasks row, and any worker \
                sends it within 5 s).",
            "messages": message_refs(TERMINAL.into_iter()),
        },
        "events": {
            "address": EVENTS_EXCHANGE,
            "title": "Progress events",
            "description": "Durable fanout exchange; bind a queue of your own. Delivery is at \
                least once: dedupe by (task_id, seq). seq starts at 1 per task and grows by \
                exactly 1; exactly one of task.completed, task.failed and task.cancelled \
                ends every task, as its last event.",
            "messages": message_refs(events.iter().map(|m| m.name.as_str())),
            "bindings": fanout(EVENTS_EXCHANGE),
        },
    })
}

/// `[{"$ref": "#/channels/channel/messages/name"}]` for each message.
fn channel_messages<'a>(channel: &str, names: impl Iterator<Item = &'a str>) -> Value {
    names
        .map(|name| json!({"$ref": format!("#/channels/{channel}/messages/{name}")}))
        .collect()
}

pub(super) fn operations(controls: &[Message], events: &[Message]) -> Value {
    let persistent = json!({"amqp": {"deliveryMode": 2, "bindingVersion": AMQP_BINDING}});
    json!({
        "sendTask": {
            "action": "send",
            "channel": {"$ref": "#/channels/tasks"},
            "summary": "Submit a task (or run `agentd submit`).",
            "messages": channel_messages("tasks", std::iter::once("task")),
            "bindings": persistent,
            "reply": {
                "address": {
                    "description": "The task message's AMQP property reply_to.",
                    "location": "$message.header#/reply_to",
                },
                "channel": {"$ref": "#/channels/replies"},
                "messages": channel_messages("replies", TERMINAL.into_iter()),
            },
        },
        "sendControl": {
            "action": "send",
            "channel": {"$ref": "#/channels/control"},
            "summary": "Act on a task wherever it is (or run `agentd cancel`).",
            "messages": channel_messages("control", controls.iter().map(|m| m.name.as_str())),
            "bindings": persistent,
        },
        "receiveEvents": {
            "action": "receive",
            "channel": {"$ref": "#/channels/events"},
            "summary": "Follow every task's progress (or run `agentd watch`).",
            "messages": channel_messages("events", events.iter().map(|m| m.name.as_str())),
        },
    })
}
