//! A scripted OpenAI-compatible LLM over real HTTP (axum on 127.0.0.1, a free port) for
//! integration tests: point `llm.base_url` at [`FakeLlm::base_url`], script replies per
//! task input with [`FakeLlm::script`], then assert on [`FakeLlm::requests`].
//!
//! Routing: a request is matched to the first script whose marker occurs in
//! `messages[0].content` (the user's input), so concurrent tasks with distinct inputs get
//! their own scripts. Replies are consumed in order; an exhausted script answers 500
//! `fake llm: script exhausted`, an input no marker matches answers 500
//! `fake llm: no script for this input`. Every request is recorded before it is answered.
//!
//! Reply bodies may contain [`TRACE_ID_PLACEHOLDER`]; it is replaced by the request's
//! `current_recursion.trace_id` from the state snapshot, when there is one, so scripted
//! seed-002 replies can echo the right trace id.
//!
//! Streaming: a request with `"stream": true` gets a scripted 200 completion as Server-Sent
//! Events (see `sse.rs`: content in pieces, tool calls in fragments, usage, `[DONE]`), so one
//! script serves both modes; [`FakeReply::with_stream_error`],
//! [`FakeReply::with_stream_cut`] and [`FakeReply::with_endless_stream`] script broken
//! streams. Error statuses stay plain JSON, as
//! real providers send them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

mod recorded;
mod seed;
mod sse;

pub use recorded::RecordedRequest;
// Each test binary uses its own subset of these.
#[allow(unused_imports)]
pub use seed::{answer_reply, call_tool_reply, plan_reply, reflect_reply, seed_object};
#[allow(unused_imports)]
pub use sse::{ARGUMENT_PIECE, CONTENT_PIECE, StreamEnd};

/// A 200 completion `body` sent as a provider streams it (SSE), for other fakes.
pub fn streamed(body: &Value) -> Option<Response> {
    sse::frames(body, &StreamEnd::Done).map(sse::response)
}

/// Replaced in reply bodies by the request's `current_recursion.trace_id`.
pub const TRACE_ID_PLACEHOLDER: &str = "{{trace_id}}";

/// The fake server. Cheap to clone; all clones share the scripts and the recordings.
#[derive(Clone)]
pub struct FakeLlm {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    scripts: Mutex<Vec<Script>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

struct Script {
    marker: String,
    replies: VecDeque<FakeReply>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeLlm {
    /// Binds 127.0.0.1 on a free port and serves `POST /v1/chat/completions` in a task of
    /// the current runtime; ready when this returns.
    pub async fn start() -> FakeLlm {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake llm: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fake llm: local address");
        let inner = Arc::new(Inner {
            addr,
            scripts: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(Arc::clone(&inner));
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("fake llm stopped: {error}");
            }
        });
        FakeLlm { inner }
    }

    /// The `/v1` root to use as `llm.base_url`: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.inner.addr)
    }

    /// Scripts the replies for requests whose `messages[0].content` contains `marker`,
    /// consumed in order. Scripting a marker again appends to its queue.
    pub fn script(&self, marker: &str, replies: Vec<FakeReply>) {
        let mut scripts = lock(&self.inner.scripts);
        match scripts.iter_mut().find(|s| s.marker == marker) {
            Some(script) => script.replies.extend(replies),
            None => scripts.push(Script {
                marker: marker.to_owned(),
                replies: replies.into(),
            }),
        }
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.inner.requests).clone()
    }

    /// The requests whose `messages[0].content` contains `marker`, in arrival order.
    pub fn requests_for(&self, marker: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.user_input().contains(marker))
            .collect()
    }

    /// How many scripted replies are still unconsumed for `marker`.
    pub fn remaining(&self, marker: &str) -> usize {
        lock(&self.inner.scripts)
            .iter()
            .find(|s| s.marker == marker)
            .map_or(0, |s| s.replies.len())
    }

    /// The next reply for `input`, or the 500 that explains why there is none.
    fn next_reply(&self, input: &str) -> FakeReply {
        let mut scripts = lock(&self.inner.scripts);
        match scripts.iter_mut().find(|s| input.contains(&s.marker)) {
            Some(script) => script
                .replies
                .pop_front()
                .unwrap_or_else(|| FakeReply::status(500, "fake llm: script exhausted")),
            None => FakeReply::status(500, "fake llm: no script for this input"),
        }
    }
}

async fn chat(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<Value>(&body).ok();
    let recorded = RecordedRequest {
        body: parsed
            .clone()
            .unwrap_or_else(|| Value::String(String::from_utf8_lossy(&body).into_owned())),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        bytes: body.to_vec(),
    };
    lock(&inner.requests).push(recorded.clone());
    let reply = match parsed {
        Some(_) => FakeLlm { inner }.next_reply(&recorded.user_input()),
        None => FakeReply::status(400, "fake llm: request body is not JSON"),
    };
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    reply.into_response_for(&recorded)
}

/// One scripted answer: an HTTP status, a JSON body, extra headers, a delay, and how its
/// stream ends when it is streamed.
#[derive(Debug, Clone)]
pub struct FakeReply {
    status: u16,
    body: Value,
    headers: Vec<(String, String)>,
    delay: Option<Duration>,
    stream_end: StreamEnd,
}

impl FakeReply {
    /// 200 with `message.content = text` and no tool calls.
    pub fn content(text: impl Into<String>) -> FakeReply {
        Self::completion(Value::String(text.into()), None)
    }

    /// 200 with `message.content = value.to_string()`.
    pub fn json(value: Value) -> FakeReply {
        Self::content(value.to_string())
    }

    /// 200 with `content = content_json.to_string()` (null when `content_json` is null)
    /// and native `tool_calls` with ids `call_1`, `call_2`, ... and string arguments.
    pub fn tool_calls(content_json: Value, calls: Vec<(&str, Value)>) -> FakeReply {
        let content = match content_json {
            Value::Null => Value::Null,
            other => Value::String(other.to_string()),
        };
        let calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| {
                json!({"id": format!("call_{}", i + 1), "type": "function",
                       "function": {"name": name, "arguments": arguments.to_string()}})
            })
            .collect();
        Self::completion(content, Some(calls))
    }

    /// An error status with an OpenAI error body `{"error": {"message": ..}}`.
    pub fn status(code: u16, message: &str) -> FakeReply {
        Self::raw_body(
            code,
            json!({"error": {"message": message, "type": "fake_error", "code": code}}),
        )
    }

    /// Any status with exactly this JSON body.
    pub fn raw_body(status: u16, body: Value) -> FakeReply {
        FakeReply {
            status,
            body,
            headers: Vec::new(),
            delay: None,
            stream_end: StreamEnd::Done,
        }
    }

    /// Adds `Retry-After: secs`.
    pub fn with_retry_after(self, secs: u64) -> FakeReply {
        self.with_header("retry-after", &secs.to_string())
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> FakeReply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Waits this long before answering.
    pub fn with_delay(mut self, delay: Duration) -> FakeReply {
        self.delay = Some(delay);
        self
    }

    /// When streamed: after the content chunks, a provider error object with `message`,
    /// and no `[DONE]`. Not streamed, the reply is unchanged.
    pub fn with_stream_error(mut self, message: &str) -> FakeReply {
        self.stream_end = StreamEnd::Error(message.to_owned());
        self
    }

    /// When streamed: the stream stops after the finish chunk, without usage or `[DONE]`.
    pub fn with_stream_cut(mut self) -> FakeReply {
        self.stream_end = StreamEnd::Cut;
        self
    }

    /// Answers plain JSON even to a stream request (a provider ignoring `"stream": true`).
    pub fn ignoring_stream(mut self) -> FakeReply {
        self.stream_end = StreamEnd::Ignored;
        self
    }

    /// When streamed: the content is sent again and again and the stream never ends.
    pub fn with_endless_stream(mut self) -> FakeReply {
        self.stream_end = StreamEnd::Endless;
        self
    }

    fn completion(content: Value, tool_calls: Option<Vec<Value>>) -> FakeReply {
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
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                "model": "fake-llm",
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            }),
        )
    }

    fn into_response_for(self, request: &RecordedRequest) -> Response {
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

fn fill_trace_id(body: Value, request: &RecordedRequest) -> Value {
    let text = body.to_string();
    if !text.contains(TRACE_ID_PLACEHOLDER) {
        return body;
    }
    let state = request.system_state();
    let trace_id = state
        .as_ref()
        .and_then(|s| s.pointer("/current_recursion/trace_id"))
        .and_then(Value::as_str);
    match trace_id {
        Some(id) => serde_json::from_str(&text.replace(TRACE_ID_PLACEHOLDER, id)).unwrap_or(body),
        None => body,
    }
}
