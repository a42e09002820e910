//! Why a reply was rejected ([`ReplyError`]): one variant per rule of the reply's parsing
//! (`action`, `fields`, `extract`), each with the `error_log` text the model sees next,
//! written so that it can fix its next reply.

use crate::core::extract::{ExtractError, NAMED_REPLIES};

/// Why a reply was rejected. The Display text is the `error_log` the model sees next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Neither content nor tool calls.
    #[error(
        "reply rejected: the reply was empty; expected one JSON object with observe, thought, \
         action {{action_type, output}} and abstract"
    )]
    Empty,
    /// The content has no `{` at all.
    #[error(
        "reply rejected: no JSON object found in the content (it began with {excerpt:?}); the \
         content must be exactly one JSON object, starting with {{ and ending with }}"
    )]
    NoJsonObject { excerpt: String },
    /// A `<think>` reasoning block was opened and never closed, so no reply followed it.
    #[error(
        "reply rejected: the content opened a <think> reasoning block and never closed it, so \
         it held no reply; end the reasoning with </think> and write the one JSON object \
         (observe, thought, action, abstract) after it"
    )]
    UnclosedReasoning,
    /// Nothing followed the reasoning block.
    #[error(
        "reply rejected: nothing followed the reasoning block; after </think>, write the one \
         JSON object with observe, thought, action {{action_type, output}} and abstract"
    )]
    NothingAfterReasoning,
    /// Several different reply objects, and not exactly one ANSWER among them to take.
    #[error(
        "reply rejected: the reply held {count} JSON objects ({action_types}) and must hold \
         exactly one; choose one action and write only its object (to call several tools, \
         use one CALL_TOOL object with several native tool_calls)"
    )]
    SeveralReplyObjects { count: usize, action_types: String },
    /// The object is not valid JSON.
    #[error(
        "reply rejected: invalid JSON: {message}; output one complete JSON object, do not put \
         unescaped double quotes inside string values, close every {{ and ["
    )]
    InvalidJson { message: String },
    /// A required field is absent (or null).
    #[error("reply rejected: field `{path}` is missing; expected {expected}")]
    MissingField { path: String, expected: String },
    /// A field has the wrong JSON type.
    #[error("reply rejected: field `{path}` is {found}; expected {expected}")]
    WrongType {
        path: String,
        expected: String,
        found: String,
    },
    /// A required string or array is empty.
    #[error("reply rejected: field `{path}` is empty; expected {expected}")]
    EmptyField { path: String, expected: String },
    /// `action.action_type` is not one of the four.
    #[error(
        "reply rejected: unknown action.action_type {found:?}; expected one of CALL_TOOL, \
         RE_PLAN, REFLECT, ANSWER"
    )]
    UnknownActionType { found: String },
    /// CALL_TOOL without native tool calls.
    #[error(
        "reply rejected: action_type is CALL_TOOL but the reply has no native tool_calls; call \
         tools through function calling (tool_calls), not inside the JSON content, or choose \
         another action_type"
    )]
    CallToolWithoutToolCalls,
    /// Native tool calls under another action type.
    #[error(
        "reply rejected: the reply has native tool_calls ({names}) but action_type is \
         {action_type}; use action_type CALL_TOOL when calling tools, and only then"
    )]
    ToolCallsWithoutCallTool { action_type: String, names: String },
    /// A status string outside the allowed set.
    #[error(
        "reply rejected: field `{path}` has the invalid status {found:?}; expected one of {expected}"
    )]
    InvalidStatus {
        path: String,
        found: String,
        expected: String,
    },
    /// Two plan steps share a step_id.
    #[error(
        "reply rejected: field `{path}` repeats step_id {step_id:?}; every plan step needs a \
         unique step_id"
    )]
    DuplicateStepId { path: String, step_id: String },
}

impl From<ExtractError> for ReplyError {
    fn from(error: ExtractError) -> Self {
        match error {
            ExtractError::NoObject { excerpt } => Self::NoJsonObject { excerpt },
            ExtractError::Invalid(message) => Self::InvalidJson { message },
            ExtractError::UnclosedReasoning => Self::UnclosedReasoning,
            ExtractError::NothingAfterReasoning => Self::NothingAfterReasoning,
            ExtractError::SeveralReplies {
                count,
                action_types,
            } => {
                let mut named = action_types.join(", ");
                if count > NAMED_REPLIES {
                    named.push_str(", …");
                }
                Self::SeveralReplyObjects {
                    count,
                    action_types: named,
                }
            }
        }
    }
}
