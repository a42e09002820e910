//! Normalized value types shared by the core and the adapters: chat messages, tool
//! specifications, tool calls requested by the model and their results. Provider wire
//! formats stay in `llm/`; these are what the state machine reasons about.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::core::text::Text;

/// The role of a chat message in the seed layout (`[0]` user, `[1]` system, `[2..]` assistant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    System,
    Assistant,
}

/// One message of an LLM request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: Text,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<Text>) -> Self {
        Self {
            role,
            content: content.into(),
        }
    }
}

/// A tool as offered to the model: a name, a description and JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// What running a tool does outside agentd (CONTRACT §7), which decides how a call that
/// was cut short by a crash is treated on resume and whether it waits for the step's
/// commit before it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolEffect {
    /// No effect outside agentd (the built-ins): safe to run again, needs no commit first.
    ReadOnly,
    /// Running it twice with the same idempotency key has the effect of running it once.
    Idempotent,
    /// Anything else: never silently run twice.
    #[default]
    SideEffect,
}

impl ToolEffect {
    /// The wire name: `read_only`, `idempotent` or `side_effect`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::Idempotent => "idempotent",
            Self::SideEffect => "side_effect",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read_only" => Some(Self::ReadOnly),
            "idempotent" => Some(Self::Idempotent),
            "side_effect" => Some(Self::SideEffect),
            _ => None,
        }
    }

    /// Whether a call may be run again after a crash cut it short (read-only or
    /// idempotent under its key).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::SideEffect)
    }
}

/// A native tool call requested by the model (OpenAI `message.tool_calls[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The provider's call id; filled with a generated id when the provider sent none.
    pub id: String,
    pub name: String,
    /// The raw `function.arguments` string, exactly as the model produced it.
    pub arguments: String,
}

/// The outcome of one tool call, as recorded and as shown to the next recursion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallResult {
    pub tool_call_id: String,
    pub name: String,
    /// The parsed arguments (the raw string when they were not valid JSON).
    pub arguments: Value,
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A note the tool asks to keep in the task's short-term memory (`take_memo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memo: Option<String>,
    pub duration_ms: u64,
}

/// Token usage reported by the provider, when it reports any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
}

/// What one successful LLM call returned, normalized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmReply {
    /// `message.content` (empty when the provider sent null).
    pub content: String,
    pub tool_calls: Vec<ToolCallRequest>,
    pub usage: Usage,
}
