//! The model's streaming mode: a scripted 200 completion re-encoded as the Server-Sent
//! Events an OpenAI-compatible provider sends for `"stream": true`. The content is split
//! every [`CONTENT_PIECE`] characters, each tool call is sent as a first fragment with
//! index, id and name and then its arguments in pieces of [`ARGUMENT_PIECE`] characters, a
//! finish chunk follows, then a usage chunk (no choices) and `data: [DONE]`.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Characters of content per chunk.
pub const CONTENT_PIECE: usize = 7;
/// Characters of tool call arguments per fragment.
pub const ARGUMENT_PIECE: usize = 5;

/// How a scripted stream ends.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum StreamEnd {
    /// Usage chunk, then `data: [DONE]`.
    #[default]
    Done,
    /// After the content chunks, a provider error object `{"error": {"message": ..}}`;
    /// nothing follows.
    Error(String),
    /// After the finish chunk the connection closes: no usage, no `[DONE]`.
    Cut,
    /// Not streamed at all: plain JSON, like a provider that ignores `"stream": true`.
    Ignored,
    /// Never ends: the content is sent again and again, as one chunk each time, until the
    /// client goes away (a runaway model or a hostile provider).
    Endless,
}

/// The SSE frames for a completion body; `None` when `body` is not a completion.
pub fn frames(body: &Value, end: &StreamEnd) -> Option<Vec<String>> {
    if matches!(end, StreamEnd::Ignored | StreamEnd::Endless) {
        return None;
    }
    let message = body.pointer("/choices/0/message")?;
    let finish = body.pointer("/choices/0/finish_reason").cloned();
    let id = body
        .get("id")
        .cloned()
        .unwrap_or_else(|| json!("chatcmpl-scripted"));
    let chunk = |delta: Value, finish: Option<Value>| {
        let choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        data(
            &json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                     "model": "scripted-model", "choices": [choice]}),
        )
    };
    let mut frames = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    if let Some(content) = message.get("content").and_then(Value::as_str) {
        for piece in pieces(content, CONTENT_PIECE) {
            frames.push(chunk(json!({ "content": piece }), None));
        }
    }
    if let StreamEnd::Error(message) = end {
        frames.push(data(
            &json!({"error": {"message": message, "type": "scripted_stream_error"}}),
        ));
        return Some(frames);
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for (index, call) in calls.into_iter().flatten().enumerate() {
        let name = call
            .pointer("/function/name")
            .cloned()
            .unwrap_or(Value::Null);
        let first = json!({"index": index, "id": call.get("id"), "type": "function",
                           "function": {"name": name, "arguments": ""}});
        frames.push(chunk(json!({ "tool_calls": [first] }), None));
        let arguments = match call.pointer("/function/arguments") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        for piece in pieces(&arguments, ARGUMENT_PIECE) {
            let fragment = json!({"index": index, "function": {"arguments": piece}});
            frames.push(chunk(json!({ "tool_calls": [fragment] }), None));
        }
    }
    frames.push(chunk(json!({}), Some(finish.unwrap_or(json!("stop")))));
    if *end == StreamEnd::Cut {
        return Some(frames);
    }
    if let Some(usage) = body.get("usage") {
        frames.push(data(&json!({"id": id, "object": "chat.completion.chunk",
                                  "choices": [], "usage": usage})));
    }
    frames.push("data: [DONE]\n\n".to_owned());
    Some(frames)
}

/// A 200 `text/event-stream` response sending each frame as its own body chunk.
pub fn response(frames: Vec<String>) -> Response {
    let stream = futures::stream::iter(
        frames
            .into_iter()
            .map(|f| Ok::<_, Infallible>(Bytes::from(f))),
    );
    event_stream(Body::from_stream(stream))
}

/// A 200 `text/event-stream` response that repeats a chunk holding the completion's content
/// (or "token " when it has none) forever.
pub fn endless(body: &Value) -> Response {
    let content = body
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
        .unwrap_or("token ");
    let choice = json!({"index": 0, "delta": {"content": content}, "finish_reason": null});
    let frame = Bytes::from(data(&json!({"id": "chatcmpl-endless",
        "object": "chat.completion.chunk", "created": 0, "model": "scripted-model",
        "choices": [choice]})));
    let stream = futures::stream::repeat_with(move || Ok::<_, Infallible>(frame.clone()));
    event_stream(Body::from_stream(stream))
}

fn event_stream(body: Body) -> Response {
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body);
    response.unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// `text` in pieces of `size` characters (none for empty text).
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}
