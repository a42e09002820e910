//! Parsing one LLM reply into the recursion's observe / thought / action (seed 002 §4).
//! Tolerant where real models stray (fences, prose, a leading `<think>` reasoning block,
//! action_type case, `PLAN`, native tool calls with empty, prose-only or arguments-only
//! content, seed 000's `action.result` nesting, integer step ids, a draft followed by a
//! single ANSWER), strict where the machine needs data, and never panicking:
//! every rejection is a [`ReplyError`] whose text becomes the recursion's `error_log`,
//! written so the model can fix its next reply.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::core::extract::{
    ExtractError, canonical_action_type, find_reply_object, looks_like_reply,
};
use crate::core::fields::Fields;
use crate::core::reply_error::ReplyError;
use crate::core::state::StepStatus;
use crate::core::types::{LlmReply, ToolCallRequest};

/// The action a recursion decided on (seed 002 §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "action_type",
    content = "output",
    rename_all = "SCREAMING_SNAKE_CASE"
)]
pub enum Action {
    /// Run these native tool calls (ids filled by the client).
    CallTool(Vec<ToolCallRequest>),
    /// Replace the plan.
    RePlan {
        plan: Vec<PlannedStep>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notes: Option<String>,
    },
    /// Consolidate what is known; the summary goes to short-term memory.
    Reflect { summary: String },
    /// The final answer to the user.
    Answer { answer: String },
}

impl Action {
    /// The wire name: `CALL_TOOL`, `RE_PLAN`, `REFLECT` or `ANSWER`.
    pub fn action_type(&self) -> &'static str {
        match self {
            Self::CallTool(_) => "CALL_TOOL",
            Self::RePlan { .. } => "RE_PLAN",
            Self::Reflect { .. } => "REFLECT",
            Self::Answer { .. } => "ANSWER",
        }
    }

    /// Whether this is the final answer.
    pub fn is_answer(&self) -> bool {
        matches!(self, Self::Answer { .. })
    }

    /// `action.output` as seed 002 shows it: `{}` for CALL_TOOL (the calls travel as native
    /// tool_calls), `{plan, notes?}`, `{summary}` or `{answer}` otherwise.
    pub fn output(&self) -> Value {
        match self {
            Self::CallTool(_) => json!({}),
            Self::RePlan { plan, notes } => match notes {
                Some(notes) => json!({ "plan": plan, "notes": notes }),
                None => json!({ "plan": plan }),
            },
            Self::Reflect { summary } => json!({ "summary": summary }),
            Self::Answer { answer } => json!({ "answer": answer }),
        }
    }
}

/// A plan step as the model wrote it in RE_PLAN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedStep {
    pub step_id: String,
    pub description: String,
    /// `pending` when the model gave none.
    pub status: StepStatus,
}

/// Our extension: `step_updates: [{"step_id": "1", "status": "done"}]`, in any reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepUpdate {
    pub step_id: String,
    pub status: StepStatus,
}

/// A reply that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedReply {
    pub observe: String,
    pub thought: String,
    pub action: Action,
    /// `abstract` (empty when the model gave none).
    pub abstract_: String,
    /// `None` when absent, null or blank.
    pub short_term_memory_append: Option<String>,
    pub step_updates: Vec<StepUpdate>,
    /// The JSON object the model produced (for the trace's output column).
    pub raw: Value,
}

/// Parses one reply. See the module doc for what is tolerated.
pub fn parse_reply(reply: &LlmReply) -> Result<ParsedReply, ReplyError> {
    let content = reply.content.trim();
    let has_calls = !reply.tool_calls.is_empty();
    if content.is_empty() {
        return match has_calls {
            true => Ok(bare_tool_calls(reply)),
            false => Err(ReplyError::Empty),
        };
    }
    let object = match find_reply_object(content) {
        // Some models echo the tool arguments as content: that is not a failed reply.
        Ok(object) if has_calls && !looks_like_reply(&object) => return Ok(bare_tool_calls(reply)),
        Ok(object) => object,
        // Reasoning or prose around native tool calls: the calls are the reply.
        Err(
            ExtractError::NoObject { .. }
            | ExtractError::UnclosedReasoning
            | ExtractError::NothingAfterReasoning,
        ) if has_calls => return Ok(bare_tool_calls(reply)),
        Err(error) => return Err(error.into()),
    };
    parse_object(object, reply)
}

/// Tool calls with no JSON content: accepted as CALL_TOOL (real models do this).
fn bare_tool_calls(reply: &LlmReply) -> ParsedReply {
    ParsedReply {
        observe: String::new(),
        thought: String::new(),
        action: Action::CallTool(reply.tool_calls.clone()),
        abstract_: String::new(),
        short_term_memory_append: None,
        step_updates: Vec::new(),
        raw: json!({ "action": { "action_type": "CALL_TOOL", "output": {} } }),
    }
}

fn parse_object(object: Map<String, Value>, reply: &LlmReply) -> Result<ParsedReply, ReplyError> {
    let root = Fields::root(&object);
    let observe = root.string("observe", "a string: what you observe")?;
    let thought = root.string("thought", "a string: your reasoning")?;
    let action = parse_action(&root, reply)?;
    let abstract_ = root.opt_string("abstract")?.unwrap_or_default();
    let short_term_memory_append = root
        .opt_string("short_term_memory_append")?
        .filter(|memory| !memory.trim().is_empty());
    let step_updates = parse_step_updates(&root)?;
    Ok(ParsedReply {
        observe,
        thought,
        action,
        abstract_,
        short_term_memory_append,
        step_updates,
        raw: Value::Object(object),
    })
}

fn parse_action(root: &Fields<'_>, reply: &LlmReply) -> Result<Action, ReplyError> {
    let mut action = root.object("action", "an object {action_type, output}")?;
    // Seed 000 nests it one level deeper: {"action": {"result": {"action_type": ...}}}.
    if !action.has("action_type") && action.has("result") {
        action = action.object("result", "an object {action_type, output}")?;
    }
    let found = action.string("action_type", "one of CALL_TOOL, RE_PLAN, REFLECT, ANSWER")?;
    let Some(kind) = canonical_action_type(&found) else {
        return Err(ReplyError::UnknownActionType { found });
    };
    match (kind, reply.tool_calls.is_empty()) {
        ("CALL_TOOL", true) => return Err(ReplyError::CallToolWithoutToolCalls),
        ("CALL_TOOL", false) => return Ok(Action::CallTool(reply.tool_calls.clone())),
        (_, false) => {
            let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
            return Err(ReplyError::ToolCallsWithoutCallTool {
                action_type: kind.to_owned(),
                names: names.join(", "),
            });
        }
        (_, true) => {}
    }
    let output = action.object("output", "an object with the action's fields")?;
    match kind {
        "RE_PLAN" => parse_plan(&output),
        "REFLECT" => Ok(Action::Reflect {
            summary: output.text("summary", "a non-empty string: your summary")?,
        }),
        _ => Ok(Action::Answer {
            answer: output.text("answer", "a non-empty string: the final answer")?,
        }),
    }
}

const PLAN_STATUSES: &str = "pending, running, done, error";
const UPDATE_STATUSES: &str = "running, done, error";

fn parse_plan(output: &Fields<'_>) -> Result<Action, ReplyError> {
    let items = output.array(
        "plan",
        "a non-empty array of {step_id, description, status}",
    )?;
    let mut plan: Vec<PlannedStep> = Vec::with_capacity(items.len());
    for step in &items {
        let step_id = step.step_id()?;
        if plan.iter().any(|known| known.step_id == step_id) {
            return Err(ReplyError::DuplicateStepId {
                path: step.path("step_id"),
                step_id,
            });
        }
        let description = step.text("description", "a non-empty string describing the step")?;
        let status = match step.opt_string("status")? {
            None => StepStatus::Pending,
            Some(text) => status_at(step, &text, PLAN_STATUSES)?,
        };
        plan.push(PlannedStep {
            step_id,
            description,
            status,
        });
    }
    let notes = output
        .opt_string("notes")?
        .filter(|notes| !notes.trim().is_empty());
    Ok(Action::RePlan { plan, notes })
}

fn parse_step_updates(root: &Fields<'_>) -> Result<Vec<StepUpdate>, ReplyError> {
    let Some(items) = root.opt_array("step_updates")? else {
        return Ok(Vec::new());
    };
    let mut updates = Vec::with_capacity(items.len());
    for item in &items {
        let step_id = item.step_id()?;
        let text = item.string("status", "one of running, done, error")?;
        let status = status_at(item, &text, UPDATE_STATUSES)?;
        updates.push(StepUpdate { step_id, status });
    }
    Ok(updates)
}

/// Parses a status allowed by `allowed` (a comma-separated list of wire names).
fn status_at(at: &Fields<'_>, text: &str, allowed: &str) -> Result<StepStatus, ReplyError> {
    StepStatus::parse(text)
        .filter(|status| allowed.split(", ").any(|name| name == status.as_str()))
        .ok_or_else(|| ReplyError::InvalidStatus {
            path: at.path("status"),
            found: text.to_owned(),
            expected: allowed.to_owned(),
        })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod reasoning_tests;
