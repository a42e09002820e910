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

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The JSON body (the raw text as a JSON string when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, e.g. `Bearer sk-...`.
    pub authorization: Option<String>,
}

impl RecordedRequest {
    /// `(role, content)` of every message, in order.
    pub fn messages(&self) -> Vec<(String, String)> {
        let Some(messages) = self.body.get("messages").and_then(Value::as_array) else {
            return Vec::new();
        };
        messages
            .iter()
            .map(|m| {
                let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
                let content = match m.get("content") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                (role.to_owned(), content)
            })
            .collect()
    }

    /// `messages[0].content`: the user's input.
    pub fn user_input(&self) -> String {
        self.messages()
            .into_iter()
            .next()
            .map(|(_, content)| content)
            .unwrap_or_default()
    }

    /// The names of the offered tools (`tools[].function.name`).
    pub fn tool_names(&self) -> Vec<String> {
        let Some(tools) = self.body.get("tools").and_then(Value::as_array) else {
            return Vec::new();
        };
        tools
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    }

    /// The JSON state snapshot embedded in the system message (`messages[1]`, or the first
    /// system message): the last ```` ```json ```` fenced block that parses, else the last
    /// top-level `{...}` that parses.
    pub fn system_state(&self) -> Option<Value> {
        let messages = self.messages();
        let system = messages
            .iter()
            .find(|(role, _)| role == "system")
            .or_else(|| messages.get(1))?;
        last_fenced_json(&system.1).or_else(|| last_json_object(&system.1))
    }
}

fn last_fenced_json(text: &str) -> Option<Value> {
    text.rmatch_indices("```json").find_map(|(at, fence)| {
        let body = &text[at + fence.len()..];
        let end = body.find("```")?;
        serde_json::from_str::<Value>(body[..end].trim()).ok()
    })
}

fn last_json_object(text: &str) -> Option<Value> {
    let mut last = None;
    let mut at = 0;
    while let Some(offset) = text[at..].find('{') {
        let start = at + offset;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value @ Value::Object(_))) => {
                last = Some(value);
                at = start + stream.byte_offset();
            }
            _ => at = start + 1,
        }
    }
    last
}

/// One scripted answer: an HTTP status, a JSON body, extra headers and a delay.
#[derive(Debug, Clone)]
pub struct FakeReply {
    status: u16,
    body: Value,
    headers: Vec<(String, String)>,
    delay: Option<Duration>,
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
        let mut response = (status, axum::Json(body)).into_response();
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

/// A seed-002 reply object: trace_id (placeholder), observe, thought,
/// `action {action_type, output}`, abstract and an empty `short_term_memory_append`.
pub fn seed_object(action_type: &str, output: Value) -> Value {
    json!({
        "trace_id": TRACE_ID_PLACEHOLDER,
        "observe": format!("fake observe before {action_type}"),
        "thought": format!("fake thought choosing {action_type}"),
        "action": {"action_type": action_type, "output": output},
        "abstract": format!("fake {action_type}"),
        "short_term_memory_append": ""
    })
}

/// RE_PLAN with the given `(step_id, description)` steps, all `pending`.
pub fn plan_reply(steps: &[(&str, &str)]) -> FakeReply {
    let plan: Vec<Value> = steps
        .iter()
        .map(|(id, description)| {
            json!({"step_id": id, "description": description, "status": "pending"})
        })
        .collect();
    FakeReply::json(seed_object("RE_PLAN", json!({"plan": plan, "notes": ""})))
}

/// CALL_TOOL: the seed object as content plus native tool calls `(name, arguments)`.
pub fn call_tool_reply(calls: Vec<(&str, Value)>) -> FakeReply {
    FakeReply::tool_calls(seed_object("CALL_TOOL", json!({})), calls)
}

/// REFLECT with `summary`.
pub fn reflect_reply(summary: &str) -> FakeReply {
    FakeReply::json(seed_object("REFLECT", json!({"summary": summary})))
}

/// ANSWER with `answer`.
pub fn answer_reply(answer: &str) -> FakeReply {
    FakeReply::json(seed_object("ANSWER", json!({"answer": answer})))
}
