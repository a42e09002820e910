//! Unit tests of the client: the endpoint, secrets that never show (key, userinfo), and what
//! the record keeps of a response, plain and streamed.

use super::*;
use crate::config::{DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STREAM_BYTES};

fn settings(base_url: &str) -> LlmSettings {
    LlmSettings {
        base_url: base_url.to_owned(),
        api_key: Some(Secret::new("sk-unit-secret")),
        timeout_ms: 1_000,
        connect_timeout_ms: 500,
        max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
    }
}

#[test]
fn endpoint_joins_with_or_without_trailing_slash() -> anyhow::Result<()> {
    for base in ["http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/"] {
        let client = OpenAiClient::new(&settings(base))?;
        assert_eq!(
            client.endpoint(),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
    }
    Ok(())
}

#[test]
fn invalid_base_url_is_an_error() {
    assert!(OpenAiClient::new(&settings("not a url")).is_err());
}

#[test]
fn base_url_userinfo_never_shows() -> anyhow::Result<()> {
    let bad = OpenAiClient::new(&settings("http://user:hunter2@host:notaport/v1"));
    let message = format!("{:#}", bad.err().unwrap_or_else(|| anyhow::anyhow!("ok")));
    assert!(message.contains("llm.base_url"), "{message}");
    assert!(
        !message.contains("hunter2") && !message.contains("user:"),
        "{message}"
    );
    let good = settings("http://user:hunter2@127.0.0.1:8080/v1");
    let client = OpenAiClient::new(&good)?;
    for text in [format!("{good:?}"), format!("{client:?}")] {
        assert!(!text.contains("hunter2"), "{text}");
    }
    Ok(())
}

#[test]
fn debug_output_never_shows_the_key() -> anyhow::Result<()> {
    let settings = settings("http://127.0.0.1:8080/v1");
    let client = OpenAiClient::new(&settings)?;
    for text in [format!("{settings:?}"), format!("{client:?}")] {
        assert!(!text.contains("sk-unit-secret"), "{text}");
    }
    Ok(())
}

#[test]
fn settings_deserialize_with_defaults() -> anyhow::Result<()> {
    let settings: LlmSettings =
        serde_json::from_str(r#"{"base_url": "http://x/v1", "api_key": "k"}"#)?;
    assert_eq!(settings.api_key.as_ref().map(Secret::expose), Some("k"));
    assert_eq!(settings.timeout_ms, default_timeout_ms());
    assert_eq!(settings.connect_timeout_ms, default_connect_timeout_ms());
    Ok(())
}

#[test]
fn echoed_keys_are_scrubbed() -> anyhow::Result<()> {
    let client = OpenAiClient::new(&settings("http://127.0.0.1:8080/v1"))?;
    let error = client.scrub(http_error(401, None, b"bad key sk-unit-secret given"));
    assert_eq!(error.message, "bad key [redacted] given");
    Ok(())
}

#[test]
fn a_recorded_stream_reads_back_as_the_reply_the_client_parsed() {
    let mut state = StreamState::with_limit(usize::MAX);
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"content":"he"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"llo","tool_calls":[{"index":0,"function":{"name":"calculate","arguments":"{\"a\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        "[DONE]",
    ];
    for chunk in chunks {
        state.feed("", chunk, None).expect("chunk");
    }
    let (reply, completion) = state.finish_recorded().expect("reply");
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(completion["usage"]["completion_tokens"], 2);
    // The id the client made up for the call is in the record, so it reads back equal.
    assert!(reply.tool_calls[0].id.starts_with("call_"));
    let again = decode_completion(200, completion.to_string().as_bytes()).expect("again");
    assert_eq!(again, reply);
    assert_eq!(reply.content, "hello");
    assert_eq!(reply.tool_calls[0].arguments, r#"{"a":1}"#);
}

#[test]
fn a_plain_response_is_recorded_as_it_came_and_a_bad_one_with_its_status() {
    let body = br#"{"id":"x","choices":[{"message":{"content":"hi"}}],"extra":[1]}"#;
    let (reply, recorded) = decode_recorded(200, body);
    assert_eq!(reply.expect("reply").content, "hi");
    assert_eq!(recorded, serde_json::from_slice::<Value>(body).unwrap());
    let (reply, recorded) = decode_recorded(200, br#"{"choices":[]}"#);
    assert!(reply.is_err());
    assert_eq!(recorded, json!({"status": 200, "body": {"choices": []}}));
    let (reply, recorded) = decode_recorded(200, b"not json");
    assert!(reply.is_err());
    assert_eq!(recorded, json!({"status": 200, "body": "not json"}));
}
