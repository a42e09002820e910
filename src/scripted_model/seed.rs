//! Scripted replies in the seed-002 output format (observe, thought, action, abstract,
//! short-term memory, step updates): RE_PLAN, CALL_TOOL with native tool calls, REFLECT
//! and ANSWER. By default each echoes the request's trace id and says it is scripted.

use serde_json::{Value, json};

use super::reply::{ModelReply, TRACE_ID_PLACEHOLDER};

/// A seed-002 reply object being written.
#[derive(Debug, Clone)]
pub struct Seed {
    object: Value,
}

impl Seed {
    /// `action {action_type, output}` with `trace_id` (the request's, filled in when the
    /// reply is sent), "fake observe before X", "fake thought choosing X", abstract
    /// "fake X" and an empty `short_term_memory_append`.
    pub fn new(action_type: &str, output: Value) -> Seed {
        Seed {
            object: json!({
                "trace_id": TRACE_ID_PLACEHOLDER,
                "observe": format!("fake observe before {action_type}"),
                "thought": format!("fake thought choosing {action_type}"),
                "action": {"action_type": action_type, "output": output},
                "abstract": format!("fake {action_type}"),
                "short_term_memory_append": ""
            }),
        }
    }

    /// The `observe` text.
    pub fn observe(mut self, text: impl Into<String>) -> Seed {
        self.object["observe"] = Value::String(text.into());
        self
    }

    /// The `thought` text.
    pub fn thought(mut self, text: impl Into<String>) -> Seed {
        self.object["thought"] = Value::String(text.into());
        self
    }

    /// The `abstract` text.
    pub fn summary(mut self, text: impl Into<String>) -> Seed {
        self.object["abstract"] = Value::String(text.into());
        self
    }

    /// `step_updates`: `(step_id, status)` pairs.
    pub fn step_updates(mut self, updates: &[(&str, &str)]) -> Seed {
        let updates: Vec<Value> = updates
            .iter()
            .map(|(step_id, status)| json!({"step_id": step_id, "status": status}))
            .collect();
        self.object["step_updates"] = Value::Array(updates);
        self
    }

    /// Leaves `trace_id` out, as a model that does not echo it.
    pub fn without_trace_id(mut self) -> Seed {
        if let Some(object) = self.object.as_object_mut() {
            object.remove("trace_id");
        }
        self
    }

    /// The object.
    pub fn object(self) -> Value {
        self.object
    }

    /// A completion whose content is the object.
    pub fn reply(self) -> ModelReply {
        ModelReply::json(self.object)
    }

    /// A completion whose content is the object, with these native tool calls (see
    /// [`super::tool_call`]).
    pub fn calling(self, calls: Vec<Value>) -> ModelReply {
        ModelReply::completion(Value::String(self.object.to_string()), Some(calls))
    }
}

/// A seed-002 reply object with the defaults of [`Seed::new`].
pub fn seed_object(action_type: &str, output: Value) -> Value {
    Seed::new(action_type, output).object()
}

/// RE_PLAN with the given `(step_id, description)` steps, all `pending`.
pub fn plan_reply(steps: &[(&str, &str)]) -> ModelReply {
    let plan: Vec<Value> = steps
        .iter()
        .map(|(id, description)| {
            json!({"step_id": id, "description": description, "status": "pending"})
        })
        .collect();
    Seed::new("RE_PLAN", json!({"plan": plan, "notes": ""})).reply()
}

/// CALL_TOOL: the seed object as content plus native tool calls `(name, arguments)` with
/// ids `call_1`, `call_2`, ...
pub fn call_tool_reply(calls: Vec<(&str, Value)>) -> ModelReply {
    ModelReply::tool_calls(seed_object("CALL_TOOL", json!({})), calls)
}

/// REFLECT with `summary`.
pub fn reflect_reply(summary: &str) -> ModelReply {
    Seed::new("REFLECT", json!({"summary": summary})).reply()
}

/// ANSWER with `answer`.
pub fn answer_reply(answer: &str) -> ModelReply {
    Seed::new("ANSWER", json!({"answer": answer})).reply()
}
