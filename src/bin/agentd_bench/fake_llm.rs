//! The bench's fake OpenAI-compatible LLM: axum on 127.0.0.1 (a free port), real loopback
//! HTTP, `POST /v1/chat/completions` only.
//!
//! The reply depends on the request alone, so any number of tasks can share the server and
//! a redelivered recursion gets the same answer: the recursion number is read from the
//! state snapshot's `current_recursion.iteration_index` at the end of the system message (falling
//! back to counting the assistant messages, one per earlier recursion, when the snapshot
//! does not show it). Counting assistant messages alone would break once the worker
//! compacts the context and folds old recursions into the snapshot. While fewer than
//! `steps` recursions ran, the reply is CALL_TOOL with one native `calculate` call
//! (`{"expression": "1+<n>"}`); after that it is ANSWER. Every call first sleeps the
//! configured latency.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::json;

/// The running fake. Cheap to clone.
#[derive(Clone)]
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    /// CALL_TOOL recursions before the ANSWER.
    steps: u32,
    /// Sleep before every reply.
    latency: Duration,
    /// Requests answered with 200.
    calls: AtomicU64,
    /// Requests answered with an error status.
    bad_requests: AtomicU64,
}

/// The part of a Chat Completions request the fake looks at.
#[derive(Deserialize)]
struct ChatRequest<'a> {
    #[serde(borrow)]
    messages: Vec<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

impl FakeLlm {
    /// Binds 127.0.0.1 on a free port and serves in a task of the current runtime.
    pub async fn start(steps: u32, latency: Duration) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fake LLM to 127.0.0.1")?;
        let addr = listener.local_addr().context("fake LLM address")?;
        let shared = Arc::new(Shared {
            steps,
            latency,
            calls: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(Arc::clone(&shared));
        tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                eprintln!("[bench] fake LLM stopped: {err}");
            }
        });
        Ok(Self { addr, shared })
    }

    /// The `/v1` root to configure as `llm.base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requests answered with a completion so far.
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// Requests the fake could not read (answered 400).
    pub fn bad_requests(&self) -> u64 {
        self.shared.bad_requests.load(Ordering::Relaxed)
    }
}

async fn chat(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let done = match serde_json::from_slice::<ChatRequest<'_>>(&body) {
        Ok(request) => recursions_done(&request.messages),
        Err(err) => {
            shared.bad_requests.fetch_add(1, Ordering::Relaxed);
            let error =
                json!({"error": {"message": format!("fake llm: unreadable request: {err}")}});
            return (StatusCode::BAD_REQUEST, error.to_string()).into_response();
        }
    };
    if !shared.latency.is_zero() {
        tokio::time::sleep(shared.latency).await;
    }
    shared.calls.fetch_add(1, Ordering::Relaxed);
    let body = completion(done, shared.steps);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Recursions finished before this request: `iteration_index - 1` from the snapshot, else
/// the number of assistant messages.
fn recursions_done(messages: &[Message<'_>]) -> u32 {
    let from_snapshot = messages
        .iter()
        .filter(|message| message.role == "system")
        .find_map(|message| iteration_index(message.content.as_deref()?));
    match from_snapshot {
        Some(index) => index.saturating_sub(1),
        None => {
            let assistants = messages.iter().filter(|m| m.role == "assistant").count();
            u32::try_from(assistants).unwrap_or(u32::MAX)
        }
    }
}

/// The number after the last `"iteration_index":` of the system message: the snapshot
/// comes at the end of the prompt, after the schema documentation that shows an example.
fn iteration_index(system: &str) -> Option<u32> {
    const KEY: &str = "\"iteration_index\":";
    let at = system.rfind(KEY)? + KEY.len();
    let digits: String = system[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The completion body for a request after `done` recursions.
fn completion(done: u32, steps: u32) -> String {
    let message = if done < steps {
        let arguments = json!({"expression": format!("1+{done}")}).to_string();
        let content = seed_reply("CALL_TOOL", json!({}), done);
        json!({"role": "assistant", "content": content, "tool_calls": [{
            "id": format!("call_{done}"), "type": "function",
            "function": {"name": "calculate", "arguments": arguments}}]})
    } else {
        let answer = json!({"answer": format!("done after {done} tool steps")});
        json!({"role": "assistant", "content": seed_reply("ANSWER", answer, done)})
    };
    let finish_reason = if done < steps { "tool_calls" } else { "stop" };
    json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
    })
    .to_string()
}

/// A seed-002 reply object as the message content.
fn seed_reply(action_type: &str, output: serde_json::Value, done: u32) -> String {
    json!({
        "observe": format!("{done} tool steps done so far"),
        "thought": format!("the benchmark asks for {action_type} now"),
        "action": {"action_type": action_type, "output": output},
        "abstract": format!("bench recursion {}", done + 1),
        "short_term_memory_append": ""
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_iteration_index_from_a_pretty_snapshot() {
        let system = "prompt\n```json\n{\n  \"current_recursion\": {\n    \"trace_id\": \"x\",\n    \"iteration_index\": 12,\n";
        assert_eq!(iteration_index(system), Some(12));
        assert_eq!(iteration_index("no snapshot"), None);
    }

    #[test]
    fn tool_steps_then_answer() {
        assert!(completion(0, 2).contains("calculate"));
        assert!(completion(1, 2).contains("1+1"));
        assert!(completion(2, 2).contains("ANSWER"));
    }
}
