//! Reruns (CONTRACT v3 §13): a task reproduced from the record of an ended one. Pure: the
//! modes a rerun message names, the decision for each LLM call (answer it from the source's
//! record while the canonical request key matches, else end the task) and for each tool
//! call (the source's result for the same call, else run it only when it has no side
//! effect, unless tools are `live`). The worker loads the source's record and carries the
//! decisions out (`worker::rerun`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::core::types::ToolEffect;

/// Where a rerun's model replies or tool results come from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RerunMode {
    /// From the source's record (the default).
    #[default]
    Recorded,
    /// From the provider or the tools themselves, as any task.
    Live,
}

impl RerunMode {
    /// The wire name (`recorded`, `live`), also stored in `tasks.rerun_llm` / `rerun_tools`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Live => "live",
        }
    }

    /// Reads a wire name; anything else is refused with a reason naming `field`.
    pub fn parse(text: &str, field: &str) -> Result<Self, String> {
        match text {
            "recorded" => Ok(Self::Recorded),
            "live" => Ok(Self::Live),
            _ => Err(format!(
                "rerun.{field} must be \"recorded\" or \"live\", not {}",
                crate::core::bounded::quote(text)
            )),
        }
    }
}

/// A task's rerun: its source and where replies and results come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RerunSpec {
    /// The ended task whose record is replayed (`tasks.rerun_of`).
    pub source_task_id: Uuid,
    /// `recorded` (default): model replies from the source's record, no provider call.
    #[serde(default)]
    pub llm: RerunMode,
    /// `recorded` (default): the source's tool results; side-effecting tools never run.
    #[serde(default)]
    pub tools: RerunMode,
}

/// The source's successful attempt of one recursion, as its `llm_calls` row holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAttempt {
    /// `llm_calls.request_key`: none when the source recorded nothing (`llm.record = off`).
    pub request_key: Option<String>,
    /// `llm_calls.response`: none unless the source recorded in `full`.
    pub response: Option<Value>,
}

/// The source's successful attempts, by recursion number.
pub type RecordedAnswers = BTreeMap<u32, RecordedAttempt>;

/// Where a rerun's LLM call and its source's record part (`task.failed` data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Divergence {
    pub iteration: u32,
    /// The source's key for that recursion; null when the source made no such call.
    pub expected_key: Option<String>,
    /// The canonical key of the request the rerun would send.
    pub got_key: String,
}

impl Divergence {
    /// The text kept in `tasks.error` and the `task.failed` event's `error`: the
    /// divergence as a JSON object, so that it reads back field by field.
    pub fn error_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads back what [`Self::error_text`] wrote.
    pub fn from_error_text(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// What to do about one LLM call of a rerun with `llm: recorded`.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmReplay<'a> {
    /// The request is the source's: answer with its recorded response.
    Answer(&'a Value),
    /// The request differs from the source's (or the source made no such call): the task
    /// ends `failed`, reason `rerun_diverged`.
    Diverged(Divergence),
    /// The request is the source's but the source kept no response (`llm.record` was
    /// `hash` or `off` there): the task ends `failed`, reason `rerun_unrecorded`.
    Unrecorded(Divergence),
}

/// Decides the LLM call of recursion `iteration`, whose canonical request key is `got_key`.
pub fn replay_llm<'a>(
    answers: &'a RecordedAnswers,
    iteration: u32,
    got_key: &str,
) -> LlmReplay<'a> {
    let divergence = |expected_key: Option<&String>| Divergence {
        iteration,
        expected_key: expected_key.cloned(),
        got_key: got_key.to_owned(),
    };
    let Some(attempt) = answers.get(&iteration) else {
        return LlmReplay::Diverged(divergence(None));
    };
    match (&attempt.request_key, &attempt.response) {
        (None, _) => LlmReplay::Unrecorded(divergence(None)),
        (Some(key), _) if key != got_key => LlmReplay::Diverged(divergence(Some(key))),
        (Some(_), Some(response)) => LlmReplay::Answer(response),
        (Some(key), None) => LlmReplay::Unrecorded(divergence(Some(key))),
    }
}

/// One tool call of the source with a committed outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedToolCall {
    pub iteration: u32,
    pub name: String,
    pub arguments: Value,
    pub success: bool,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// Tools that always run in a rerun: they act only on the task's own state (the memory
/// `take_memo` writes is not in its result), so a recorded result would lose their effect.
pub const ALWAYS_RUN: &[&str] = &["take_memo"];

/// What to do about one tool call of a rerun.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolReplay {
    /// The source made the same call: its outcome, without running.
    Recorded(RecordedToolCall),
    /// Run it as any task would.
    Run,
    /// Not run: a side-effecting tool in a rerun whose tools are `recorded`; the model
    /// gets this error.
    Refused(String),
}

/// The source's tool calls not used yet by the rerun, in the source's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordedTools {
    calls: Vec<RecordedToolCall>,
}

impl RecordedTools {
    pub fn new(calls: Vec<RecordedToolCall>) -> Self {
        Self { calls }
    }

    /// Decides a call of recursion `iteration`. A source call serves one rerun call at most
    /// (two equal calls in one recursion get the source's two outcomes in order).
    pub fn decide(
        &mut self,
        mode: RerunMode,
        (iteration, name, arguments): (u32, &str, &Value),
        effect: ToolEffect,
    ) -> ToolReplay {
        if mode == RerunMode::Live || ALWAYS_RUN.contains(&name) {
            return ToolReplay::Run;
        }
        let same = |c: &RecordedToolCall| {
            c.iteration == iteration && c.name == name && &c.arguments == arguments
        };
        if let Some(index) = self.calls.iter().position(same) {
            return ToolReplay::Recorded(self.calls.remove(index));
        }
        match effect {
            ToolEffect::ReadOnly | ToolEffect::Idempotent => ToolReplay::Run,
            ToolEffect::SideEffect => ToolReplay::Refused(format!(
                "the call of '{name}' was not run: this task is a rerun with tools = recorded, \
                 the source made no such call at this recursion, and '{name}' has side \
                 effects; side-effecting tools run in a rerun only with tools = live"
            )),
        }
    }
}

#[cfg(test)]
mod tests;
