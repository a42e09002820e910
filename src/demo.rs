//! The demo model of `agentd dev`: a scripted, deterministic OpenAI-compatible endpoint on
//! 127.0.0.1 so that someone with no LLM account can watch the whole loop work. It is not a
//! language model and says so in every answer.
//!
//! It serves `POST /v1/chat/completions` over real HTTP, so the worker's LLM client, retries
//! and accounting run exactly as against a provider. The reply depends on the request alone
//! (a redelivered recursion gets the same one): it reads the task's input (the user message)
//! and the state snapshot at the end of the system message. When the input holds an
//! arithmetic expression, the first recursion makes a two-step plan (RE_PLAN), the next calls
//! the built-in `calculate` tool (CALL_TOOL) and, once the snapshot shows its result, the
//! last one answers (ANSWER) and marks both steps done. Any other input is answered at once
//! with a note on what the demo can do.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The model name the demo agent uses (any name is answered the same way).
pub const MODEL: &str = "agentd-demo";

/// What every answer that is not a result starts with.
const NOTICE: &str = "[agentd demo model: scripted, not an LLM]";

/// The part of a Chat Completions request the demo reads.
#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<Message>,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<String>,
}

/// Binds `addr` (port 0 for a free one), serves until `shutdown` fires and returns the
/// `/v1` root to use as `llm.base_url`. `latency` is slept before each reply so that the
/// live page shows the steps one by one.
pub async fn start(
    addr: &str,
    latency: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the demo model to {addr}"))?;
    let local: SocketAddr = listener.local_addr().context("demo model address")?;
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(latency);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(err) = served {
            tracing::warn!(error = %err, "the demo model stopped");
        }
    });
    Ok(format!("http://{local}/v1"))
}

async fn chat(State(latency): State<Duration>, body: Bytes) -> Response {
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => {
            let error =
                json!({"error": {"message": format!("demo model: unreadable request: {err}")}});
            return (StatusCode::BAD_REQUEST, error.to_string()).into_response();
        }
    };
    tokio::time::sleep(latency).await;
    let reply = reply_to(&request.messages);
    let body = completion(&reply, body.len());
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// One scripted reply: the seed-002 object and, for CALL_TOOL, the native tool call.
#[derive(Debug, PartialEq)]
struct Reply {
    content: Value,
    tool_call: Option<Value>,
}

/// What to answer to this conversation.
fn reply_to(messages: &[Message]) -> Reply {
    let input = messages
        .iter()
        .find(|message| message.role == "user")
        .and_then(|message| message.content.as_deref())
        .unwrap_or_default();
    let snapshot = messages
        .iter()
        .filter(|message| message.role == "system")
        .find_map(|message| snapshot(message.content.as_deref()?));
    let iteration = snapshot
        .as_ref()
        .and_then(|s| s.pointer("/current_recursion/iteration_index"))
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let Some(expression) = expression(input) else {
        let answer = format!(
            "{NOTICE} I only do arithmetic with the calculate tool; try \
             \"What is 17 * 23 + 4?\". You asked: {input}"
        );
        return answer_reply(&answer, "the input holds no arithmetic", &[]);
    };
    if let Some(result) = snapshot.as_ref().and_then(calculate_result) {
        let answer = format!("{expression} = {result}");
        return answer_reply(&answer, "the calculate tool gave the result", &["1", "2"]);
    }
    if iteration <= 1 {
        let plan = json!({"plan": [
            {"step_id": "1", "description": format!("Compute {expression} with the calculate tool"), "status": "pending"},
            {"step_id": "2", "description": "Answer with the result", "status": "pending"}
        ]});
        return Reply {
            content: seed_reply("RE_PLAN", plan, "the input holds arithmetic", &[]),
            tool_call: None,
        };
    }
    if iteration > 6 {
        let answer = format!("{NOTICE} the calculate tool gave no result for {expression}");
        return answer_reply(&answer, "no result came back", &[]);
    }
    let arguments = json!({"expression": expression}).to_string();
    Reply {
        content: seed_reply(
            "CALL_TOOL",
            json!({}),
            "the plan's first step needs the calculate tool",
            &[("1", "running")],
        ),
        tool_call: Some(json!({
            "id": format!("call_demo_{iteration}"), "type": "function",
            "function": {"name": "calculate", "arguments": arguments}
        })),
    }
}

fn answer_reply(answer: &str, observe: &str, done_steps: &[&str]) -> Reply {
    let updates: Vec<(&str, &str)> = done_steps.iter().map(|id| (*id, "done")).collect();
    Reply {
        content: seed_reply("ANSWER", json!({"answer": answer}), observe, &updates),
        tool_call: None,
    }
}

/// A seed-002 reply object.
fn seed_reply(action_type: &str, output: Value, observe: &str, updates: &[(&str, &str)]) -> Value {
    let step_updates: Vec<Value> = updates
        .iter()
        .map(|(step_id, status)| json!({"step_id": step_id, "status": status}))
        .collect();
    json!({
        "observe": observe,
        "thought": format!("the demo script says {action_type} now"),
        "action": {"action_type": action_type, "output": output},
        "abstract": format!("demo: {action_type}"),
        "short_term_memory_append": "",
        "step_updates": step_updates
    })
}

/// The Chat Completions body; usage is estimated at a quarter token per byte.
fn completion(reply: &Reply, request_bytes: usize) -> Value {
    let content = reply.content.to_string();
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(call) = &reply.tool_call {
        message["tool_calls"] = json!([call]);
    }
    let prompt_tokens = request_bytes / 4;
    let completion_tokens = content.len() / 4;
    json!({
        "id": "chatcmpl-demo", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": if reply.tool_call.is_some() { "tool_calls" } else { "stop" }}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}
    })
}

/// The state snapshot: the last fenced JSON block of the system message that parses and has
/// a `current_recursion`.
fn snapshot(system: &str) -> Option<Value> {
    system.rmatch_indices("```json").find_map(|(at, fence)| {
        let body = &system[at + fence.len()..];
        let end = body.find("```")?;
        let value: Value = serde_json::from_str(body[..end].trim()).ok()?;
        value.get("current_recursion").is_some().then_some(value)
    })
}

/// The newest successful `calculate` result anywhere in the snapshot.
fn calculate_result(snapshot: &Value) -> Option<String> {
    let mut found = None;
    visit(snapshot, &mut |object| {
        let results = object.get("tool_call_results").and_then(Value::as_array);
        for result in results.into_iter().flatten() {
            let ok = result.get("success").and_then(Value::as_bool) == Some(true);
            let calculate = result.get("name").and_then(Value::as_str) == Some("calculate");
            if let (true, Some(value)) = (ok && calculate, result.get("result")) {
                found = Some(match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                });
            }
        }
    });
    found
}

/// Calls `f` on every object, depth first, in document order.
fn visit(value: &Value, f: &mut impl FnMut(&serde_json::Map<String, Value>)) {
    match value {
        Value::Object(map) => {
            f(map);
            map.values().for_each(|v| visit(v, f));
        }
        Value::Array(items) => items.iter().for_each(|v| visit(v, f)),
        _ => {}
    }
}

/// The longest run of digits, operators, parentheses, dots and spaces in `input` that holds
/// an operator between two digits, trimmed.
fn expression(input: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_digit() || "+-*/%^(). ".contains(c);
    input
        .split(|c: char| !allowed(c))
        .map(|run| run.trim().trim_end_matches('.').trim())
        .filter(|run| {
            let has_digit = run.chars().any(|c| c.is_ascii_digit());
            let inner = run.trim_start_matches(['-', '(']);
            has_digit && inner.chars().skip(1).any(|c| "+-*/%^".contains(c))
        })
        .max_by_key(|run| run.len())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(input: &str, snapshot: Value) -> Vec<Message> {
        let system = format!(
            "prompt with an example ```json\n{{\"x\": 1}}\n```\n## 6\n```json\n{snapshot:#}\n```\nYou must:"
        );
        vec![
            Message {
                role: "system".into(),
                content: Some(system),
            },
            Message {
                role: "user".into(),
                content: Some(input.into()),
            },
        ]
    }

    #[test]
    fn finds_the_expression_in_a_question() {
        assert_eq!(
            expression("What is 17 * 23 + 4?").as_deref(),
            Some("17 * 23 + 4")
        );
        assert_eq!(expression("compute (2+3)*4.").as_deref(), Some("(2+3)*4"));
        assert_eq!(expression("hello there"), None);
        assert_eq!(expression("in 2026 we"), None);
        assert_eq!(expression("-5 apples"), None);
    }

    #[test]
    fn plans_then_calls_calculate_then_answers() {
        let first = reply_to(&messages(
            "What is 17 * 23 + 4?",
            json!({"current_recursion": {"iteration_index": 1}}),
        ));
        assert_eq!(first.content["action"]["action_type"], "RE_PLAN");
        assert_eq!(
            first.content["action"]["output"]["plan"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );

        let second = reply_to(&messages(
            "What is 17 * 23 + 4?",
            json!({"current_recursion": {"iteration_index": 2}}),
        ));
        assert_eq!(second.content["action"]["action_type"], "CALL_TOOL");
        let call = second.tool_call.expect("a native tool call");
        assert_eq!(call["function"]["name"], "calculate");
        assert_eq!(
            call["function"]["arguments"],
            r#"{"expression":"17 * 23 + 4"}"#
        );

        let with_result = json!({
            "current_recursion": {"iteration_index": 3},
            "history": [{"tool_call_results": [
                {"tool_call_id": "c", "name": "calculate", "success": true, "result": 395}
            ]}]
        });
        let third = reply_to(&messages("What is 17 * 23 + 4?", with_result));
        assert_eq!(third.content["action"]["action_type"], "ANSWER");
        assert_eq!(
            third.content["action"]["output"]["answer"],
            "17 * 23 + 4 = 395"
        );
        assert_eq!(third.content["step_updates"][1]["status"], "done");
    }

    #[test]
    fn anything_else_is_answered_with_the_notice() {
        let reply = reply_to(&messages(
            "write me a poem",
            json!({"current_recursion": {"iteration_index": 1}}),
        ));
        assert_eq!(reply.content["action"]["action_type"], "ANSWER");
        let answer = reply.content["action"]["output"]["answer"]
            .as_str()
            .unwrap();
        assert!(answer.starts_with(NOTICE), "{answer}");
    }

    #[test]
    fn the_completion_carries_the_tool_call_and_usage() {
        let reply = reply_to(&messages(
            "1+1",
            json!({"current_recursion": {"iteration_index": 2}}),
        ));
        let body = completion(&reply, 400);
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "calculate"
        );
        assert_eq!(body["usage"]["prompt_tokens"], 100);
    }
}
