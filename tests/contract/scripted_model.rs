//! Tests of the scripted model itself (`agentd::scripted_model`), over real HTTP with
//! reqwest: scripted order, routing by marker, handlers computed from the request, error
//! statuses with Retry-After, delays, holding replies, recording, unreadable bodies, the
//! state snapshot extraction, exhausted and missing scripts, concurrent requests, the SSE
//! answers to stream requests, and the tests' word script.

use std::time::{Duration, Instant};

use agentd::scripted_model::{
    ModelReply, ScriptedModel, answer_reply, call_tool_reply, plan_reply, reflect_reply,
};
use serde_json::{Value, json};

/// Posts a chat request with `input` as messages[0] and `system` as messages[1].
async fn post(
    llm: &ScriptedModel,
    input: &str,
    system: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": input}, {"role": "system", "content": system}]});
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .expect("request reaches the model");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let json = response.json().await.expect("the model answers JSON");
    (status, headers, json)
}

fn content(body: &Value) -> &str {
    body.pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[tokio::test]
async fn replies_in_scripted_order_then_exhausted() {
    let llm = ScriptedModel::start().await.unwrap();
    assert!(llm.base_url().starts_with("http://127.0.0.1:"));
    llm.script(
        "alpha",
        vec![ModelReply::content("one"), ModelReply::content("two")],
    );
    assert_eq!(llm.remaining("alpha"), 2);
    let (_, _, first) = post(&llm, "task alpha", "").await;
    let (_, _, second) = post(&llm, "task alpha", "").await;
    assert_eq!((content(&first), content(&second)), ("one", "two"));
    assert_eq!(first["usage"]["prompt_tokens"], 11);
    let (status, _, body) = post(&llm, "task alpha", "").await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["message"], "scripted model: script exhausted");
    assert_eq!(llm.remaining("alpha"), 0);
}

#[tokio::test]
async fn markers_route_requests_to_their_own_scripts() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(
        "red",
        vec![ModelReply::content("r1"), ModelReply::content("r2")],
    );
    llm.script("blue", vec![ModelReply::json(json!({"b": 1}))]);
    llm.script("red", vec![ModelReply::content("r3")]);
    assert_eq!(content(&post(&llm, "the red task", "").await.2), "r1");
    assert_eq!(
        content(&post(&llm, "the blue task", "").await.2),
        r#"{"b":1}"#
    );
    assert_eq!(content(&post(&llm, "red again", "").await.2), "r2");
    assert_eq!(content(&post(&llm, "red again", "").await.2), "r3");
    let (status, _, body) = post(&llm, "green", "").await;
    assert_eq!(status, 500);
    assert_eq!(
        body["error"]["message"],
        "scripted model: no script for this input"
    );
    assert_eq!(llm.requests().len(), 5);
    assert_eq!(llm.requests_for("red").len(), 3);
}

#[tokio::test]
async fn error_status_with_retry_after() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(
        "x",
        vec![ModelReply::status(429, "slow down").with_retry_after(7)],
    );
    let (status, headers, body) = post(&llm, "x", "").await;
    assert_eq!(status, 429);
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("7")
    );
    assert_eq!(body["error"]["message"], "slow down");
}

/// A scripted delay: the reply must not come sooner.
const SCRIPTED_DELAY: Duration = Duration::from_millis(150);

#[tokio::test]
async fn raw_bodies_and_delays() {
    let llm = ScriptedModel::start().await.unwrap();
    let raw = json!({"choices": [{"message": {"content": null}}], "extra": true});
    llm.script(
        "x",
        vec![ModelReply::raw_body(200, raw.clone()).with_delay(SCRIPTED_DELAY)],
    );
    let started = Instant::now();
    let (status, _, body) = post(&llm, "x", "").await;
    assert!(started.elapsed() >= SCRIPTED_DELAY);
    assert_eq!((status, body), (200, raw));
}

#[tokio::test]
async fn records_bodies_headers_messages_and_tools() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script("rec", vec![ModelReply::content("ok")]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "rec"}],
        "tools": [{"type": "function", "function": {"name": "calculate", "parameters": {}}}]});
    reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .json(&body)
        .send()
        .await
        .expect("request reaches the model");
    post(&llm, "other", "sys").await;
    let requests = llm.requests();
    assert_eq!(requests[0].body, body);
    assert_eq!(requests[0].authorization, None);
    assert_eq!(requests[0].tool_names(), ["calculate"]);
    assert_eq!(requests[1].authorization.as_deref(), Some("Bearer sk-test"));
    let expected = vec![
        ("user".to_owned(), "other".to_owned()),
        ("system".to_owned(), "sys".to_owned()),
    ];
    assert_eq!(requests[1].messages(), expected);
    assert_eq!(requests[1].user_input(), "other");
}

#[tokio::test]
async fn extracts_the_state_snapshot_from_the_system_message() {
    let llm = ScriptedModel::start().await.unwrap();
    let fenced = "## 4\n```json\n{\"schema\": 1}\n```\n## 6\n```json\n{\"global\": {\"iteration\": 2}}\n```\nRead it.";
    let bare =
        "State follows {not json} then {\"global\": {\"iteration\": 3}, \"x\": {\"y\": 1}} end";
    post(&llm, "a", fenced).await;
    post(&llm, "b", bare).await;
    post(&llm, "c", "no state here").await;
    let requests = llm.requests();
    assert_eq!(
        requests[0].system_state(),
        Some(json!({"global": {"iteration": 2}}))
    );
    assert_eq!(
        requests[1].system_state(),
        Some(json!({"global": {"iteration": 3}, "x": {"y": 1}}))
    );
    assert_eq!(requests[2].system_state(), None);
}

#[tokio::test]
async fn seed_replies_carry_the_trace_id_and_tool_calls() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script(
        "seed",
        vec![
            plan_reply(&[("1", "compute"), ("2", "answer")]),
            call_tool_reply(vec![
                ("calculate", json!({"expression": "1+1"})),
                ("current_time", json!({})),
            ]),
            reflect_reply("so far so good"),
            answer_reply("42"),
        ],
    );
    let system = "```json\n{\"current_recursion\": {\"trace_id\": \"t-123\"}}\n```";
    let plan: Value =
        serde_json::from_str(content(&post(&llm, "seed", system).await.2)).expect("json");
    assert_eq!(plan["trace_id"], "t-123");
    assert_eq!(plan["action"]["action_type"], "RE_PLAN");
    assert_eq!(
        plan["action"]["output"]["plan"][1],
        json!({"step_id": "2", "description": "answer", "status": "pending"})
    );
    let (_, _, call) = post(&llm, "seed", "").await;
    let calls = &call["choices"][0]["message"]["tool_calls"];
    assert_eq!(calls[0]["id"], "call_1");
    assert_eq!(calls[1]["id"], "call_2");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"expression":"1+1"}"#);
    assert_eq!(call["choices"][0]["finish_reason"], "tool_calls");
    let seed: Value = serde_json::from_str(content(&call)).expect("json");
    assert_eq!(seed["action"]["action_type"], "CALL_TOOL");
    assert_eq!(
        seed["trace_id"], "{{trace_id}}",
        "no snapshot: placeholder kept"
    );
    let reflect: Value =
        serde_json::from_str(content(&post(&llm, "seed", "").await.2)).expect("json");
    assert_eq!(reflect["action"]["output"]["summary"], "so far so good");
    let answer: Value =
        serde_json::from_str(content(&post(&llm, "seed", "").await.2)).expect("json");
    assert_eq!(
        answer["action"],
        json!({"action_type": "ANSWER", "output": {"answer": "42"}})
    );
    assert_eq!(answer["short_term_memory_append"], "");
}

/// Eight replies delayed 300 ms each: one after the other they would take 2.4 s, so all
/// eight within 2 s means they were answered side by side.
const CONCURRENT_DELAY: Duration = Duration::from_millis(300);
const CONCURRENT_WITHIN: Duration = Duration::from_millis(2000);

#[tokio::test]
async fn serves_concurrent_requests() {
    let llm = ScriptedModel::start().await.unwrap();
    for i in 0..8 {
        let reply = ModelReply::content(format!("reply {i}")).with_delay(CONCURRENT_DELAY);
        llm.script(&format!("task-{i}:"), vec![reply]);
    }
    let started = Instant::now();
    let calls = (0..8).map(|i| {
        let llm = llm.clone();
        async move { content(&post(&llm, &format!("task-{i}:"), "").await.2).to_owned() }
    });
    let replies = futures::future::join_all(calls).await;
    assert!(
        started.elapsed() < CONCURRENT_WITHIN,
        "{:?}",
        started.elapsed()
    );
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &format!("reply {i}"));
    }
    assert_eq!(llm.requests().len(), 8);
}

/// Posts `input` with `"stream": true`; returns status, content type and the raw body.
async fn post_streamed(llm: &ScriptedModel, input: &str) -> (u16, String, String) {
    let body = json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": input}]});
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .json(&body)
        .send()
        .await
        .expect("request reaches the model");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (
        status,
        content_type,
        response.text().await.unwrap_or_default(),
    )
}

/// The JSON payloads of an SSE body's `data:` lines, `[DONE]` as a string.
fn payloads(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap_or_else(|_| json!(data)))
        .collect()
}

#[tokio::test]
async fn stream_requests_get_the_same_script_as_sse() {
    let llm = ScriptedModel::start().await.unwrap();
    let calls = vec![("calculate", json!({"expression": "1+1"}))];
    llm.script(
        "sse",
        vec![
            ModelReply::content("hello world"),
            call_tool_reply(calls),
            ModelReply::status(503, "busy"),
            ModelReply::content("partial").with_stream_error("boom"),
            ModelReply::content("cut").with_stream_cut(),
        ],
    );
    let (status, content_type, body) = post_streamed(&llm, "sse").await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    let events = payloads(&body);
    let pieces: Vec<&str> = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(pieces, ["", "hello w", "orld"]);
    assert_eq!(events[events.len() - 2]["usage"]["prompt_tokens"], 11);
    assert_eq!(events.last(), Some(&json!("[DONE]")));

    let (_, _, body) = post_streamed(&llm, "sse").await;
    let events = payloads(&body);
    let fragments: Vec<&Value> = events
        .iter()
        .filter_map(|e| e.pointer("/choices/0/delta/tool_calls/0"))
        .collect();
    assert_eq!(fragments[0]["id"], "call_1");
    assert_eq!(fragments[0]["function"]["name"], "calculate");
    let arguments: String = fragments
        .iter()
        .filter_map(|f| f.pointer("/function/arguments").and_then(Value::as_str))
        .collect();
    assert_eq!(arguments, r#"{"expression":"1+1"}"#);
    assert!(fragments.len() > 3);

    let (status, content_type, body) = post_streamed(&llm, "sse").await;
    assert_eq!(status, 503);
    assert!(content_type.starts_with("application/json"));
    assert!(body.contains("busy"));
    let (_, _, body) = post_streamed(&llm, "sse").await;
    let events = payloads(&body);
    assert_eq!(
        events.last().map(|e| &e["error"]["message"]),
        Some(&json!("boom"))
    );
    let (_, _, body) = post_streamed(&llm, "sse").await;
    assert!(!body.contains("[DONE]") && !body.contains("usage"));
    assert!(llm.requests().iter().all(|r| r.streamed()));
}

#[tokio::test]
async fn handlers_answer_from_the_request_after_the_queues() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script("queued", vec![ModelReply::content("from the queue")]);
    llm.handle("echo", |request| {
        ModelReply::content(format!("you said {}", request.user_input()))
    });
    llm.otherwise(|request| {
        let iteration = request.snapshot().and_then(|s| s.iteration_index());
        ModelReply::content(format!("iteration {iteration:?}"))
    });
    assert_eq!(
        content(&post(&llm, "queued echo", "").await.2),
        "from the queue",
        "the first route added wins"
    );
    assert_eq!(
        content(&post(&llm, "please echo", "").await.2),
        "you said please echo"
    );
    let system = "```json\n{\"current_recursion\": {\"iteration_index\": 3}}\n```";
    assert_eq!(
        content(&post(&llm, "anything", system).await.2),
        "iteration Some(3)"
    );
    let (status, _, body) = post(&llm, "queued again", "").await;
    assert_eq!(status, 500, "an exhausted queue is not skipped: {body}");
    assert_eq!(llm.answered(), 3);
}

#[tokio::test]
async fn unreadable_bodies_are_refused_recorded_and_counted() {
    let llm = ScriptedModel::start().await.unwrap();
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .body("{not json")
        .send()
        .await
        .expect("request reaches the model");
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!((llm.unreadable(), llm.answered()), (1, 0));
    let requests = llm.requests();
    assert_eq!(requests[0].body, json!("{not json"));
    assert_eq!(requests[0].bytes, b"{not json");
}

/// How long a reply that is not held takes at most on loopback: a held one is still
/// unanswered after it.
const UNHELD_REPLY_WITHIN: Duration = Duration::from_millis(300);

#[tokio::test]
async fn held_replies_leave_only_when_released() {
    let llm = ScriptedModel::start().await.unwrap();
    llm.script("held", vec![ModelReply::content("at last")]);
    llm.hold();
    let asking = tokio::spawn({
        let llm = llm.clone();
        async move { content(&post(&llm, "held", "").await.2).to_owned() }
    });
    let mut asking = std::pin::pin!(asking);
    let early = tokio::time::timeout(UNHELD_REPLY_WITHIN, &mut asking).await;
    assert!(early.is_err(), "a held reply was sent");
    assert_eq!(llm.requests_for("held").len(), 1, "the request is recorded");
    llm.release();
    assert_eq!(asking.await.expect("the request ends"), "at last");
}

#[tokio::test]
async fn the_word_script_answers_from_the_input_alone() {
    use crate::support::words::{self, ByInput};

    let llm = words::start().await;
    let message = |body: &Value| body["choices"][0]["message"].clone();
    let first = message(&post(&llm, "w steps=1", "").await.2);
    assert_eq!(first["tool_calls"][0]["id"], "call_0");
    assert_eq!(first["tool_calls"][0]["function"]["name"], "calculate");
    // A second request for the same recursion gets the same reply.
    assert_eq!(message(&post(&llm, "w steps=1", "").await.2), first);
    let named = r#"n steps=1 tool=t__charge args={"amount":5} tool2=t__upsert args2={"x":1}"#;
    let calls = message(&post(&llm, named, "").await.2)["tool_calls"].clone();
    assert_eq!(calls[0]["function"]["arguments"], r#"{"amount":5}"#);
    assert_eq!(calls[1]["id"], "call_0b");
    assert_eq!(calls[1]["function"]["name"], "t__upsert");
    let answer = message(&post(&llm, "a steps=0", "").await.2);
    assert!(answer["content"].as_str().unwrap().contains("ANSWER"));
    assert_eq!(post(&llm, "s status=429", "").await.0, 429);
    assert_eq!(post(&llm, "f flaky=1", "").await.0, 503);
    assert_eq!(
        post(&llm, "f flaky=1", "").await.0,
        200,
        "the retry is answered"
    );
    assert_eq!(llm.calls_for("w steps=1"), 2);
    assert_eq!(llm.authorizations().len(), 7);
}
