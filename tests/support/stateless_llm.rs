//! A fake OpenAI-compatible LLM whose reply depends only on the request, for tests where a
//! recursion may be asked twice (a worker killed mid-call, a resumed task). The user input
//! carries the script as `key=value` words: `steps=N` CALL_TOOL recursions (calculate) then
//! ANSWER; `tool=NAME` makes those recursions call NAME with `{}` (or with `args=JSON`,
//! written without spaces) instead of calculate, and `tool2=NAME args2=JSON` adds a second
//! call to the same reply;
//! `delay_ms=M` before each reply; `status=S` answers every call with HTTP S; `flaky=1`
//! answers the first request of every recursion with 503 (the retry gets the reply). A
//! request with `"stream": true` gets its reply as Server-Sent Events.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

#[derive(Default)]
struct Seen {
    /// Requests per user input.
    calls: HashMap<String, usize>,
    /// Requests per user input and recursion (`current_recursion.iteration_index` of the
    /// state snapshot), in arrival order.
    iterations: HashMap<String, Vec<u32>>,
    /// Requests per user input and count of assistant messages (for `flaky`).
    attempts: HashMap<(String, u64), u32>,
    /// Authorization headers received.
    authorizations: Vec<Option<String>>,
}

/// The running fake.
#[derive(Clone)]
pub struct StatelessLlm {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    /// While true, replies wait (after their delay) until it is false again.
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

/// What the handler shares with the fake.
#[derive(Clone)]
struct Shared {
    seen: Arc<Mutex<Seen>>,
    held: tokio::sync::watch::Receiver<bool>,
}

impl StatelessLlm {
    /// Serves on 127.0.0.1 (an ephemeral port) until the test process ends.
    pub async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (held, on_held) = tokio::sync::watch::channel(false);
        let shared = Shared {
            seen: Arc::clone(&seen),
            held: on_held,
        };
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(reply))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            seen,
            held: Arc::new(held),
        }
    }

    /// From now on no reply is sent (requests are still received and counted) until
    /// [`StatelessLlm::release`]: a deterministic "tasks are still running" for a test that
    /// breaks something meanwhile.
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Sends the held replies and stops holding.
    pub fn release(&self) {
        self.held.send_replace(false);
    }

    /// The `/v1` root to configure as llm.base_url.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// How many requests carried this user input.
    pub fn calls_for(&self, input: &str) -> usize {
        self.seen
            .lock()
            .map(|seen| seen.calls.get(input).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// The recursion numbers the requests carrying this input were made for, in arrival
    /// order (a recursion asked twice appears twice).
    pub fn iterations_for(&self, input: &str) -> Vec<u32> {
        self.seen
            .lock()
            .map(|seen| seen.iterations.get(input).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Every Authorization header received.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.seen
            .lock()
            .map(|seen| seen.authorizations.clone())
            .unwrap_or_default()
    }
}

/// `current_recursion.iteration_index` of the state snapshot in the system message.
fn iteration_index(messages: &[Value]) -> Option<u32> {
    let system = messages.get(1)?["content"].as_str()?;
    // The snapshot is compact JSON (`"iteration_index":3`); the template's own example of
    // it has a space after the colon and is skipped.
    let key = "\"iteration_index\":";
    system.match_indices(key).find_map(|(at, _)| {
        let digits: String = system[at + key.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

fn word(input: &str, key: &str) -> Option<u64> {
    input
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The value of the word `key=VALUE` in the input, as text.
fn text_word<'a>(input: &'a str, key: &str) -> Option<&'a str> {
    input
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

async fn reply(
    State(Shared { seen, mut held }): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let input = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let done = messages.iter().filter(|m| m["role"] == "assistant").count() as u64;
    let mut attempt = 1;
    if let Ok(mut seen) = seen.lock() {
        let count = seen.attempts.entry((input.clone(), done)).or_default();
        *count += 1;
        attempt = *count;
        *seen.calls.entry(input.clone()).or_default() += 1;
        if let Some(iteration) = iteration_index(&messages) {
            seen.iterations
                .entry(input.clone())
                .or_default()
                .push(iteration);
        }
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        seen.authorizations.push(auth);
    }
    if let Some(delay) = word(&input, "delay_ms") {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let _ = held.wait_for(|held| !*held).await;
    if word(&input, "flaky") == Some(1) && attempt == 1 {
        let error = json!({"error": {"message": "scripted flaky 503"}});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(error)).into_response();
    }
    if let Some(status) = word(&input, "status") {
        let code = StatusCode::from_u16(status as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (
            code,
            Json(json!({"error": {"message": format!("scripted {status}")}})),
        )
            .into_response();
    }
    let steps = word(&input, "steps").unwrap_or(0);
    let (action, output, tool_calls) = if done < steps {
        let (tool, arguments) = match text_word(&input, "tool") {
            Some(tool) => {
                let arguments = text_word(&input, "args")
                    .and_then(|text| serde_json::from_str(text).ok())
                    .unwrap_or_else(|| json!({}));
                (tool.to_owned(), arguments)
            }
            None => (
                "calculate".to_owned(),
                json!({"expression": format!("{done}+1")}),
            ),
        };
        let mut calls = vec![json!({"id": format!("call_{done}"), "type": "function",
            "function": {"name": tool, "arguments": arguments.to_string()}})];
        if let Some(second) = text_word(&input, "tool2") {
            let arguments = text_word(&input, "args2").unwrap_or("{}");
            calls.push(json!({"id": format!("call_{done}b"), "type": "function",
                "function": {"name": second, "arguments": arguments}}));
        }
        ("CALL_TOOL", json!({}), Some(Value::Array(calls)))
    } else {
        (
            "ANSWER",
            json!({"answer": format!("done after {steps} steps")}),
            None,
        )
    };
    let content = json!({"observe": "o", "thought": "t", "abstract": format!("step {done}"),
        "action": {"action_type": action, "output": output}});
    let mut message = json!({"role": "assistant", "content": content.to_string()});
    if let Some(calls) = tool_calls {
        message["tool_calls"] = calls;
    }
    let completion = json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}});
    if body["stream"] == json!(true)
        && let Some(streamed) = super::fake_llm::streamed(&completion)
    {
        return streamed;
    }
    Json(completion).into_response()
}
