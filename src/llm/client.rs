//! [`OpenAiClient`]: one Chat Completions attempt per [`Llm::chat`] call over reqwest,
//! plain JSON or, with `stream`, Server-Sent Events assembled by `stream.rs` (content
//! deltas go to the request's `on_delta` as they arrive). Retries are the driver's
//! business; this adapter only classifies what went wrong. The API key travels in a
//! sensitive `Authorization` header and is scrubbed from any provider message that would
//! echo it, so it never reaches an error, a `Debug` print or a log.
//!
//! `timeout_ms` bounds the whole attempt, a streamed body included; `max_response_bytes`
//! and `max_stream_bytes` bound what is read of it (`read.rs`). Redirects are never
//! followed: a 3xx is an error naming the status and the `Location`. The base URL's
//! userinfo never appears in an error or a `Debug` print.

use std::convert::Infallible;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use chrono::Utc;
use eventsource_stream::{EventStreamError, Eventsource as _};
use futures::StreamExt as _;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, LOCATION, RETRY_AFTER};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::core::types::LlmReply;
use crate::ports::{BodyPart, Exchange, Llm, LlmError, LlmRequest};

use super::errors::{decode_error, http_error, parse_retry_after, redirect_error, transport_error};
use super::stream::{StreamState, stream_error};
use super::wire::ChatResponse;
use super::{body, read};
use crate::config::{
    LlmConfig, Secret, default_max_response_bytes, default_max_stream_bytes, redact_userinfo,
};

/// How to reach the provider. `Debug` is safe to print: the key shows as `[redacted]` and
/// the base URL's userinfo as `***`.
#[derive(Clone, Deserialize)]
pub struct LlmSettings {
    /// The OpenAI-compatible `/v1` root, e.g. `http://127.0.0.1:8080/v1`; a trailing slash
    /// is fine.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...` when set.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Whole-request budget (connect, send, wait, read the body), in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// TCP (and TLS) connect budget, in milliseconds.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// The largest plain (non-streamed) response body read, and the largest reply assembled
    /// from a stream, in bytes; beyond it the attempt fails `too_large`.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// The most bytes of one streamed (SSE) response read, framing included; beyond it the
    /// attempt fails `too_large`.
    #[serde(default = "default_max_stream_bytes")]
    pub max_stream_bytes: usize,
}

impl std::fmt::Debug for LlmSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSettings")
            .field("base_url", &redact_userinfo(&self.base_url))
            .field("api_key", &self.api_key)
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_stream_bytes", &self.max_stream_bytes)
            .finish()
    }
}

fn default_timeout_ms() -> u64 {
    120_000
}

fn default_connect_timeout_ms() -> u64 {
    10_000
}

impl From<&LlmConfig> for LlmSettings {
    /// The client's settings from the `[llm]` section (an empty api_key counts as none).
    fn from(config: &LlmConfig) -> Self {
        Self {
            base_url: config.base_url.clone(),
            api_key: config
                .api_key
                .clone()
                .filter(|key| !key.expose().is_empty()),
            timeout_ms: config.timeout_ms,
            connect_timeout_ms: config.connect_timeout_ms,
            max_response_bytes: config.max_response_bytes,
            max_stream_bytes: config.max_stream_bytes,
        }
    }
}

/// An OpenAI-compatible Chat Completions client. Cheap to clone (reqwest pools inside).
#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    api_key: Option<Secret>,
    max_response_bytes: usize,
    max_stream_bytes: usize,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &redact_userinfo(self.endpoint.as_str()))
            .field("api_key", &self.api_key)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_stream_bytes", &self.max_stream_bytes)
            .finish()
    }
}

impl OpenAiClient {
    /// Builds the client; fails on an unparsable `base_url` or a TLS backend error.
    pub fn new(settings: &LlmSettings) -> anyhow::Result<Self> {
        let root = settings.base_url.trim().trim_end_matches('/');
        let endpoint = format!("{root}/chat/completions");
        // The parser's message never quotes the URL; ours shows it without its userinfo.
        let endpoint = reqwest::Url::parse(&endpoint).with_context(|| {
            format!(
                "llm.base_url is not a valid URL: {:?}",
                redact_userinfo(root)
            )
        })?;
        anyhow::ensure!(
            settings.max_response_bytes > 0 && settings.max_stream_bytes > 0,
            "llm.max_response_bytes and llm.max_stream_bytes must be > 0"
        );
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.timeout_ms))
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("building the LLM HTTP client")?;
        Ok(Self {
            http,
            endpoint,
            api_key: settings.api_key.clone(),
            max_response_bytes: settings.max_response_bytes,
            max_stream_bytes: settings.max_stream_bytes,
        })
    }

    /// The full `/chat/completions` URL this client posts to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// Builds the POST for one request, and the body's pieces for the record. Every wire
    /// decision lives here.
    fn build(&self, request: &LlmRequest<'_>) -> (reqwest::RequestBuilder, Vec<BodyPart>) {
        // The body is sent as its pieces: the template parts shared by every request in
        // flight are not copied per request (with a thousand calls in flight, copies of the
        // system prompt would be most of a worker's memory).
        let body = body::build(request);
        let parts = body.parts();
        let chunks = futures::stream::iter(body.chunks.into_iter().map(Ok::<_, Infallible>));
        let builder = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_LENGTH, body.len)
            .body(reqwest::Body::wrap_stream(chunks));
        let builder = match &self.api_key {
            // `bearer_auth` marks the header sensitive, so reqwest never prints it either.
            Some(key) => builder.bearer_auth(key.expose()),
            None => builder,
        };
        (builder, parts)
    }

    /// Replaces any echo of the API key in a provider-supplied message.
    fn scrub(&self, mut error: LlmError) -> LlmError {
        if let Some(key) = &self.api_key {
            let key = key.expose();
            if !key.is_empty() && error.message.contains(key) {
                error.message = error.message.replace(key, "[redacted]");
            }
        }
        error
    }

    /// Replaces any echo of the API key in the strings of a recorded response.
    fn scrub_json(&self, value: &mut Value) {
        let Some(key) = self.api_key.as_ref().map(Secret::expose) else {
            return;
        };
        if key.is_empty() {
            return;
        }
        match value {
            Value::String(text) if text.contains(key) => *text = text.replace(key, "[redacted]"),
            Value::Array(items) => items.iter_mut().for_each(|item| self.scrub_json(item)),
            Value::Object(map) => map.values_mut().for_each(|item| self.scrub_json(item)),
            _ => {}
        }
    }

    async fn attempt(
        &self,
        request: &LlmRequest<'_>,
        record: &mut Record,
    ) -> Result<LlmReply, LlmError> {
        let (builder, parts) = self.build(request);
        record.sent = parts;
        let response = builder.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let streamed = request.stream && is_event_stream(response.headers());
        if (300..400).contains(&status) {
            let location = response.headers().get(LOCATION);
            let location = location.map(|value| value.to_str().unwrap_or("(unreadable)"));
            return Err(redirect_error(status, location));
        }
        if !(200..300).contains(&status) {
            let body = read::error_body(response).await;
            record.keep(|| json!({"status": status, "body": body_json(&body)}));
            return Err(http_error(status, retry_after, &body));
        }
        if streamed {
            return self.read_stream(response, request, record).await;
        }
        let body = read::body(response, self.max_response_bytes).await?;
        let reply = if record.keep_response {
            let (reply, response) = decode_recorded(status, &body);
            record.response = Some(response);
            reply?
        } else {
            decode_completion(status, &body)?
        };
        // A provider that ignores `stream: true` still answers: hand over the content whole.
        if let (true, Some(on_delta)) = (request.stream, request.on_delta)
            && !reply.content.is_empty()
        {
            on_delta(&reply.content);
        }
        Ok(reply)
    }
}

/// What one attempt sent and got, for the record.
#[derive(Default)]
struct Record {
    keep_response: bool,
    sent: Vec<BodyPart>,
    response: Option<Value>,
}

impl Record {
    fn keep(&mut self, response: impl FnOnce() -> Value) {
        if self.keep_response {
            self.response = Some(response());
        }
    }
}

/// A body as JSON when it is JSON, else as (lossy) text.
fn body_json(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// Decodes a non-streamed completion body, and the response to record: the provider's
/// JSON, or `{"status", "body"}` when it is not a completion.
fn decode_recorded(status: u16, body: &[u8]) -> (Result<LlmReply, LlmError>, Value) {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            let error = decode_error(status, format!("undecodable response body: {e}"));
            return (
                Err(error),
                json!({"status": status, "body": body_json(body)}),
            );
        }
    };
    let reply = ChatResponse::deserialize(&value)
        .map_err(|e| decode_error(status, format!("undecodable response body: {e}")))
        .and_then(|parsed| {
            parsed
                .into_reply()
                .map_err(|detail| decode_error(status, detail))
        });
    match reply {
        Ok(reply) => (Ok(reply), value),
        Err(error) => (Err(error), json!({"status": status, "body": value})),
    }
}

/// Decodes a non-streamed completion body.
fn decode_completion(status: u16, body: &[u8]) -> Result<LlmReply, LlmError> {
    let parsed: ChatResponse = serde_json::from_slice(body)
        .map_err(|e| decode_error(status, format!("undecodable response body: {e}")))?;
    parsed
        .into_reply()
        .map_err(|detail| decode_error(status, detail))
}

impl OpenAiClient {
    /// Reads an SSE body to `[DONE]`, handing content deltas to `on_delta` as they arrive,
    /// within `max_stream_bytes` read and `max_response_bytes` assembled.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        request: &LlmRequest<'_>,
        record: &mut Record,
    ) -> Result<LlmReply, LlmError> {
        let mut events = read::bounded_stream(response, self.max_stream_bytes).eventsource();
        let mut state = StreamState::with_limit(self.max_response_bytes);
        while let Some(event) = events.next().await {
            let event = event.map_err(|error| match error {
                EventStreamError::Transport(failure) => failure.into_llm_error(),
                other => stream_error(format!("unreadable event stream: {other}")),
            })?;
            state.feed(&event.event, &event.data, request.on_delta)?;
            if state.is_done() {
                break;
            }
        }
        if !record.keep_response {
            return state.finish();
        }
        let (reply, completion) = state.finish_recorded()?;
        record.response = Some(completion);
        Ok(reply)
    }
}

/// Whether the response is `text/event-stream` (else it is a plain JSON completion).
fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("text/event-stream"))
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, Utc::now())
}

#[async_trait]
impl Llm for OpenAiClient {
    async fn chat(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        self.exchange(request, false).await.result
    }

    async fn exchange(&self, request: LlmRequest<'_>, keep_response: bool) -> Exchange {
        tracing::debug!(
            model = request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = request.stream,
            "llm request"
        );
        let mut record = Record {
            keep_response,
            ..Record::default()
        };
        let result = self
            .attempt(&request, &mut record)
            .await
            .map_err(|e| self.scrub(e));
        if let Err(error) = &result
            && keep_response
            && record.response.is_none()
        {
            record.response = Some(json!({"error": error.to_string()}));
        }
        if let Some(response) = &mut record.response {
            self.scrub_json(response);
        }
        match &result {
            Ok(reply) => tracing::debug!(
                tool_calls = reply.tool_calls.len(),
                prompt_tokens = reply.usage.prompt_tokens,
                completion_tokens = reply.usage.completion_tokens,
                "llm reply"
            ),
            Err(error) => tracing::debug!(%error, "llm call failed"),
        }
        Exchange {
            result,
            sent: record.sent,
            response: record.response,
        }
    }
}

#[cfg(test)]
mod tests;
