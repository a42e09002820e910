//! Unit tests of stream assembly: deltas, fragment merging, usage, `[DONE]`, errors, and
//! equality with the non-streamed normalization.

use std::sync::Mutex;

use serde_json::{Value, json};

use super::*;
use crate::llm::wire::ChatResponse;

/// Feeds `chunks` (JSON values, or raw strings sent as they are) and returns the state and
/// the deltas seen.
fn feed_all(chunks: &[Value]) -> (Result<(), LlmError>, StreamState, Vec<String>) {
    let seen = Mutex::new(Vec::new());
    let on_delta = |text: &str| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(text.to_owned());
        }
    };
    let mut state = StreamState::default();
    let mut result = Ok(());
    for chunk in chunks {
        let data = match chunk {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        };
        result = state.feed("", &data, Some(&on_delta));
        if result.is_err() || state.is_done() {
            break;
        }
    }
    let seen = seen.into_inner().unwrap_or_default();
    (result, state, seen)
}

fn delta(delta: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
}

#[test]
fn content_deltas_are_forwarded_and_concatenated() -> Result<(), LlmError> {
    let (result, state, seen) = feed_all(&[
        delta(json!({"role": "assistant", "content": ""})),
        delta(json!({"content": "Hel"})),
        delta(json!({"content": null})),
        delta(json!({"content": "lo"})),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
        json!("[DONE]"),
    ]);
    result?;
    assert_eq!(seen, ["Hel", "lo"]);
    let reply = state.finish()?;
    assert_eq!(reply.content, "Hello");
    assert_eq!(
        (reply.usage.prompt_tokens, reply.usage.completion_tokens),
        (Some(5), Some(2))
    );
    Ok(())
}

#[test]
fn tool_call_fragments_merge_by_index() -> Result<(), LlmError> {
    let call = |index: u64, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut function = json!({"arguments": args});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut fragment = json!({"index": index, "function": function});
        if let Some(id) = id {
            fragment["id"] = json!(id);
            fragment["type"] = json!("function");
        }
        delta(json!({"tool_calls": [fragment]}))
    };
    let (result, state, _) = feed_all(&[
        call(0, Some("call_a"), Some("calculate"), ""),
        call(1, Some("call_b"), Some("take_memo"), "{\"no"),
        call(0, None, None, "{\"expression\""),
        call(0, None, None, ":\"6*7\"}"),
        call(1, Some(""), Some(""), "te\":\"n\"}"),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
               "usage": null}),
        json!("[DONE]"),
    ]);
    result?;
    let reply = state.finish()?;
    assert_eq!(reply.content, "");
    assert_eq!(reply.usage, Default::default());
    let calls: Vec<(&str, &str, &str)> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_a", "calculate", r#"{"expression":"6*7"}"#),
            ("call_b", "take_memo", r#"{"note":"n"}"#)
        ]
    );
    Ok(())
}

#[test]
fn fragments_without_index_follow_their_id_or_the_last_call() -> Result<(), LlmError> {
    let (result, state, _) = feed_all(&[
        delta(json!({"tool_calls": [{"id": "x", "function": {"name": "current_time"}}]})),
        delta(json!({"tool_calls": [{"function": {"arguments": "{}"}}]})),
        delta(json!({"tool_calls": [{"id": "y", "function": {"name": "calculate"}}]})),
        delta(json!({"tool_calls": [{"id": "y", "function": {"arguments": {"a": 1}}}]})),
        json!("[DONE]"),
    ]);
    result?;
    let reply = state.finish()?;
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[0].arguments, "{}");
    assert_eq!(reply.tool_calls[1].name, "calculate");
    assert_eq!(reply.tool_calls[1].arguments, r#"{"a":1}"#);
    Ok(())
}

#[test]
fn streamed_and_plain_replies_normalize_the_same() -> Result<(), String> {
    let (result, state, _) = feed_all(&[
        delta(json!({"content": "{\"a\":"})),
        delta(json!({"content": "1}", "tool_calls": [{"index": 0, "function": {"name": "f"}}]})),
        json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
        json!("[DONE]"),
    ]);
    result.map_err(|e| e.to_string())?;
    let streamed = state.finish().map_err(|e| e.to_string())?;
    let plain: ChatResponse = serde_json::from_value(json!({
        "choices": [{"message": {"content": "{\"a\":1}", "tool_calls": [
            {"function": {"name": "f"}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}
    }))
    .map_err(|e| e.to_string())?;
    let plain = plain.into_reply()?;
    assert!(streamed.tool_calls[0].id.starts_with("call_"));
    assert!(plain.tool_calls[0].id.starts_with("call_"));
    let without_ids = |mut reply: LlmReply| {
        reply.tool_calls.iter_mut().for_each(|c| c.id.clear());
        reply
    };
    assert_eq!(without_ids(streamed), without_ids(plain));
    Ok(())
}

#[test]
fn a_stream_without_done_is_a_retryable_stream_error() {
    let (result, state, seen) = feed_all(&[delta(json!({"content": "partial"}))]);
    assert!(result.is_ok());
    assert_eq!(seen, ["partial"]);
    let error = state.finish().err();
    let error = error.map(|e| (e.class, e.label, e.message));
    assert_eq!(
        error,
        Some((
            ErrorClass::Retryable,
            "stream".to_owned(),
            "the stream ended before data: [DONE]".to_owned()
        ))
    );
}

#[test]
fn provider_errors_mid_stream_are_retryable() {
    let (result, _, seen) = feed_all(&[
        delta(json!({"content": "par"})),
        json!({"error": {"message": "upstream overloaded", "type": "server_error"}}),
        json!("[DONE]"),
    ]);
    assert_eq!(seen, ["par"]);
    let error = result.err();
    let error = error.map(|e| (e.class, e.label, e.message));
    assert_eq!(
        error,
        Some((
            ErrorClass::Retryable,
            "stream".to_owned(),
            "provider error mid-stream: upstream overloaded".to_owned()
        ))
    );
    let mut state = StreamState::default();
    let typed = state
        .feed("error", r#"{"message":"bad things"}"#, None)
        .err();
    assert_eq!(
        typed.map(|e| e.message),
        Some("provider error mid-stream: bad things".to_owned())
    );
    let raw = state.feed("error", "gateway down", None).err();
    assert_eq!(
        raw.map(|e| e.message),
        Some("provider error mid-stream: gateway down".to_owned())
    );
}

#[test]
fn garbled_chunks_are_decode_errors_and_blank_data_is_ignored() {
    let mut state = StreamState::default();
    assert!(state.feed("", "  ", None).is_ok());
    let error = state.feed("", "{not json", None).err();
    let error = error.map(|e| (e.class, e.label));
    assert_eq!(error, Some((ErrorClass::Retryable, "decode".to_owned())));
}
