//! What the client reads is bounded and where it sends is fixed: a body above
//! `max_response_bytes` and an endless stream (past `max_stream_bytes`) end the attempt
//! with a fatal `too_large` error instead of filling memory; a redirect is not followed
//! (the other host gets nothing) and is an error naming the status and the Location, never
//! the body; a password in `base_url` never shows in an error.

use std::sync::atomic::{AtomicUsize, Ordering};

use agentd::core::retry::ErrorClass;
use agentd::core::types::ToolSpec;
use agentd::llm::OpenAiClient;
use agentd::ports::{Llm, LlmRequest};
use serde_json::json;

use super::{assert_key_absent, chat, messages, settings};
use agentd::scripted_model::{ModelReply, ScriptedModel};

/// A client of `llm` reading at most `max_response_bytes` / `max_stream_bytes`.
fn bounded_client(
    llm: &ScriptedModel,
    max_response_bytes: usize,
    max_stream_bytes: usize,
) -> OpenAiClient {
    let mut settings = settings(&llm.base_url(), 5_000);
    settings.max_response_bytes = max_response_bytes;
    settings.max_stream_bytes = max_stream_bytes;
    OpenAiClient::new(&settings).expect("client builds")
}

#[tokio::test]
async fn a_body_above_max_response_bytes_is_a_fatal_too_large_error() {
    let llm = ScriptedModel::start().await.unwrap();
    let client = bounded_client(&llm, 64 * 1024, 1024 * 1024);
    llm.script(
        "huge-body",
        vec![ModelReply::content("x".repeat(200 * 1024))],
    );
    let error = chat(&client, "huge-body", &[])
        .await
        .expect_err("too large");
    assert_eq!(
        (error.class, error.label.as_str(), error.status),
        (ErrorClass::Fatal, "too_large", Some(200))
    );
    assert!(
        error
            .message
            .contains("llm.max_response_bytes (65536 bytes)"),
        "{}",
        error.message
    );
    assert_key_absent(&error);
    // Below the bound the same client reads the reply.
    llm.script("small-body", vec![ModelReply::content("x".repeat(1024))]);
    let reply = chat(&client, "small-body", &[]).await.expect("reply");
    assert_eq!(reply.content.len(), 1024);
}

#[tokio::test]
async fn an_endless_stream_stops_at_max_stream_bytes() {
    let llm = ScriptedModel::start().await.unwrap();
    let client = bounded_client(&llm, 1024 * 1024, 256 * 1024);
    llm.script(
        "endless",
        vec![ModelReply::content("tok ").with_endless_stream()],
    );
    let deltas = AtomicUsize::new(0);
    let on_delta = |text: &str| {
        deltas.fetch_add(text.len(), Ordering::Relaxed);
    };
    let messages = messages("endless");
    let tools: [ToolSpec; 0] = [];
    let request = LlmRequest {
        model: "test-model",
        messages: &messages,
        tools: &tools,
        stream: true,
        on_delta: Some(&on_delta),
        params: None,
    };
    let error = client.chat(request).await.expect_err("too large");
    assert_eq!(
        (error.class, error.label.as_str()),
        (ErrorClass::Fatal, "too_large"),
        "{error}"
    );
    assert!(
        error
            .message
            .contains("llm.max_stream_bytes (262144 bytes)"),
        "{}",
        error.message
    );
    let streamed = deltas.load(Ordering::Relaxed);
    assert!(
        (1..256 * 1024).contains(&streamed),
        "{streamed} content bytes handed over"
    );
}

#[tokio::test]
async fn a_stream_assembling_more_than_max_response_bytes_stops() {
    let llm = ScriptedModel::start().await.unwrap();
    let client = bounded_client(&llm, 16 * 1024, 64 * 1024 * 1024);
    llm.script(
        "long-stream",
        vec![ModelReply::content("y".repeat(1000)).with_endless_stream()],
    );
    let messages = messages("long-stream");
    let request = LlmRequest {
        model: "test-model",
        messages: &messages,
        tools: &[],
        stream: true,
        on_delta: None,
        params: None,
    };
    let error = client.chat(request).await.expect_err("too large");
    assert_eq!(error.label, "too_large", "{error}");
    assert!(
        error.message.contains("llm.max_response_bytes"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (llm, elsewhere) = (
        ScriptedModel::start().await.unwrap(),
        ScriptedModel::start().await.unwrap(),
    );
    elsewhere.script("moved", vec![ModelReply::content("from the other host")]);
    let target = elsewhere
        .base_url()
        .replace("http://", "http://someone:hunter2@");
    let location = format!("{target}/chat/completions");
    let moved = ModelReply::raw_body(307, json!({"secret_body": "do not quote me"}))
        .with_header("location", &location);
    llm.script("moved", vec![moved]);
    let error = chat(
        &bounded_client(&llm, 1024 * 1024, 1024 * 1024),
        "moved",
        &[],
    )
    .await
    .expect_err("a redirect is an error");
    assert!(
        elsewhere.requests().is_empty(),
        "the other host got a request"
    );
    assert_eq!(
        (error.class, error.label.as_str(), error.status),
        (ErrorClass::Fatal, "http_307", Some(307))
    );
    let redacted = format!(
        "{}/chat/completions",
        elsewhere.base_url().replace("http://", "http://***@")
    );
    assert!(error.message.contains(&redacted), "{}", error.message);
    for hidden in ["hunter2", "someone", "do not quote me"] {
        assert!(!error.message.contains(hidden), "{}", error.message);
    }
}

#[test]
fn a_password_in_base_url_never_shows() {
    for base_url in [
        "http://operator:hunter2@127.0.0.1:notaport/v1",
        "http://operator:hunter2@[::1/v1",
        "http://operator:hunter2@127.0.0.1:8080/v 1\u{0}",
    ] {
        let result = OpenAiClient::new(&settings(base_url, 1_000));
        let message = match result {
            Ok(client) => format!("{client:?}"),
            Err(error) => format!("{error:#} {error:?}"),
        };
        assert!(!message.contains("hunter2"), "{message}");
        assert!(!message.contains("operator:"), "{message}");
    }
}
