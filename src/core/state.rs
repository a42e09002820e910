//! The dynamic state snapshot of seed 002 §5 (`global`, `current_recursion`, `context`,
//! `last_recursion`) that is rendered into the system prompt every recursion, and the plan,
//! step, memory and conversation-turn types it is made of.
//!
//! The snapshot borrows the plan, memory and last recursion from the machine, so building
//! it each recursion costs no clones; only a snapshot trimmed to fit the context budget
//! (see `core::compact`) owns trimmed copies.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::core::limits::{trim_json, trim_text};
use crate::core::types::ToolCallResult;

/// An earlier task of the same conversation, as loaded by the driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationTurn {
    pub task_id: Uuid,
    /// The user's input of that turn.
    pub input: String,
    /// Its answer, when it completed.
    pub answer: Option<String>,
    /// Its `tasks.status` (`completed`, `failed`, ...).
    pub status: String,
}

/// The status of a plan step (seed 002 §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Not started yet.
    Pending,
    /// Being worked on.
    Running,
    /// Its goal is reached.
    Done,
    /// Failed repeatedly or judged infeasible.
    Error,
}

impl StepStatus {
    /// The wire name: `pending`, `running`, `done` or `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Done => "done",
            Self::Error => "error",
        }
    }

    /// Parses a wire name, ignoring case and surrounding whitespace.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "pending" => Some(Self::Pending),
            "running" => Some(Self::Running),
            "done" => Some(Self::Done),
            "error" => Some(Self::Error),
            _ => None,
        }
    }
}

/// The status of one recursion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecursionStatus {
    /// Under way (only ever seen in `current_recursion`).
    Running,
    /// Ended normally.
    Done,
    /// Ended with an `error_log` (unparseable reply, failed tool, LLM failure...).
    Error,
}

impl RecursionStatus {
    /// The wire name: `running`, `done` or `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::Error => "error",
        }
    }
}

/// A step of the plan together with the recursions that worked on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    pub step_id: String,
    pub description: String,
    pub status: StepStatus,
    /// Execution history: every recursion attributed to this step, done or error.
    pub recursions: Vec<StepRecursion>,
}

/// One recursion as recorded under its plan step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecursion {
    pub trace_id: Uuid,
    pub status: RecursionStatus,
    /// The recursion's `abstract`, or a short description when the model gave none.
    pub result: String,
    pub error_log: Option<String>,
}

/// Where a short-term memory entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// The reply's `short_term_memory_append`.
    Model,
    /// The summary of a REFLECT action.
    Reflect,
    /// A note stored by the `take_memo` tool.
    TakeMemo,
}

/// One entry of `context.memory.short_term`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// The recursion that wrote it.
    pub trace_id: Uuid,
    pub memory: String,
    pub source: MemorySource,
}

/// The dynamic state snapshot injected as `{{current_state}}` (seed 002 §5.1).
#[derive(Debug, Clone, Serialize)]
pub struct StateSnapshot<'a> {
    pub global: GlobalState,
    pub current_recursion: CurrentRecursion,
    pub context: Context<'a>,
    /// The previous finished recursion; `null` on the first recursion.
    pub last_recursion: Option<Cow<'a, LastRecursion>>,
}

/// `global` (seed 002 §5.2).
#[derive(Debug, Clone, Serialize)]
pub struct GlobalState {
    pub task_id: Uuid,
    /// Recursions executed (finished) before the current one: 0 on the first recursion.
    pub iteration: u32,
    pub max_iteration: u32,
    /// Recursions still available after the current one: 0 on the last recursion.
    pub remaining_iterations: u32,
    /// Always `running` while the model is being asked.
    pub status: &'static str,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The task's budget with what is used (CONTRACT §8), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::core::budget::BudgetView>,
}

/// `current_recursion` (seed 002 §5.3).
#[derive(Debug, Clone, Serialize)]
pub struct CurrentRecursion {
    pub trace_id: Uuid,
    /// The 1-based number of this recursion (`global.iteration + 1`).
    pub iteration_index: u32,
    pub status: RecursionStatus,
}

/// `context` (seed 002 §5.4), plus our `conversation` and `compacted_history`, both left
/// out while empty.
#[derive(Debug, Clone, Serialize)]
pub struct Context<'a> {
    pub objective: Cow<'a, str>,
    pub constraints: Cow<'a, [String]>,
    /// Guidance injected by a person while the task runs (`inject`), oldest first.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub user_guidance: Cow<'a, [String]>,
    /// Stall detection's words to a model repeating itself (CONTRACT §14): the nudge while
    /// it keeps repeating, the order to ANSWER on its last recursion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_warning: Option<Cow<'a, str>>,
    /// The latest earlier turns of the conversation, oldest first, trimmed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conversation: Vec<ConversationTurn>,
    pub plan: Cow<'a, [PlanStep]>,
    pub memory: Memory<'a>,
    /// One line per earlier recursion whose assistant message was folded away to fit the
    /// context budget, oldest first: `#iteration ACTION_TYPE status: abstract`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compacted_history: Vec<String>,
}

/// `context.memory`.
#[derive(Debug, Clone, Serialize)]
pub struct Memory<'a> {
    pub short_term: Cow<'a, [MemoryEntry]>,
    /// Reserved for long-term memory references; always empty for now.
    pub long_term_refs: &'a [Value],
}

/// `last_recursion` (seed 002 §5.5): the previous finished recursion, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastRecursion {
    pub trace_id: Uuid,
    pub iteration: u32,
    pub observe: String,
    pub thought: String,
    /// `null` when the reply could not be parsed (the reason is in `error_log`).
    pub action: Option<ActionView>,
    pub status: RecursionStatus,
    pub error_log: Option<String>,
    /// Present only when the action was CALL_TOOL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_results: Option<Vec<ToolResultView>>,
    /// How many further tool results were left out to fit the context budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_results_omitted: Option<usize>,
}

/// `{action_type, output}` of a recursion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionView {
    pub action_type: String,
    pub output: Value,
}

/// One tool call result as shown to the model: success with `result`, or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultView {
    pub tool_call_id: String,
    pub name: String,
    /// The arguments the call was made with, so parallel calls of one tool can be told apart.
    pub arguments: Value,
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ToolResultView {
    /// The view of `r` with its arguments, result and error each cut to `max_chars` (as
    /// JSON text) with a visible marker.
    pub fn capped(r: &ToolCallResult, max_chars: usize) -> Self {
        Self {
            tool_call_id: r.tool_call_id.clone(),
            name: r.name.clone(),
            arguments: trim_json(&r.arguments, max_chars),
            success: r.success,
            result: r.result.as_ref().map(|value| trim_json(value, max_chars)),
            error: r.error.as_deref().map(|error| trim_text(error, max_chars)),
        }
    }
}

impl From<&ToolCallResult> for ToolResultView {
    fn from(r: &ToolCallResult) -> Self {
        Self::capped(r, usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot<'a>(plan: &'a [PlanStep], memory: &'a [MemoryEntry]) -> StateSnapshot<'a> {
        let at = DateTime::parse_from_rfc3339("2025-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        StateSnapshot {
            global: GlobalState {
                task_id: Uuid::nil(),
                iteration: 0,
                max_iteration: 30,
                remaining_iterations: 29,
                status: "running",
                created_at: at,
                updated_at: at,
                budget: None,
            },
            current_recursion: CurrentRecursion {
                trace_id: Uuid::nil(),
                iteration_index: 1,
                status: RecursionStatus::Running,
            },
            context: Context {
                objective: "add 1 and 2".into(),
                constraints: Cow::Borrowed(&[]),
                user_guidance: Cow::Borrowed(&[]),
                stall_warning: None,
                conversation: Vec::new(),
                plan: plan.into(),
                memory: Memory {
                    short_term: memory.into(),
                    long_term_refs: &[],
                },
                compacted_history: Vec::new(),
            },
            last_recursion: None,
        }
    }

    #[test]
    fn snapshot_has_seed_002_field_names() {
        let plan = [PlanStep {
            step_id: "1".into(),
            description: "compute".into(),
            status: StepStatus::Running,
            recursions: vec![],
        }];
        let memory = [MemoryEntry {
            trace_id: Uuid::nil(),
            memory: "note".into(),
            source: MemorySource::TakeMemo,
        }];
        let value = serde_json::to_value(snapshot(&plan, &memory)).unwrap();
        assert_eq!(value["global"]["created_at"], "2025-01-02T03:04:05Z");
        assert_eq!(value["global"]["status"], "running");
        assert_eq!(value["current_recursion"]["iteration_index"], 1);
        assert_eq!(value["current_recursion"]["status"], "running");
        assert_eq!(value["context"]["objective"], "add 1 and 2");
        assert_eq!(value["context"]["plan"][0]["status"], "running");
        assert_eq!(value["context"]["plan"][0]["recursions"], json!([]));
        assert_eq!(
            value["context"]["memory"]["short_term"][0]["source"],
            "take_memo"
        );
        assert_eq!(value["context"]["memory"]["long_term_refs"], json!([]));
        assert_eq!(value["last_recursion"], Value::Null);
        assert!(value["context"].get("conversation").is_none());
        assert!(value["context"].get("compacted_history").is_none());
    }

    #[test]
    fn last_recursion_omits_tool_results_unless_call_tool() {
        let last = LastRecursion {
            trace_id: Uuid::nil(),
            iteration: 1,
            observe: String::new(),
            thought: String::new(),
            action: None,
            status: RecursionStatus::Error,
            error_log: Some("bad".into()),
            tool_call_results: None,
            tool_call_results_omitted: None,
        };
        let value = serde_json::to_value(&last).unwrap();
        assert_eq!(value["error_log"], "bad");
        assert_eq!(value["action"], Value::Null);
        assert!(value.get("tool_call_results").is_none());
    }

    #[test]
    fn statuses_round_trip_their_wire_names() {
        for s in [
            StepStatus::Pending,
            StepStatus::Running,
            StepStatus::Done,
            StepStatus::Error,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(StepStatus::parse(&s.as_str().to_uppercase()), Some(s));
        }
        assert_eq!(StepStatus::parse("finished"), None);
        for s in [
            RecursionStatus::Running,
            RecursionStatus::Done,
            RecursionStatus::Error,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
