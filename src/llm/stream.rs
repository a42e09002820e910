//! Assembling a streamed (SSE) Chat Completion. Each `data:` payload is one
//! `chat.completion.chunk`: content deltas are appended (and handed to the caller's
//! callback as they arrive), tool call fragments are merged by their `index` (id and name
//! from the first fragment that has them, `arguments` concatenated), `usage` is taken from
//! the chunk that carries it (the last one, with `stream_options.include_usage`), and
//! `data: [DONE]` ends the stream. The finished [`LlmReply`] goes through the same
//! normalization as a non-streamed response, so both paths return identical replies.
//!
//! A provider error object mid-stream (`{"error": ...}` or an `event: error`) and a stream
//! that ends before `[DONE]` are retryable errors labelled `stream`; a chunk that is not
//! JSON is a retryable `decode` error.

use serde::Deserialize;
use serde_json::Value;

use crate::core::retry::ErrorClass;
use crate::core::types::LlmReply;
use crate::ports::LlmError;

use super::errors::{decode_error, too_large};
use super::wire::{
    WireFunctionCall, WireToolCall, content_text, error_text, tool_call_from, usage_from,
};

/// The payload that ends an OpenAI stream.
const DONE: &str = "[DONE]";

/// One `chat.completion.chunk`, leniently.
#[derive(Debug, Default, Deserialize)]
struct ChatChunk {
    #[serde(default)]
    choices: Option<Vec<ChunkChoice>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// One choice of a chunk; only choice 0 (or one without an index) is used.
#[derive(Debug, Default, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<ChunkDelta>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

/// The increment of the assistant message.
#[derive(Debug, Default, Deserialize)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<ChunkToolCall>>,
}

/// A fragment of one tool call.
#[derive(Debug, Default, Deserialize)]
struct ChunkToolCall {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<ChunkFunction>,
}

/// A fragment of a tool call's function.
#[derive(Debug, Default, Deserialize)]
struct ChunkFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// A tool call being assembled from its fragments.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
}

/// The reply assembled so far from a stream's events.
#[derive(Debug)]
pub(crate) struct StreamState {
    content: String,
    calls: Vec<PartialCall>,
    usage: Option<Value>,
    /// The last non-null `finish_reason` of choice 0, for the record.
    finish_reason: Option<Value>,
    done: bool,
    /// Bytes of content and tool call text assembled so far, and their bound.
    assembled: usize,
    max_assembled: usize,
}

impl Default for StreamState {
    fn default() -> Self {
        Self::with_limit(usize::MAX)
    }
}

/// A retryable error of the stream itself, labelled `stream`.
pub(crate) fn stream_error(message: impl Into<String>) -> LlmError {
    LlmError {
        class: ErrorClass::Retryable,
        status: Some(200),
        label: "stream".to_owned(),
        message: message.into(),
    }
}

impl StreamState {
    /// A state that fails `too_large` once the assembled reply (content, tool call ids,
    /// names and arguments) passes `max_assembled` bytes (`llm.max_response_bytes`).
    pub(crate) fn with_limit(max_assembled: usize) -> Self {
        Self {
            content: String::new(),
            calls: Vec::new(),
            usage: None,
            finish_reason: None,
            done: false,
            assembled: 0,
            max_assembled,
        }
    }

    /// Whether `[DONE]` was received.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds one SSE event (`event` is its type, empty for plain `data:` lines) and passes
    /// any new content to `on_delta`.
    pub(crate) fn feed(
        &mut self,
        event: &str,
        data: &str,
        on_delta: Option<&(dyn Fn(&str) + Send + Sync)>,
    ) -> Result<(), LlmError> {
        let data = data.trim();
        if event == "error" {
            return Err(stream_error(provider_error(data)));
        }
        if data.is_empty() {
            return Ok(());
        }
        if data == DONE {
            self.done = true;
            return Ok(());
        }
        let chunk: ChatChunk = serde_json::from_str(data)
            .map_err(|e| decode_error(200, format!("undecodable stream chunk: {e}")))?;
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            let message = error_text(&error).unwrap_or_else(|| error.to_string());
            return Err(stream_error(format!(
                "provider error mid-stream: {message}"
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let choices = chunk.choices.unwrap_or_default().into_iter();
        for choice in choices.filter(|choice| choice.index.unwrap_or(0) == 0) {
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_null()) {
                self.finish_reason = Some(reason);
            }
            if let Some(delta) = choice.delta {
                self.apply(delta, on_delta);
            }
        }
        if self.assembled > self.max_assembled {
            let max = self.max_assembled;
            return Err(too_large(200, "streamed reply", "max_response_bytes", max));
        }
        Ok(())
    }

    fn apply(&mut self, delta: ChunkDelta, on_delta: Option<&(dyn Fn(&str) + Send + Sync)>) {
        if let Some(content) = delta.content.as_ref().map(content_text)
            && !content.is_empty()
        {
            self.assembled = self.assembled.saturating_add(content.len());
            self.content.push_str(&content);
            if let Some(on_delta) = on_delta {
                on_delta(&content);
            }
        }
        for fragment in delta.tool_calls.unwrap_or_default() {
            self.merge(fragment);
        }
    }

    /// Merges a fragment into its call: by `index`; without one, a new non-empty id starts
    /// a new call and anything else continues the last call.
    fn merge(&mut self, fragment: ChunkToolCall) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let position = match (fragment.index, &id) {
            (Some(index), _) => self.calls.iter().position(|c| c.index == Some(index)),
            (None, Some(id)) => self.calls.iter().position(|c| c.id.as_ref() == Some(id)),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let position = position.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                index: fragment.index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        let call = &mut self.calls[position];
        let function = fragment.function.unwrap_or_default();
        let piece = match function.arguments {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text),
            Some(other) => Some(other.to_string()),
        };
        // What this fragment adds to the reply, counted against `max_assembled`.
        let mut added = piece.as_ref().map_or(0, String::len);
        if call.id.is_none() {
            added += id.as_ref().map_or(0, String::len);
            call.id = id;
        }
        if call.name.is_none() {
            call.name = function.name.filter(|name| !name.is_empty());
            added += call.name.as_ref().map_or(0, String::len);
        }
        self.assembled = self.assembled.saturating_add(added);
        if let Some(piece) = piece {
            call.arguments
                .get_or_insert_with(String::new)
                .push_str(&piece);
        }
    }

    /// The assembled reply and, for the record, the reassembled completion
    /// `{"choices": [{"index": 0, "message", "finish_reason"}], "usage"}`: read back as a
    /// plain response it gives the same reply (tool call ids as assigned here included).
    pub(crate) fn finish_recorded(mut self) -> Result<(LlmReply, Value), LlmError> {
        let (finish_reason, usage) = (self.finish_reason.take(), self.usage.clone());
        let reply = self.finish()?;
        let mut message = serde_json::json!({"role": "assistant", "content": reply.content});
        if !reply.tool_calls.is_empty() {
            let calls: Vec<Value> = reply
                .tool_calls
                .iter()
                .map(|call| {
                    serde_json::json!({"id": call.id, "type": "function", "function": {
                        "name": call.name, "arguments": call.arguments}})
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        let completion = serde_json::json!({
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        });
        Ok((reply, completion))
    }

    /// The assembled reply; an error if the stream ended before `[DONE]`.
    pub(crate) fn finish(self) -> Result<LlmReply, LlmError> {
        if !self.done {
            return Err(stream_error("the stream ended before data: [DONE]"));
        }
        let mut calls = self.calls;
        calls.sort_by_key(|call| call.index.unwrap_or(u64::MAX));
        let tool_calls = calls
            .into_iter()
            .map(|call| {
                tool_call_from(WireToolCall {
                    id: call.id,
                    function: Some(WireFunctionCall {
                        name: call.name,
                        arguments: call.arguments.map(Value::String),
                    }),
                })
            })
            .collect();
        Ok(LlmReply {
            content: self.content,
            tool_calls,
            usage: self.usage.as_ref().map(usage_from).unwrap_or_default(),
        })
    }
}

/// The message of an `event: error` payload: the provider's error text, else the raw data.
fn provider_error(data: &str) -> String {
    let parsed = serde_json::from_str::<Value>(data).ok();
    let text = parsed.as_ref().and_then(|value| {
        value
            .get("error")
            .and_then(error_text)
            .or_else(|| error_text(value))
    });
    let detail = text.unwrap_or_else(|| data.to_owned());
    format!("provider error mid-stream: {detail}")
}

#[cfg(test)]
mod tests;
