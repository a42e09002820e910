//! [`OpenAiClient`] against the scripted fake LLM over real HTTP: request shape and bearer
//! header, plain and tool-call replies, lenient decoding, and the classification of HTTP
//! statuses, undecodable bodies, connect errors and timeouts. The API key must never show
//! up in an error or a `Debug` print. Streaming (SSE) is tested in `llm_client/streaming.rs`,
//! the size bounds, redirects and URL passwords in `llm_client/bounds.rs`.

mod streaming;

mod bounds;

use std::time::{Duration, Instant};

use agentd::core::retry::ErrorClass;
use agentd::core::types::{ChatMessage, LlmReply, Role, ToolSpec};
use agentd::llm::{LlmSettings, OpenAiClient, Secret};
use agentd::ports::{Llm, LlmError, LlmRequest};
use agentd::scripted_model::{ModelReply, ScriptedModel, call_tool_reply};
use serde_json::{Value, json};

const KEY: &str = "sk-test-key-0123456789";

fn settings(base_url: &str, timeout_ms: u64) -> LlmSettings {
    LlmSettings {
        base_url: base_url.to_owned(),
        api_key: Some(Secret::new(KEY)),
        timeout_ms,
        connect_timeout_ms: 1_000,
        max_response_bytes: agentd::llm::DEFAULT_MAX_RESPONSE_BYTES,
        max_stream_bytes: agentd::llm::DEFAULT_MAX_STREAM_BYTES,
    }
}

fn client(llm: &ScriptedModel) -> OpenAiClient {
    OpenAiClient::new(&settings(&llm.base_url(), 5_000)).expect("client builds")
}

fn messages(marker: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::new(Role::User, format!("{marker}: what is 6*7?")),
        ChatMessage::new(Role::System, "You are a recursive ReAct agent."),
    ]
}

async fn chat(
    client: &OpenAiClient,
    marker: &str,
    tools: &[ToolSpec],
) -> Result<LlmReply, LlmError> {
    let messages = messages(marker);
    let request = LlmRequest {
        model: "test-model",
        messages: &messages,
        tools,
        stream: false,
        on_delta: None,
        params: None,
    };
    client.chat(request).await
}

/// Scripts one reply for a fresh marker and returns the client's result.
async fn one(llm: &ScriptedModel, marker: &str, reply: ModelReply) -> Result<LlmReply, LlmError> {
    llm.script(marker, vec![reply]);
    chat(&client(llm), marker, &[]).await
}

fn assert_key_absent(error: &LlmError) {
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(KEY), "key leaked: {text}");
    }
}

#[tokio::test]
async fn plain_content_and_request_shape() {
    let llm = ScriptedModel::start().await.unwrap();
    let reply = one(&llm, "plain", ModelReply::content("hello"))
        .await
        .expect("reply");
    assert_eq!(reply.content, "hello");
    assert!(reply.tool_calls.is_empty());
    assert_eq!(
        (reply.usage.prompt_tokens, reply.usage.completion_tokens),
        (Some(11), Some(7))
    );
    let request = &llm.requests_for("plain")[0];
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(request.body["stream"], false);
    assert!(
        request.body.get("tools").is_none(),
        "empty tools are omitted"
    );
    assert_eq!(
        request.messages()[0],
        ("user".to_owned(), "plain: what is 6*7?".to_owned())
    );
    assert_eq!(request.messages()[1].0, "system");
}

#[tokio::test]
async fn tools_are_offered_as_functions() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script("offer", vec![ModelReply::content("{}")]);
    let tools = [ToolSpec {
        name: "calculate".into(),
        description: "math".into(),
        parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
    }];
    let messages = messages("offer");
    let request = LlmRequest {
        model: "m",
        messages: &messages,
        tools: &tools,
        stream: false,
        on_delta: None,
        params: None,
    };
    client(&llm).chat(request).await.expect("reply");
    let body = &llm.requests_for("offer")[0].body;
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "calculate");
    assert_eq!(
        body["tools"][0]["function"]["parameters"],
        tools[0].parameters
    );
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn native_tool_calls_keep_ids_and_argument_strings() {
    let llm = ScriptedModel::start().await.unwrap();
    let calls = vec![
        ("calculate", json!({"expression": "6*7"})),
        ("current_time", json!({})),
    ];
    let reply = one(&llm, "tools", call_tool_reply(calls))
        .await
        .expect("reply");
    let seed: Value = serde_json::from_str(&reply.content).expect("content is the seed JSON");
    assert_eq!(seed["action"]["action_type"], "CALL_TOOL");
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[0].id, "call_1");
    assert_eq!(reply.tool_calls[0].name, "calculate");
    assert_eq!(reply.tool_calls[0].arguments, r#"{"expression":"6*7"}"#);
    assert_eq!(reply.tool_calls[1].id, "call_2");
    assert_eq!(reply.tool_calls[1].arguments, "{}");
}

#[tokio::test]
async fn lenient_bodies_are_normalized() {
    let llm = ScriptedModel::start().await.unwrap();
    let body = json!({
        "surprise": {"nested": true},
        "choices": [{"index": 0, "logprobs": null, "message": {"role": "assistant", "content": null,
            "tool_calls": [
                {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "2+2"}}},
                {"id": "", "function": {"name": "current_time", "arguments": ""}}
            ]}}]
    });
    let reply = one(&llm, "lenient", ModelReply::raw_body(200, body))
        .await
        .expect("reply");
    assert_eq!(reply.content, "");
    assert_eq!(reply.usage, Default::default());
    let ids: Vec<&str> = reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert!(
        ids.iter()
            .all(|id| id.starts_with("call_") && id.len() == 37),
        "{ids:?}"
    );
    assert_ne!(ids[0], ids[1]);
    assert_eq!(reply.tool_calls[0].arguments, r#"{"expression":"2+2"}"#);
    assert_eq!(reply.tool_calls[1].arguments, "");
}

#[tokio::test]
async fn rate_limits_carry_retry_after() {
    let llm = ScriptedModel::start().await.unwrap();
    let slow = ModelReply::status(429, "rate limited").with_retry_after(7);
    let error = one(&llm, "limited", slow).await.expect_err("429");
    assert_eq!(error.class, ErrorClass::RetryAfter(Duration::from_secs(7)));
    assert_eq!(
        (error.status, error.label.as_str()),
        (Some(429), "http_429")
    );
    assert_eq!(error.message, "rate limited");
    let dated =
        ModelReply::status(503, "busy").with_header("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT");
    let error = one(&llm, "dated", dated).await.expect_err("503");
    assert_eq!(
        error.class,
        ErrorClass::RetryAfter(Duration::ZERO),
        "a past date means now"
    );
    let bare = one(&llm, "bare", ModelReply::status(429, "later"))
        .await
        .expect_err("429");
    assert_eq!(bare.class, ErrorClass::Retryable);
}

#[tokio::test]
async fn server_errors_are_retryable() {
    let llm = ScriptedModel::start().await.unwrap();
    let error = one(&llm, "down", ModelReply::status(500, "internal"))
        .await
        .expect_err("500");
    assert_eq!(error.class, ErrorClass::Retryable);
    assert_eq!(error.to_string(), "http_500: internal");
    let html = ModelReply::raw_body(502, json!("<html>bad gateway</html>"));
    let error = one(&llm, "gateway", html).await.expect_err("502");
    assert_eq!(
        (error.class, error.label.as_str()),
        (ErrorClass::Retryable, "http_502")
    );
    assert!(
        error.message.contains("<html>bad gateway</html>"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn client_errors_are_fatal_with_the_provider_message() {
    let llm = ScriptedModel::start().await.unwrap();
    let error = one(&llm, "bad", ModelReply::status(400, "model not found"))
        .await
        .expect_err("400");
    assert_eq!((error.class, error.status), (ErrorClass::Fatal, Some(400)));
    assert_eq!(error.message, "model not found");
    let error = one(&llm, "auth", ModelReply::status(401, "invalid api key"))
        .await
        .expect_err("401");
    assert_eq!(
        (error.class, error.label.as_str()),
        (ErrorClass::Fatal, "http_401")
    );
    assert_eq!(error.message, "invalid api key");
    assert_key_absent(&error);
    let client = client(&llm);
    assert!(!format!("{client:?}").contains(KEY));
    assert!(!format!("{:?}", settings(&llm.base_url(), 1)).contains(KEY));
}

#[tokio::test]
async fn echoed_keys_are_redacted() {
    let llm = ScriptedModel::start().await.unwrap();
    let echo = ModelReply::status(401, &format!("Incorrect API key provided: {KEY}"));
    let error = one(&llm, "echo", echo).await.expect_err("401");
    assert_eq!(error.message, "Incorrect API key provided: [redacted]");
    assert_key_absent(&error);
}

#[tokio::test]
async fn undecodable_success_is_a_retryable_decode_error() {
    let llm = ScriptedModel::start().await.unwrap();
    let error = one(
        &llm,
        "garbled",
        ModelReply::raw_body(200, json!("not a completion")),
    )
    .await
    .expect_err("decode");
    assert_eq!(
        (error.class, error.label.as_str(), error.status),
        (ErrorClass::Retryable, "decode", Some(200))
    );
    let error = one(
        &llm,
        "empty",
        ModelReply::raw_body(200, json!({"choices": []})),
    )
    .await
    .expect_err("decode");
    assert_eq!(error.label, "decode");
    assert_eq!(error.message, "response has no choices");
}

#[tokio::test]
async fn closed_port_is_a_retryable_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let client = OpenAiClient::new(&settings(&format!("http://127.0.0.1:{port}/v1"), 5_000))
        .expect("client");
    let error = chat(&client, "closed", &[])
        .await
        .expect_err("nothing listens");
    assert_eq!(
        (error.class, error.label.as_str(), error.status),
        (ErrorClass::Retryable, "connect", None)
    );
    assert_key_absent(&error);
}

/// The client's timeout in the slow-provider test, and how late the provider answers.
const CLIENT_TIMEOUT_MS: u64 = 300;
const SLOW_REPLY: Duration = Duration::from_secs(3);
/// Well past the timeout and well before the slow reply: the timeout cut the call.
const TIMED_OUT_WITHIN: Duration = Duration::from_secs(2);

#[tokio::test]
async fn slow_provider_is_a_retryable_timeout() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(
        "slow",
        vec![ModelReply::content("late").with_delay(SLOW_REPLY)],
    );
    let client = OpenAiClient::new(&settings(&llm.base_url(), CLIENT_TIMEOUT_MS)).expect("client");
    let started = Instant::now();
    let error = chat(&client, "slow", &[]).await.expect_err("times out");
    assert!(
        started.elapsed() < TIMED_OUT_WITHIN,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (error.class, error.label.as_str()),
        (ErrorClass::Retryable, "timeout")
    );
    assert_key_absent(&error);
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script("anon", vec![ModelReply::content("hi")]);
    let mut settings = settings(&llm.base_url(), 5_000);
    settings.api_key = None;
    let client = OpenAiClient::new(&settings).expect("client");
    chat(&client, "anon", &[]).await.expect("reply");
    assert_eq!(llm.requests_for("anon")[0].authorization, None);
}
