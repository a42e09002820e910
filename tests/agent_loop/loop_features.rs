//! The loop as seeds 003 and 004 describe it, end to end: parallel tool calls, tool and
//! recursion timeouts, context compaction within the budget, token streaming, conversations.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;
use crate::support::tools::TestTools;
use agentd::core::limits::estimate_request_tokens;
use agentd::core::types::{ChatMessage, Role};
use agentd::scripted_model::{answer_reply, call_tool_reply, plan_reply};
use serde_json::{Value, json};
use uuid::Uuid;

async fn env_with(adjust: impl FnOnce(&mut agentd::config::Settings)) -> TestEnv {
    TestEnv::start_with_tools(adjust, Arc::new(TestTools)).await
}

#[tokio::test]
async fn two_slow_tools_in_one_reply_run_in_parallel() {
    let mut env = env_with(|_| {}).await;
    let agent = env.agent(None, None).await;
    let marker = "parallel-tools";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![
                ("sleep_ms", json!({"ms": 800})),
                ("sleep_ms", json!({"ms": 800})),
            ]),
            answer_reply("both done"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.completed")
        .collect();
    assert_eq!(completed.len(), 2);
    for event in &completed {
        assert!(event["data"]["duration_ms"].as_u64().unwrap() >= 800);
    }
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT tool_call_id, duration_ms FROM tool_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["call_1", "call_2"],
        "call order"
    );
    let (started, finished): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as(
            "SELECT started_at, finished_at FROM recursions WHERE task_id = $1 AND iteration = 1",
        )
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let took = (finished - started).num_milliseconds();
    assert!(
        took < 1500,
        "two 800 ms tools took {took} ms: they ran one after the other"
    );
    env.stop().await;
}

/// A task whose tool and model would hang ends through its timeouts within this (far less
/// than the minute the tool would sleep or the 30 s the late reply waits).
const TIMED_OUT_TASK_ENDS_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_hung_tool_and_a_hung_llm_are_cut_by_their_timeouts() {
    let mut env = env_with(|s| {
        s.worker.tool_timeout_ms = 300;
        s.worker.recursion_timeout_ms = 1500;
        s.llm.timeout_ms = 10_000;
    })
    .await;
    // The tool would sleep a minute and the second reply comes after 30 s: only the
    // timeouts (0.3 s and 1.5 s) let the task end within TIMED_OUT_TASK_ENDS_WITHIN.
    let agent = env.agent(None, None).await;
    let marker = "timeouts";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("sleep_ms", json!({"ms": 60_000}))]),
            answer_reply("too late").with_delay(Duration::from_secs(30)),
            answer_reply("recovered"),
        ],
    );
    let started = Instant::now();
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.answer.as_deref(), Some("recovered"));
    assert!(
        started.elapsed() < TIMED_OUT_TASK_ENDS_WITHIN,
        "nothing hung: {:?}",
        started.elapsed()
    );
    let recursions: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "recursion.completed")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(recursions[0]["status"], "error");
    assert!(
        recursions[0]["error_log"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{recursions:#?}"
    );
    assert_eq!(recursions[1]["status"], "error");
    assert!(
        recursions[1]["error_log"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{recursions:#?}"
    );
    let tool_error: String = sqlx::query_scalar("SELECT error FROM tool_calls WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert!(
        tool_error.contains("timed out after 300 ms"),
        "{tool_error}"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_long_task_with_big_outputs_stays_within_budget() {
    const BUDGET: u32 = 6000;
    let mut env = env_with(|s| {
        s.limits.context_budget_tokens = BUDGET;
        s.limits.max_tool_result_chars = 3000;
    })
    .await;
    let agent = env.agent(Some(30), None).await;
    // 28 identical calls with identical results on purpose: this is about the context
    // budget, not about stalls (CONTRACT v3 §14), so stall detection is off for it.
    sqlx::query("UPDATE agents SET stall = '{\"repeat\": 0}' WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .unwrap();
    let marker = "budget-30";
    let mut replies = vec![plan_reply(&[("1", "collect"), ("2", "answer")])];
    for _ in 0..28 {
        replies.push(call_tool_reply(vec![(
            "big_output",
            json!({"chars": 20_000}),
        )]));
    }
    replies.push(answer_reply("summarized"));
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.iterations, 30);
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 30);
    for (index, request) in requests.iter().enumerate() {
        let messages: Vec<ChatMessage> = request
            .messages()
            .into_iter()
            .map(|(role, content)| {
                let role = match role.as_str() {
                    "user" => Role::User,
                    "system" => Role::System,
                    _ => Role::Assistant,
                };
                ChatMessage::new(role, content)
            })
            .collect();
        let tokens = estimate_request_tokens(&messages);
        assert!(
            tokens <= BUDGET,
            "request {} is {tokens} tokens, over {BUDGET}",
            index + 1
        );
    }
    let compactions: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "context.compacted")
        .collect();
    assert!(!compactions.is_empty(), "the context was compacted");
    let first = &compactions[0]["data"];
    assert!(first["before_tokens"].as_u64().unwrap() > u64::from(BUDGET));
    assert!(first["after_tokens"].as_u64().unwrap() <= u64::from(BUDGET));
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE task_id = $1 AND type = 'context.compacted'",
    )
    .bind(task_id)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        stored as usize,
        compactions.len(),
        "each compaction is recorded"
    );
    let stored: String = sqlx::query_scalar(
        "SELECT result::text FROM tool_calls WHERE task_id = $1 ORDER BY id LIMIT 1",
    )
    .bind(task_id)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(
        stored.len() < 4000,
        "stored results are capped: {} bytes",
        stored.len()
    );
    assert!(stored.contains("truncated"), "with a visible marker");
    let last_state = requests[29].system_state().unwrap();
    assert!(
        last_state["context"]["compacted_history"].is_array(),
        "older recursions folded"
    );
    env.stop().await;
}

/// A recursion row: iteration, action_type, status, observe, thought, abstract.
type TraceRow = (i32, Option<String>, String, String, String, String);

fn trace_of(rows: &[TraceRow]) -> Vec<String> {
    rows.iter()
        .map(|r| format!("{}|{:?}|{}|{}|{}|{}", r.0, r.1, r.2, r.3, r.4, r.5))
        .collect()
}

async fn run_script(
    env: &mut TestEnv,
    agent: Uuid,
    marker: &str,
    stream: bool,
) -> (Uuid, Vec<Value>) {
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "add"), ("2", "answer")]),
            call_tool_reply(vec![("calculate", json!({"expression": "20+22"}))]),
            answer_reply("The sum is 42, as computed by the calculator tool."),
        ],
    );
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": marker, "stream": stream});
    env.publish_raw(body.to_string().as_bytes()).await;
    let events = env.published_events(task_id).await;
    (task_id, events)
}

async fn trace_rows(env: &TestEnv, task_id: Uuid) -> Vec<TraceRow> {
    sqlx::query_as(
        "SELECT iteration, action_type, status, observe, thought, abstract FROM recursions \
         WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_streamed_run_equals_the_non_streamed_one() {
    let mut env = env_with(|_| {}).await;
    let agent = env.agent(None, None).await;
    let (plain, plain_events) = run_script(&mut env, agent, "stream-off", false).await;
    let (streamed, events) = run_script(&mut env, agent, "stream-on", true).await;
    assert!(plain_events.iter().all(|e| e["type"] != "llm.delta"));
    assert_eq!(
        trace_of(&trace_rows(&env, plain).await),
        trace_of(&trace_rows(&env, streamed).await)
    );
    let plain_task = env.wait_terminal(plain).await;
    let streamed_task = env.wait_terminal(streamed).await;
    assert_eq!(plain_task.answer, streamed_task.answer);
    // The deltas of each recursion concatenate to the content the model streamed.
    let requests = env.fake.requests_for("stream-on");
    assert!(requests.iter().all(|r| r.streamed()));
    let deltas: Vec<&Value> = events.iter().filter(|e| e["type"] == "llm.delta").collect();
    assert!(deltas.len() >= 3, "streamed in several events");
    assert!(
        deltas.len() < 60,
        "batched, not one event per chunk: {}",
        deltas.len()
    );
    for iteration in 1..=3u64 {
        let text: String = deltas
            .iter()
            .filter(|e| e["iteration"] == iteration)
            .map(|e| e["data"]["content"].as_str().unwrap())
            .collect();
        let parsed: Value = serde_json::from_str(&text).expect("the deltas form the JSON reply");
        assert!(parsed["action"]["action_type"].is_string(), "{text}");
    }
    env.stop().await;
}

#[tokio::test]
async fn a_second_turn_sees_the_first_in_its_state() {
    let mut env = env_with(|_| {}).await;
    let agent = env.agent(None, None).await;
    let conversation = Uuid::now_v7();
    env.fake.script(
        "turn-one",
        vec![answer_reply("Paris is the capital of France.")],
    );
    env.fake
        .script("turn-two", vec![answer_reply("About 2.1 million people.")]);
    let first = Uuid::now_v7();
    let body = json!({"task_id": first, "agent_id": agent, "input": "turn-one: capital of France?",
                      "conversation_id": conversation});
    env.publish_raw(body.to_string().as_bytes()).await;
    env.published_events(first).await;
    let second = Uuid::now_v7();
    let body = json!({"task_id": second, "agent_id": agent, "input": "turn-two: and its population?",
                      "conversation_id": conversation});
    env.publish_raw(body.to_string().as_bytes()).await;
    env.published_events(second).await;
    let request = &env.fake.requests_for("turn-two")[0];
    assert_eq!(
        request.messages()[0].1,
        "turn-two: and its population?",
        "messages[0] is the new turn"
    );
    let state = request.system_state().unwrap();
    let turns = state["context"]["conversation"]
        .as_array()
        .expect("earlier turns in the state");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0]["input"], "turn-one: capital of France?");
    assert_eq!(turns[0]["answer"], "Paris is the capital of France.");
    env.stop().await;
}

#[tokio::test]
async fn the_delta_batching_is_not_one_message_per_token() {
    // Guard against a regression to per-chunk events: a long streamed answer arrives in 7-char
    // chunks from the fake, but events are batched by time and size.
    let mut env = env_with(|_| {}).await;
    let agent = env.agent(None, None).await;
    let long = "x".repeat(5000);
    env.fake.script("long-stream", vec![answer_reply(&long)]);
    let task_id = Uuid::now_v7();
    let body =
        json!({"task_id": task_id, "agent_id": agent, "input": "long-stream", "stream": true});
    env.publish_raw(body.to_string().as_bytes()).await;
    let events = env.published_events(task_id).await;
    let deltas = events.iter().filter(|e| e["type"] == "llm.delta").count();
    assert!(
        (1..=20).contains(&deltas),
        "{deltas} delta events for ~5000 chars in 7-char chunks"
    );
    env.stop().await;
}
