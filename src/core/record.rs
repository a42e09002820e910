//! What a finished recursion leaves behind: the trace row ([`RecursionRecord`]), the compact
//! assistant history message the following recursions read, and `last_recursion` of the
//! next snapshot. All three are derived from one [`Closed`] value so they never disagree.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::core::limits::{Limits, exceeds, trim_json, trim_text};
use crate::core::state::{ActionView, LastRecursion, RecursionStatus, ToolResultView};
use crate::core::types::ToolCallResult;

/// One finished recursion, as written to the trace (`recursions` table) and sent in the
/// `recursion.completed` event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecursionRecord {
    pub trace_id: Uuid,
    /// 1-based number of the recursion within its task.
    pub iteration: u32,
    /// The plan step it worked on, if any.
    pub step_id: Option<String>,
    /// `None` when the reply could not be parsed or the LLM call failed.
    pub action_type: Option<String>,
    pub observe: String,
    pub thought: String,
    #[serde(rename = "abstract")]
    pub abstract_: String,
    /// The parsed reply object (its JSON text when nested deeper than
    /// [`MAX_JSON_DEPTH`](crate::core::limits::MAX_JSON_DEPTH)), `{"raw": content}` when
    /// unparseable (content cut at `max_reply_chars` with a marker), null when the LLM call
    /// itself failed.
    pub output: Value,
    pub status: RecursionStatus,
    pub error_log: Option<String>,
    /// The tool calls' results (CALL_TOOL only), in call order, untrimmed.
    pub tool_call_results: Vec<ToolCallResult>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// Everything known about a recursion when it ends, before it is recorded.
#[derive(Debug, Clone)]
pub(crate) struct Closed {
    pub observe: String,
    pub thought: String,
    pub abstract_: String,
    /// `{action_type, output}`; `None` when there was no usable reply.
    pub action: Option<ActionView>,
    /// The trace's output column.
    pub output: Value,
    /// What the history message shows as `result` (tool results, plan, summary, answer).
    pub result: Option<Value>,
    pub status: RecursionStatus,
    pub error_log: Option<String>,
    /// `Some` for CALL_TOOL.
    pub tool_call_results: Option<Vec<ToolCallResult>>,
}

impl Closed {
    /// A recursion that produced no usable reply.
    pub(crate) fn failed(error_log: String, output: Value) -> Self {
        Self {
            observe: String::new(),
            thought: String::new(),
            abstract_: String::new(),
            action: None,
            output,
            result: None,
            status: RecursionStatus::Error,
            error_log: Some(error_log),
            tool_call_results: None,
        }
    }

    /// Cuts what the model wrote (observe, thought, abstract, action output, result), the
    /// error_log and a raw unparseable reply at `max_reply_chars`, with a visible marker.
    /// Tool results are left whole here: they are cut where they are fed back.
    pub(crate) fn capped(mut self, limits: &Limits) -> Self {
        let max = limits.max_reply_chars;
        for text in [&mut self.observe, &mut self.thought, &mut self.abstract_] {
            if exceeds(text, max) {
                *text = trim_text(text, max);
            }
        }
        if let Some(action) = &mut self.action {
            action.output = trim_json(&action.output, max);
        }
        self.result = self.result.map(|result| trim_json(&result, max));
        self.error_log = self.error_log.map(|log| trim_text(&log, max));
        if let Some(Value::String(raw)) = self.output.get_mut("raw")
            && exceeds(raw, max)
        {
            *raw = trim_text(raw, max);
        }
        self
    }

    /// The tool results as fed back to the model: each cut at `max_tool_result_chars`.
    fn tool_views(&self, limits: &Limits) -> Option<Vec<ToolResultView>> {
        let max = limits.max_tool_result_chars;
        self.tool_call_results.as_ref().map(|results| {
            results
                .iter()
                .map(|r| ToolResultView::capped(r, max))
                .collect()
        })
    }

    /// The result recorded under the plan step: the abstract, else a short description.
    pub(crate) fn step_result(&self) -> String {
        if !self.abstract_.trim().is_empty() {
            return self.abstract_.clone();
        }
        match (&self.action, &self.tool_call_results) {
            (Some(_), Some(results)) => {
                let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
                format!("CALL_TOOL {}", names.join(", "))
            }
            (Some(action), None) => action.action_type.clone(),
            (None, _) => "no usable reply".to_owned(),
        }
    }

    /// The compact assistant message for the history (`[2..]` of the messages).
    pub(crate) fn history_message(
        &self,
        iteration: u32,
        trace_id: Uuid,
        limits: &Limits,
    ) -> String {
        let results = self
            .tool_views(limits)
            .map(|views| serde_json::to_value(views).unwrap_or(Value::Null));
        let entry = HistoryEntry {
            iteration,
            trace_id,
            status: self.status,
            action_type: self.action.as_ref().map(|a| a.action_type.as_str()),
            abstract_: Some(self.abstract_.as_str()).filter(|text| !text.is_empty()),
            result: results.as_ref().or(self.result.as_ref()),
            error_log: self.error_log.as_deref(),
        };
        serde_json::to_string(&entry).unwrap_or_else(|error| {
            format!(r#"{{"iteration":{iteration},"status":"error","error_log":"{error}"}}"#)
        })
    }

    /// `last_recursion` for the next snapshot.
    pub(crate) fn last_recursion(
        &self,
        iteration: u32,
        trace_id: Uuid,
        limits: &Limits,
    ) -> LastRecursion {
        LastRecursion {
            trace_id,
            iteration,
            observe: self.observe.clone(),
            thought: self.thought.clone(),
            action: self.action.clone(),
            status: self.status,
            error_log: self.error_log.clone(),
            tool_call_results: self.tool_views(limits),
            tool_call_results_omitted: None,
        }
    }
}

/// The serialized form of a history message.
#[derive(Serialize)]
struct HistoryEntry<'a> {
    iteration: u32,
    trace_id: Uuid,
    status: RecursionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    action_type: Option<&'a str>,
    #[serde(rename = "abstract", skip_serializing_if = "Option::is_none")]
    abstract_: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_log: Option<&'a str>,
}

/// The head of a history message, read back when the message is folded away.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct HistoryHead {
    #[serde(default)]
    pub iteration: u32,
    #[serde(default)]
    pub status: Option<RecursionStatus>,
    #[serde(default)]
    pub action_type: Option<String>,
    #[serde(default, rename = "abstract")]
    pub abstract_: Option<String>,
    #[serde(default)]
    pub error_log: Option<String>,
}

impl HistoryHead {
    /// Reads a message written by [`Closed::history_message`]; `None` if it is not one.
    pub(crate) fn parse(message: &str) -> Option<Self> {
        serde_json::from_str(message).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_result(success: bool) -> ToolCallResult {
        ToolCallResult {
            tool_call_id: "call_1".into(),
            name: "calculate".into(),
            arguments: json!({"expression": "1/0"}),
            success,
            result: success.then(|| json!(3)),
            error: (!success).then(|| "division by zero".to_owned()),
            memo: None,
            duration_ms: 4,
        }
    }

    #[test]
    fn error_history_message_has_only_the_error() {
        let closed = Closed::failed("reply rejected: x".into(), json!({"raw": "?"}));
        let message = closed.history_message(2, Uuid::nil(), &Limits::default());
        let value: Value = serde_json::from_str(&message).unwrap();
        assert_eq!(
            value,
            json!({"iteration": 2, "trace_id": Uuid::nil(), "status": "error",
                "error_log": "reply rejected: x"})
        );
        assert!(!message.contains('\n'));
        assert_eq!(closed.step_result(), "no usable reply");
    }

    #[test]
    fn tool_history_message_shows_results_without_internals() {
        let closed = Closed {
            observe: "o".into(),
            thought: "t".into(),
            abstract_: String::new(),
            action: Some(ActionView {
                action_type: "CALL_TOOL".into(),
                output: json!({}),
            }),
            output: json!({}),
            result: None,
            status: RecursionStatus::Error,
            error_log: Some("calculate failed".into()),
            tool_call_results: Some(vec![tool_result(false)]),
        };
        let limits = Limits::default();
        let value: Value =
            serde_json::from_str(&closed.history_message(1, Uuid::nil(), &limits)).unwrap();
        assert_eq!(value["action_type"], "CALL_TOOL");
        assert!(value.get("abstract").is_none());
        assert_eq!(value["result"][0]["error"], "division by zero");
        assert!(value["result"][0].get("duration_ms").is_none());
        assert_eq!(value["error_log"], "calculate failed");
        assert_eq!(closed.step_result(), "CALL_TOOL calculate");
        let last = closed.last_recursion(1, Uuid::nil(), &limits);
        assert!(!last.tool_call_results.unwrap()[0].success);
    }
}
