//! The narrow traits at the edge of the core: the LLM and the tool sources. The driver
//! (`worker/`) talks to the outside only through these and through the store and broker
//! adapters, so the recursion loop can be driven against any provider or tool source.

use std::fmt;

use async_trait::async_trait;
use serde_json::Value;

use crate::core::retry::ErrorClass;
use crate::core::types::{ChatMessage, LlmReply, ToolEffect, ToolSpec};

/// One Chat Completions request, provider-neutral.
#[derive(Clone, Copy)]
pub struct LlmRequest<'a> {
    /// The agent's model.
    pub model: &'a str,
    /// The seed layout: user, system, then one assistant message per earlier recursion.
    pub messages: &'a [ChatMessage],
    /// The tools this agent may call, offered as native tools.
    pub tools: &'a [ToolSpec],
    /// Ask the provider for an SSE stream. The returned [`LlmReply`] is the same either way.
    pub stream: bool,
    /// Called with each piece of `content` as it arrives, in order, when `stream` is on
    /// (never for a non-streamed call). The pieces concatenate to the reply's content. It
    /// runs on the client's task: keep it quick (buffer, do not block). A failed attempt
    /// may already have delivered pieces; a retry delivers its own from the start.
    pub on_delta: Option<&'a (dyn Fn(&str) + Send + Sync)>,
    /// The agent version's request parameters (`temperature`, `top_p`, `max_tokens`,
    /// `seed`, …; CONTRACT v3 §11), merged into the body; they never replace the fields the
    /// request is made of (`model`, `messages`, `tools`, `stream`, `stream_options`).
    pub params: Option<&'a serde_json::Map<String, Value>>,
}

impl fmt::Debug for LlmRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmRequest")
            .field("model", &self.model)
            .field("messages", &self.messages)
            .field("tools", &self.tools)
            .field("stream", &self.stream)
            .field("on_delta", &self.on_delta.map(|_| "Fn(&str)"))
            .field("params", &self.params)
            .finish()
    }
}

/// A failed LLM attempt, classified for the retry policy. Never carries the API key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{label}: {message}")]
pub struct LlmError {
    pub class: ErrorClass,
    /// The HTTP status, when the provider answered at all.
    pub status: Option<u16>,
    /// A short machine-readable class for `llm_calls.status`: `http_429`, `timeout`,
    /// `connect`, `decode`, ...
    pub label: String,
    /// Human-readable detail (the provider's error message when it sent one).
    pub message: String,
}

/// One piece of a request body as sent (CONTRACT §12): the pieces in order are the exact
/// bytes. `text` is where a message's JSON-escaped text is in it (none for the glue
/// between messages, the model and the tools).
#[derive(Debug, Clone)]
pub struct BodyPart {
    pub bytes: bytes::Bytes,
    pub text: Option<std::ops::Range<usize>>,
}

/// One attempt with what it exchanged, for the record (CONTRACT §12).
#[derive(Debug)]
pub struct Exchange {
    pub result: Result<LlmReply, LlmError>,
    /// The request body as sent, in pieces (empty when nothing was built).
    pub sent: Vec<BodyPart>,
    /// The response, when asked for: the provider's JSON body (not streamed), the
    /// reassembled `{"choices": [{"message", "finish_reason"}], "usage"}` (streamed),
    /// `{"status", "body"}` for an HTTP error or `{"error"}` for any other failure.
    pub response: Option<Value>,
}

/// An OpenAI-compatible chat model. One call is one attempt; retries belong to the driver.
#[async_trait]
pub trait Llm: Send + Sync {
    async fn chat(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError>;

    /// One attempt that also returns the body it sent and, with `keep_response`, what came
    /// back. A source that cannot tell sends nothing recordable.
    async fn exchange(&self, request: LlmRequest<'_>, keep_response: bool) -> Exchange {
        let _ = keep_response;
        Exchange {
            result: self.chat(request).await,
            sent: Vec::new(),
            response: None,
        }
    }
}

/// What a tool returned when it succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub result: Value,
    /// A note to keep in the task's short-term memory (`take_memo`).
    pub memo: Option<String>,
}

/// What a tool call carries besides its arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolCallContext<'a> {
    /// `"<task_id>:<tool_call_id>"` for every call of a tool that is not read-only
    /// (CONTRACT §7): the same on a retry after a crash, so an idempotent tool can tell.
    pub idempotency_key: Option<&'a str>,
}

/// A source of tools (seed 001): the built-ins, an MCP server, ...
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// The tools this source offers, with JSON-schema parameters.
    fn list_tools(&self) -> Vec<ToolSpec>;
    /// What running `name` does outside agentd. Unless a source knows better, a tool has
    /// side effects.
    fn effect(&self, _name: &str) -> ToolEffect {
        ToolEffect::SideEffect
    }
    /// Run one tool. `Err` is an error value shown to the next recursion, never a crash.
    async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String>;
}
