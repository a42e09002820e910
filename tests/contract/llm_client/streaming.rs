//! Streamed (SSE) calls against the fake over real HTTP: the request asks for a stream with
//! usage, content deltas arrive through `on_delta` and concatenate to the content, tool
//! calls fragmented over chunks are merged, and the reply equals the non-streamed reply of
//! the same script. Broken streams (a provider error mid-stream, no `[DONE]`) are
//! retryable `stream` errors; error statuses are classified as without streaming.

use std::sync::Mutex;

use agentd::core::retry::ErrorClass;
use agentd::core::types::{LlmReply, ToolSpec};
use agentd::ports::{Llm, LlmError, LlmRequest};
use serde_json::{Value, json};

use super::{assert_key_absent, chat, client, messages};
use agentd::scripted_model::{
    ARGUMENT_PIECE, CONTENT_PIECE, ModelReply, ScriptedModel, answer_reply, call_tool_reply,
};

/// Streams one call for `marker`, returning the result and every delta received.
async fn streamed(llm: &ScriptedModel, marker: &str) -> (Result<LlmReply, LlmError>, Vec<String>) {
    let deltas = Mutex::new(Vec::new());
    let on_delta = |text: &str| {
        if let Ok(mut deltas) = deltas.lock() {
            deltas.push(text.to_owned());
        }
    };
    let messages = messages(marker);
    let tools: [ToolSpec; 0] = [];
    let request = LlmRequest {
        model: "test-model",
        messages: &messages,
        tools: &tools,
        stream: true,
        on_delta: Some(&on_delta),
        params: None,
    };
    let result = client(llm).chat(request).await;
    (result, deltas.into_inner().unwrap_or_default())
}

/// The reply of `reply` scripted twice: streamed (with its deltas), then not streamed.
async fn both_ways(
    marker: &str,
    reply: ModelReply,
) -> (LlmReply, Vec<String>, LlmReply, ScriptedModel) {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(marker, vec![reply.clone(), reply]);
    let (streamed_reply, deltas) = streamed(&llm, marker).await;
    let streamed_reply = streamed_reply.expect("streamed reply");
    let plain = chat(&client(&llm), marker, &[]).await.expect("plain reply");
    (streamed_reply, deltas, plain, llm)
}

#[tokio::test]
async fn streamed_content_equals_the_deltas_and_the_plain_reply() {
    let (reply, deltas, plain, llm) = both_ways("stream-answer", answer_reply("6*7 is 42")).await;
    assert_eq!(reply, plain, "same script, same reply");
    assert_eq!(deltas.concat(), reply.content);
    let expected_pieces = reply.content.chars().count().div_ceil(CONTENT_PIECE);
    assert_eq!(deltas.len(), expected_pieces, "one delta per chunk");
    assert!(deltas.len() > 10);
    let seed: Value = serde_json::from_str(&reply.content).expect("seed JSON");
    assert_eq!(seed["action"]["output"]["answer"], "6*7 is 42");
    assert_eq!(
        (reply.usage.prompt_tokens, reply.usage.completion_tokens),
        (Some(11), Some(7))
    );
    let requests = llm.requests_for("stream-answer");
    assert!(requests[0].streamed() && !requests[1].streamed());
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(
        requests[0].body["stream_options"],
        json!({"include_usage": true})
    );
}

#[tokio::test]
async fn fragmented_tool_calls_are_merged() {
    let calls = vec![
        ("calculate", json!({"expression": "(6*7) + 1000 / 8"})),
        (
            "take_memo",
            json!({"note": "the answer is 42, remember it"}),
        ),
        ("current_time", json!({})),
    ];
    let (reply, deltas, plain, _) = both_ways("stream-tools", call_tool_reply(calls)).await;
    assert_eq!(reply, plain);
    assert_eq!(deltas.concat(), reply.content);
    let ids: Vec<&str> = reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["calculate", "take_memo", "current_time"]);
    assert!(reply.tool_calls[0].arguments.chars().count() > 3 * ARGUMENT_PIECE);
    let arguments: Vec<Value> = reply
        .tool_calls
        .iter()
        .map(|c| serde_json::from_str(&c.arguments).expect("arguments are JSON"))
        .collect();
    assert_eq!(arguments[0]["expression"], "(6*7) + 1000 / 8");
    assert_eq!(arguments[1]["note"], "the answer is 42, remember it");
    assert_eq!(arguments[2], json!({}));
}

#[tokio::test]
async fn a_provider_error_mid_stream_is_retryable() {
    let llm = ScriptedModel::start().await.unwrap();
    let broken = ModelReply::content("partial answer").with_stream_error("upstream overloaded");
    llm.script("stream-error", vec![broken]);
    let (result, deltas) = streamed(&llm, "stream-error").await;
    let error = result.expect_err("error mid-stream");
    assert_eq!(
        (error.class, error.label.as_str(), error.status),
        (ErrorClass::Retryable, "stream", Some(200))
    );
    assert!(
        error.message.contains("upstream overloaded"),
        "{}",
        error.message
    );
    assert_eq!(
        deltas.concat(),
        "partial answer",
        "deltas came before the error"
    );
    assert_key_absent(&error);
}

#[tokio::test]
async fn a_stream_without_done_is_retryable() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(
        "stream-cut",
        vec![ModelReply::content("cut short").with_stream_cut()],
    );
    let (result, _) = streamed(&llm, "stream-cut").await;
    let error = result.expect_err("no [DONE]");
    assert_eq!(
        (error.class, error.label.as_str()),
        (ErrorClass::Retryable, "stream")
    );
    assert!(error.message.contains("[DONE]"), "{}", error.message);
}

#[tokio::test]
async fn error_statuses_are_classified_as_without_streaming() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(
        "stream-429",
        vec![ModelReply::status(429, "slow down").with_retry_after(3)],
    );
    llm.script(
        "stream-401",
        vec![ModelReply::status(401, "invalid api key")],
    );
    let (limited, deltas) = streamed(&llm, "stream-429").await;
    let limited = limited.expect_err("429");
    assert_eq!(
        limited.class,
        ErrorClass::RetryAfter(std::time::Duration::from_secs(3))
    );
    assert!(deltas.is_empty());
    let (denied, _) = streamed(&llm, "stream-401").await;
    let denied = denied.expect_err("401");
    assert_eq!(
        (denied.class, denied.message.as_str()),
        (ErrorClass::Fatal, "invalid api key")
    );
}

#[tokio::test]
async fn a_plain_answer_to_a_stream_request_is_accepted() {
    let llm = ScriptedModel::start().await.unwrap();
    let reply = ModelReply::content("not streamed").ignoring_stream();
    llm.script("stream-ignored", vec![reply]);
    let (result, deltas) = streamed(&llm, "stream-ignored").await;
    let reply = result.expect("reply");
    assert_eq!(reply.content, "not streamed");
    assert_eq!(deltas, ["not streamed"], "the content arrives whole");
    assert_eq!(reply.usage.prompt_tokens, Some(11));
}

#[tokio::test]
async fn plain_calls_never_call_on_delta() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script("plain-delta", vec![ModelReply::content("whole")]);
    let called = Mutex::new(0);
    let on_delta = |_: &str| {
        if let Ok(mut called) = called.lock() {
            *called += 1;
        }
    };
    let messages = messages("plain-delta");
    let request = LlmRequest {
        model: "m",
        messages: &messages,
        tools: &[],
        stream: false,
        on_delta: Some(&on_delta),
        params: None,
    };
    let reply = client(&llm).chat(request).await.expect("reply");
    assert_eq!(reply.content, "whole");
    assert_eq!(called.into_inner().unwrap_or(1), 0);
}
