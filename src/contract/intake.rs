//! Parse, don't validate: an AMQP task message body becomes a [`TaskSpec`] before it reaches
//! the core, or a [`Rejection`] with a reason (CONTRACT §2). Pure: no I/O. The message's
//! properties (its `reply_to`, CONTRACT §9) are the worker's to read.
//!
//! What a producer wrote is made storable here, at the door (`core::storable`: NUL becomes
//! U+FFFD in the input and the constraints), so that no write of the task can fail on it;
//! and a reason quotes a bad value only in part (`core::bounded`), since it ends up in an
//! AMQP header, a row and a log line.

use serde::Deserialize;

use crate::core::budget::Budget;
use crate::core::fair_share::Priority;
use crate::core::rerun::{RerunMode, RerunSpec};
use crate::core::versions::{self, Requested};
use crate::core::{bounded, storable, tenancy};
use serde_json::Value;
use uuid::Uuid;

/// A validated task message.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub task_id: Uuid,
    pub agent_id: Uuid,
    pub input: String,
    pub conversation_id: Option<Uuid>,
    pub constraints: Vec<String>,
    pub stream: bool,
    /// The message's budget (CONTRACT §8); the agent's applies when absent.
    pub budget: Option<Budget>,
    /// The agent version or channel the message names (CONTRACT §11).
    pub requested: Requested,
    /// The tenant the message names (CONTRACT v3 §15); `None`: its agent's.
    pub tenant_id: Option<String>,
    /// Its place within its tenant's waiting tasks (CONTRACT v3 §15).
    pub priority: Priority,
    /// The message's `rerun` (CONTRACT v3 §13). A rerun takes its source's agent, input and
    /// constraints: until the worker has read the source (`worker::rerun::resolve`),
    /// `agent_id` is the message's or nil and `input` the message's or empty.
    pub rerun: Option<RerunSpec>,
}

/// Why a message is refused, with whatever could still be read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    /// The task id, when the message named a valid one.
    pub task_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    pub input: Option<String>,
    pub conversation_id: Option<Uuid>,
    /// The tenant the message named, when it was a valid one (boxed: a rejection stays
    /// small enough to return by value).
    pub tenant_id: Option<Box<str>>,
}

impl Rejection {
    fn unread(reason: impl Into<String>) -> Self {
        Self {
            reason: storable_reason(reason.into()),
            task_id: None,
            agent_id: None,
            input: None,
            conversation_id: None,
            tenant_id: None,
        }
    }
}

/// The wire shape, every field optional so that a partly valid message still yields its ids.
#[derive(Debug, Deserialize)]
struct RawTask {
    task_id: Option<Value>,
    agent_id: Option<Value>,
    input: Option<Value>,
    conversation_id: Option<Value>,
    constraints: Option<Value>,
    stream: Option<Value>,
    budget: Option<Value>,
    agent_version: Option<Value>,
    channel: Option<Value>,
    tenant_id: Option<Value>,
    priority: Option<Value>,
    rerun: Option<Value>,
}

/// Parses a task message body. `content_type` is the AMQP property, when set.
pub fn parse_task(
    body: &[u8],
    content_type: Option<&str>,
    max_bytes: usize,
) -> Result<TaskSpec, Rejection> {
    if body.len() > max_bytes {
        return Err(Rejection::unread(format!(
            "message is {} bytes, larger than worker.max_message_bytes ({max_bytes})",
            body.len()
        )));
    }
    if let Some(kind) = content_type {
        let essence = kind.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(Rejection::unread(format!(
                "content_type is {kind:?}; task messages must be application/json"
            )));
        }
    }
    let raw: RawTask = match serde_json::from_slice::<Value>(body) {
        Ok(value @ Value::Object(_)) => serde_json::from_value(value)
            .map_err(|err| Rejection::unread(format!("invalid task message: {err}")))?,
        Ok(_) => return Err(Rejection::unread("task message must be a JSON object")),
        Err(err) => {
            return Err(Rejection::unread(format!(
                "task message is not valid JSON: {err}"
            )));
        }
    };
    validate(raw)
}

/// The task id a message body names, when it names a valid one, without reading the rest
/// (a message the broker dead-lettered: its task is ended by id).
pub fn task_id_of(body: &[u8]) -> Option<Uuid> {
    let raw: RawTask = serde_json::from_slice(body).ok()?;
    optional_uuid(raw.task_id.as_ref(), "task_id")
        .ok()
        .flatten()
}

fn validate(raw: RawTask) -> Result<TaskSpec, Rejection> {
    let mut rejection = Rejection::unread("");
    let mut problems = Vec::new();
    let task_id = match optional_uuid(raw.task_id.as_ref(), "task_id") {
        Ok(id) => id,
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    rejection.task_id = task_id;
    let rerun = rerun(raw.rerun).unwrap_or_else(|problem| {
        problems.push(problem);
        None
    });
    // A rerun takes its source's agent and input: the message may leave them out.
    let from_source = rerun.is_some();
    let agent_id = match optional_uuid(raw.agent_id.as_ref(), "agent_id") {
        Ok(None) if from_source => Some(Uuid::nil()),
        Ok(None) => {
            problems.push("agent_id is required".to_owned());
            None
        }
        Ok(id) => id,
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    rejection.agent_id = agent_id.filter(|id| !id.is_nil());
    let input = match raw.input {
        Some(Value::String(text)) if !text.trim().is_empty() => Some(storable::owned(text)),
        Some(Value::String(_)) => {
            problems.push("input must not be empty".to_owned());
            None
        }
        None | Some(Value::Null) if from_source => Some(String::new()),
        None | Some(Value::Null) => {
            problems.push("input is required".to_owned());
            None
        }
        Some(_) => {
            problems.push("input must be a string".to_owned());
            None
        }
    };
    rejection.input = input.clone().filter(|text| !text.is_empty());
    let conversation_id = optional_uuid(raw.conversation_id.as_ref(), "conversation_id")
        .unwrap_or_else(|problem| {
            problems.push(problem);
            None
        });
    rejection.conversation_id = conversation_id;
    if from_source {
        // A rerun takes the source's constraints and no conversation (CONTRACT v3 §13).
        if !matches!(raw.conversation_id, None | Some(Value::Null)) {
            problems.push("a rerun takes no conversation_id".to_owned());
        }
        if !matches!(raw.constraints, None | Some(Value::Null)) {
            problems
                .push("a rerun takes its source's constraints: leave constraints out".to_owned());
        }
    }
    let constraints = constraints(raw.constraints).unwrap_or_else(|problem| {
        problems.push(problem);
        Vec::new()
    });
    let stream = match raw.stream {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => flag,
        Some(_) => {
            problems.push("stream must be a boolean".to_owned());
            false
        }
    };
    let budget = parse_budget(raw.budget).unwrap_or_else(|problem| {
        problems.push(problem);
        None
    });
    let requested = requested(raw.agent_version, raw.channel).unwrap_or_else(|problem| {
        problems.push(problem);
        Requested::Default
    });
    let tenant_id = tenant(raw.tenant_id).unwrap_or_else(|problem| {
        problems.push(problem);
        None
    });
    rejection.tenant_id = tenant_id.as_deref().map(Box::from);
    let priority = priority(raw.priority).unwrap_or_else(|problem| {
        problems.push(problem);
        Priority::Normal
    });
    match (agent_id, input) {
        (Some(agent_id), Some(input)) if problems.is_empty() => Ok(TaskSpec {
            task_id: task_id.unwrap_or_else(Uuid::now_v7),
            agent_id,
            input,
            conversation_id,
            constraints,
            stream,
            budget,
            requested,
            tenant_id,
            priority,
            rerun,
        }),
        _ => {
            let reason = format!("invalid task message: {}", problems.join("; "));
            rejection.reason = storable_reason(reason);
            Err(rejection)
        }
    }
}

/// A reason as it may go into an AMQP header, `tasks.error` and a log line: bounded, and
/// storable (a serde message may quote what it could not read).
fn storable_reason(reason: String) -> String {
    storable::owned(bounded::reason_owned(reason))
}

fn optional_uuid(value: Option<&Value>, field: &str) -> Result<Option<Uuid>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Uuid::parse_str(text)
            .map(Some)
            .map_err(|_| format!("{field} is not a valid UUID: {}", bounded::quote(text))),
        Some(_) => Err(format!("{field} must be a UUID string")),
    }
}

/// A budget object (CONTRACT §8); limits must be positive, unknown keys are refused.
pub fn parse_budget(value: Option<Value>) -> Result<Option<Budget>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Object(_)) => {
            let budget: Budget =
                serde_json::from_value(value).map_err(|err| format!("invalid budget: {err}"))?;
            // The price check needs the model: it is made once the agent is known.
            let no_price_check = crate::core::budget::Price {
                input_per_mtok: 0.0,
                output_per_mtok: 0.0,
            };
            budget
                .validate(Some(&no_price_check), "")
                .map_err(|err| format!("invalid budget: {err}"))?;
            Ok(Some(budget))
        }
        Some(_) => Err("budget must be an object".to_owned()),
    }
}

/// The message's `agent_version` (an integer >= 1) or `channel` (a name), not both.
fn requested(version: Option<Value>, channel: Option<Value>) -> Result<Requested, String> {
    let version = match version {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_i64().and_then(|v| i32::try_from(v).ok()) {
            Some(v) if v >= 1 => Some(v),
            _ => return Err("agent_version must be an integer of at least 1".to_owned()),
        },
        Some(_) => return Err("agent_version must be an integer".to_owned()),
    };
    let channel = match channel {
        None | Some(Value::Null) => None,
        Some(Value::String(name))
            if !name.trim().is_empty() && name.chars().count() <= versions::MAX_CHANNEL_CHARS =>
        {
            Some(storable::owned(name))
        }
        Some(Value::String(_)) => {
            return Err(format!(
                "channel must be 1 to {} characters",
                versions::MAX_CHANNEL_CHARS
            ));
        }
        Some(_) => return Err("channel must be a string".to_owned()),
    };
    match (version, channel) {
        (Some(_), Some(_)) => Err("name agent_version or channel, not both".to_owned()),
        (Some(version), None) => Ok(Requested::Version(version)),
        (None, Some(channel)) => Ok(Requested::Channel(channel)),
        (None, None) => Ok(Requested::Default),
    }
}

/// The message's `tenant_id` (CONTRACT v3 §15): a tenant id as `core::tenancy` allows.
fn tenant(value: Option<Value>) -> Result<Option<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => tenancy::parse_tenant(&text, false)
            .map(Some)
            .map_err(|err| format!("tenant_id {}: {err}", bounded::quote(&text))),
        Some(_) => Err("tenant_id must be a string".to_owned()),
    }
}

/// The message's `rerun` (CONTRACT v3 §13): `{"source_task_id", "llm"?, "tools"?}`, modes
/// `recorded` (the default) or `live`; other keys are refused.
fn rerun(value: Option<Value>) -> Result<Option<RerunSpec>, String> {
    let fields = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(fields)) => fields,
        Some(_) => return Err("rerun must be an object".to_owned()),
    };
    if let Some(unknown) = fields
        .keys()
        .find(|key| !matches!(key.as_str(), "source_task_id" | "llm" | "tools"))
    {
        return Err(format!(
            "rerun has an unknown field {} (source_task_id, llm, tools)",
            bounded::quote(unknown)
        ));
    }
    let source_task_id = match optional_uuid(fields.get("source_task_id"), "rerun.source_task_id")?
    {
        Some(id) => id,
        None => return Err("rerun.source_task_id is required".to_owned()),
    };
    let mode = |field: &str| match fields.get(field) {
        None | Some(Value::Null) => Ok(RerunMode::Recorded),
        Some(Value::String(text)) => RerunMode::parse(text, field),
        Some(_) => Err(format!("rerun.{field} must be \"recorded\" or \"live\"")),
    };
    Ok(Some(RerunSpec {
        source_task_id,
        llm: mode("llm")?,
        tools: mode("tools")?,
    }))
}

/// The message's `priority`: `high` or `normal` (the default).
fn priority(value: Option<Value>) -> Result<Priority, String> {
    match value {
        None | Some(Value::Null) => Ok(Priority::Normal),
        Some(Value::String(name)) => Priority::parse(&name),
        Some(_) => Err("priority must be \"high\" or \"normal\"".to_owned()),
    }
}

fn constraints(value: Option<Value>) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(text) => Ok(storable::owned(text)),
                _ => Err("constraints must be a list of strings".to_owned()),
            })
            .collect(),
        Some(_) => Err("constraints must be a list of strings".to_owned()),
    }
}

#[cfg(test)]
mod tests;
