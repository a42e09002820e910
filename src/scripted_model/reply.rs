//! One scripted answer of the model: an HTTP status, a JSON body, extra headers, a delay and
//! how its stream ends when the request asked for one. A 200 completion answers a
//! `"stream": true` request as Server-Sent Events (`sse.rs`); error statuses stay plain JSON,
//! as real providers send them.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::request::ModelRequest;
use super::sse::{self, StreamEnd};

/// Replaced in reply bodies by the request's `current_recursion.trace_id`, so scripted
/// seed-002 replies can echo the right trace id.
pub const TRACE_ID_PLACEHOLDER: &str = "{{trace_id}}";

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct ModelReply {
    status: u16,
    body: Value,
    headers: Vec<(String, String)>,
    delay: Option<Duration>,
    stream_end: StreamEnd,
}

/// A native tool call `{"id", "type": "function", "function": {"name", "arguments"}}` for
/// [`ModelReply::completion`]; `arguments` is the JSON text the provider sends.
pub fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

impl ModelReply {
    /// 200 with `message.content = text` and no tool calls.
    pub fn content(text: impl Into<String>) -> ModelReply {
        Self::completion(Value::String(text.into()), None)
    }

    /// 200 with `message.content = value.to_string()`.
    pub fn json(value: Value) -> ModelReply {
        Self::content(value.to_string())
    }

    /// 200 with `content = content_json.to_string()` (null when `content_json` is null)
    /// and native `tool_calls` with ids `call_1`, `call_2`, ... and string arguments.
    pub fn tool_calls(content_json: Value, calls: Vec<(&str, Value)>) -> ModelReply {
        let content = match content_json {
            Value::Null => Value::Null,
            other => Value::String(other.to_string()),
        };
        let calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| {
                tool_call(&format!("call_{}", i + 1), name, &arguments.to_string())
            })
            .collect();
        Self::completion(content, Some(calls))
    }

    /// A 200 Chat Completions body with this message content and, when there are some,
    /// these tool calls (see [`tool_call`]); `finish_reason` is `tool_calls` or `stop`, the
    /// usage 11 prompt and 7 completion tokens until [`ModelReply::with_usage`].
    pub fn completion(content: Value, tool_calls: Option<Vec<Value>>) -> ModelReply {
        let finish_reason = if tool_calls.is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        let mut message = json!({"role": "assistant", "content": content});
        if let Some(calls) = tool_calls {
            message["tool_calls"] = Value::Array(calls);
        }
        Self::raw_body(
            200,
            json!({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                "model": "scripted-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            }),
        )
    }

    /// An error status with an OpenAI error body `{"error": {"message": ..}}`.
    pub fn status(code: u16, message: &str) -> ModelReply {
        Self::raw_body(
            code,
            json!({"error": {"message": message, "type": "scripted_error", "code": code}}),
        )
    }

    /// Any status with exactly this JSON body.
    pub fn raw_body(status: u16, body: Value) -> ModelReply {
        ModelReply {
            status,
            body,
            headers: Vec::new(),
            delay: None,
            stream_end: StreamEnd::Done,
        }
    }

    /// The usage the completion reports (`total_tokens` is their sum).
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> ModelReply {
        if self.body.get("usage").is_some() {
            self.body["usage"] = json!({"prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens});
        }
        self
    }

    /// Adds `Retry-After: secs`.
    pub fn with_retry_after(self, secs: u64) -> ModelReply {
        self.with_header("retry-after", &secs.to_string())
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> ModelReply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Waits this long before answering.
    pub fn with_delay(mut self, delay: Duration) -> ModelReply {
        self.delay = Some(delay);
        self
    }

    /// When streamed: after the content chunks, a provider error object with `message`,
    /// and no `[DONE]`. Not streamed, the reply is unchanged.
    pub fn with_stream_error(mut self, message: &str) -> ModelReply {
        self.stream_end = StreamEnd::Error(message.to_owned());
        self
    }

    /// When streamed: the stream stops after the finish chunk, without usage or `[DONE]`.
    pub fn with_stream_cut(mut self) -> ModelReply {
        self.stream_end = StreamEnd::Cut;
        self
    }

    /// Answers plain JSON even to a stream request (a provider ignoring `"stream": true`).
    pub fn ignoring_stream(mut self) -> ModelReply {
        self.stream_end = StreamEnd::Ignored;
        self
    }

    /// When streamed: the content is sent again and again and the stream never ends.
    pub fn with_endless_stream(mut self) -> ModelReply {
        self.stream_end = StreamEnd::Endless;
        self
    }

    /// The HTTP status.
    pub fn status_code(&self) -> u16 {
        self.status
    }

    /// The JSON body (before the trace id is filled in).
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// How long the model waits before answering.
    pub(super) fn delay(&self) -> Option<Duration> {
        self.delay
    }

    /// The response to `request`: the trace id filled in, streamed when it asked for a
    /// stream and this is a 200 completion.
    pub(super) fn into_response_for(self, request: &ModelRequest) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = fill_trace_id(self.body, request);
        let frames = match (request.streamed(), status) {
            (true, StatusCode::OK) => sse::frames(&body, &self.stream_end),
            _ => None,
        };
        let endless = request.streamed() && self.stream_end == StreamEnd::Endless;
        let mut response = match frames {
            Some(frames) => sse::response(frames),
            None if endless => sse::endless(&body),
            None => (status, axum::Json(body)).into_response(),
        };
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

fn fill_trace_id(body: Value, request: &ModelRequest) -> Value {
    let text = body.to_string();
    if !text.contains(TRACE_ID_PLACEHOLDER) {
        return body;
    }
    match request.snapshot().and_then(|s| s.trace_id()) {
        Some(id) => serde_json::from_str(&text.replace(TRACE_ID_PLACEHOLDER, &id)).unwrap_or(body),
        None => body,
    }
}
