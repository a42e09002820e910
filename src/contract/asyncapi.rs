//! The AsyncAPI 3.0.0 document of the broker interface (CONTRACT §2 and §3), built from the
//! contract types themselves: the task message, one message per control message type and
//! one per event type, each with the JSON Schema schemars derives from the Rust type that
//! serde reads or writes. `agentd asyncapi` prints it; `docs/asyncapi.json` is the committed
//! copy, which a unit test keeps equal to it.
//!
//! The document describes a client of agentd: it sends tasks and control messages and
//! receives events (the worker does the opposite). Event messages are split out of
//! `Event`'s own schema (the envelope with `EventData`'s variants flattened into it, one
//! branch per variant), so a new `EventData` variant appears without any change here, and
//! control messages come from `ControlMessage`'s derived schema in the same way.
//!
//! Schemas follow schemars' draft-07 settings because an AsyncAPI 3.0 Schema Object is a
//! superset of JSON Schema draft 07 (no `$defs`, nothing beside a `$ref`); the keywords
//! they use mean the same in 2020-12, which the tests validate with. `serde_json` keeps
//! object keys sorted, so the output is byte-for-byte deterministic.

use schemars::generate::{Contract, SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{ControlMessage, Event, EventType, TaskMessage};

mod broker;

/// The tasks queue (`amqp.tasks_queue`'s default).
pub const TASKS_QUEUE: &str = "agentd.tasks";
/// The control fanout exchange (`amqp.control_exchange`'s default).
pub const CONTROL_EXCHANGE: &str = "agentd.control";
/// The events fanout exchange (`amqp.events_exchange`'s default).
pub const EVENTS_EXCHANGE: &str = "agentd.events";

/// The version of the AsyncAPI AMQP 0-9-1 bindings used.
const AMQP_BINDING: &str = "0.3.0";
/// Where the document keeps its schemas; schemars writes `$ref`s to this path.
const SCHEMAS_PATH: &str = "/components/schemas";

/// Why the document could not be built: a contract type's schema lost a shape this module
/// relies on. It is a bug of this crate, which the unit tests catch.
#[derive(Debug, thiserror::Error)]
pub enum AsyncApiError {
    #[error("unexpected schema for {what}: {reason}")]
    Shape { what: &'static str, reason: String },
    #[error("Event's schema has the event types {found:?}, but EventType::ALL has {expected:?}")]
    EventTypes {
        found: Vec<String>,
        expected: Vec<&'static str>,
    },
    #[error("two different schemas are both named {0}")]
    SchemaClash(String),
    #[error("cannot write the document as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// One message of a channel: its name (the AMQP `type` for control messages and events),
/// the doc comment of its payload type, and its payload schema.
struct Message {
    name: String,
    summary: String,
    payload: Value,
}

/// Builds the document.
pub fn document() -> Result<Value, AsyncApiError> {
    // Producers' messages are described as the worker reads them (optional fields with a
    // default are optional), events as the worker writes them (every field is present).
    let mut inputs = generator(Contract::Deserialize);
    let mut outputs = generator(Contract::Serialize);
    let task = inputs.subschema_for::<TaskMessage>().to_value();
    let controls = control_messages(&mut inputs)?;
    outputs.subschema_for::<Event>();
    let mut schemas = merge(
        inputs.take_definitions(true),
        outputs.take_definitions(true),
    )?;
    let events = event_messages(&schemas)?;
    let uuid = inputs.subschema_for::<Uuid>().to_value();
    schemas.insert(
        "EventHeaders".into(),
        json!({
            "description": "AMQP application headers of an event.",
            "type": "object",
            "properties": {"task_id": with_description(uuid, "The event's task_id.")},
            "required": ["task_id"],
        }),
    );

    let mut messages = Map::new();
    messages.insert("task".into(), broker::task_message(task));
    for message in &controls {
        messages.insert(message.name.clone(), broker::control_message(message));
    }
    for message in &events {
        messages.insert(message.name.clone(), broker::event_message(message));
    }
    Ok(json!({
        "asyncapi": "3.0.0",
        "info": {
            "title": "agentd broker interface",
            "version": "2",
            "description": INFO,
        },
        "defaultContentType": "application/json",
        "servers": broker::servers(),
        "channels": broker::channels(&controls, &events),
        "operations": broker::operations(&controls, &events),
        "components": {"schemas": schemas, "messages": messages},
    }))
}

/// Both generators' schemas, which must agree where they share a name.
fn merge(
    mut schemas: Map<String, Value>,
    more: Map<String, Value>,
) -> Result<Map<String, Value>, AsyncApiError> {
    for (name, schema) in more {
        match schemas.get(&name) {
            Some(known) if *known != schema => return Err(AsyncApiError::SchemaClash(name)),
            _ => schemas.insert(name, schema),
        };
    }
    Ok(schemas)
}

/// The document as committed in `docs/asyncapi.json`: pretty JSON and a final newline.
pub fn to_pretty_json() -> Result<String, AsyncApiError> {
    let mut text = serde_json::to_string_pretty(&document()?)?;
    text.push('\n');
    Ok(text)
}

const INFO: &str = "How producers and subscribers talk to agentd workers through RabbitMQ \
(CONTRACT v2 §2 and §3). This document describes a client: it sends tasks and control \
messages and receives progress events. Generated by `agentd asyncapi` from the contract \
types (src/contract); regenerate with `cargo run -- asyncapi > docs/asyncapi.json`. The \
queue and exchange names are the defaults of config/default.toml (amqp.*), which a \
deployment may change. The worker declares the whole topology itself; producers and \
subscribers need not declare anything but their own queues.";

fn generator(contract: Contract) -> SchemaGenerator {
    SchemaSettings::draft07()
        .with(|settings| {
            settings.definitions_path = SCHEMAS_PATH.into();
            settings.meta_schema = None;
            settings.contract = contract;
        })
        .into_generator()
}

/// One message per `EventData` variant, from the branches of `Event`'s `oneOf`: each
/// branch holds a `type` const and a `data` reference, and the envelope's own properties
/// are beside the `oneOf`. A message's payload is the envelope with its branch merged in.
fn event_messages(schemas: &Map<String, Value>) -> Result<Vec<Message>, AsyncApiError> {
    let shape = |reason: &str| AsyncApiError::Shape {
        what: "Event",
        reason: reason.to_owned(),
    };
    let mut envelope = schemas
        .get("Event")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| shape("not an object"))?;
    let Some(Value::Array(branches)) = envelope.remove("oneOf") else {
        return Err(shape("no oneOf of event types"));
    };
    let mut messages = Vec::new();
    for branch in branches {
        let name = branch
            .pointer("/properties/type/const")
            .and_then(Value::as_str)
            .ok_or_else(|| shape("a branch without a `type` const"))?
            .to_owned();
        let summary = branch
            .pointer("/properties/data/$ref")
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix(&format!("#{SCHEMAS_PATH}/")))
            .and_then(|data| schemas.get(data))
            .and_then(|data| data.get("description"))
            .and_then(Value::as_str)
            .unwrap_or(&name)
            .to_owned();
        let payload = merge_branch(&envelope, &branch)
            .ok_or_else(|| shape("a branch or the envelope without properties or required"))?;
        messages.push(Message {
            name,
            summary,
            payload,
        });
    }
    let found: Vec<String> = messages.iter().map(|m| m.name.clone()).collect();
    let expected: Vec<&'static str> = EventType::ALL.iter().map(EventType::as_str).collect();
    if found != expected {
        return Err(AsyncApiError::EventTypes { found, expected });
    }
    Ok(messages)
}

/// The envelope with one branch's `properties` and `required` added.
fn merge_branch(envelope: &Map<String, Value>, branch: &Value) -> Option<Value> {
    let mut payload = envelope.clone();
    let properties = payload.get_mut("properties")?.as_object_mut()?;
    for (key, schema) in branch.get("properties")?.as_object()? {
        properties.insert(key.clone(), schema.clone());
    }
    let required = payload.get_mut("required")?.as_array_mut()?;
    required.extend(branch.get("required")?.as_array()?.iter().cloned());
    Some(Value::Object(payload))
}

/// One message per `ControlMessage` variant: its derived schema is externally tagged, so
/// each `oneOf` branch has one property, named by the AMQP `type`, whose schema is the body.
fn control_messages(generator: &mut SchemaGenerator) -> Result<Vec<Message>, AsyncApiError> {
    let shape = |reason: &str| AsyncApiError::Shape {
        what: "ControlMessage",
        reason: reason.to_owned(),
    };
    // Called directly, not through `subschema_for`, so that this tagged form, which is not
    // a wire format, stays out of the components.
    let schema: Schema = ControlMessage::json_schema(generator);
    let branches = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("no oneOf of message types"))?;
    let mut messages = Vec::new();
    for branch in branches {
        let properties = branch
            .get("properties")
            .and_then(Value::as_object)
            .filter(|properties| properties.len() == 1)
            .ok_or_else(|| shape("a branch without exactly one property"))?;
        for (name, payload) in properties {
            let summary = payload
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|reference| reference.rsplit('/').next())
                .and_then(|body| generator.definitions().get(body))
                .and_then(|body| body.get("description"))
                .and_then(Value::as_str)
                .unwrap_or(name)
                .to_owned();
            messages.push(Message {
                name: name.clone(),
                summary,
                payload: payload.clone(),
            });
        }
    }
    Ok(messages)
}

fn with_description(schema: Value, description: &str) -> Value {
    match schema {
        Value::Object(mut object) => {
            object.insert("description".into(), description.into());
            Value::Object(object)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests;
