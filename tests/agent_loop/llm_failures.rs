//! LLM failures end to end: retryable statuses are retried with backoff (llm.retry events,
//! one llm_calls row per attempt), fatal ones end the task `failed` with the provider's
//! message, and the budget of recursions is enforced.

use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;
use agentd::scripted_model::{ModelReply, answer_reply, reflect_reply};
use serde_json::json;

async fn llm_statuses(env: &TestEnv, task_id: uuid::Uuid) -> Vec<(i32, String)> {
    sqlx::query_as("SELECT attempt, status FROM llm_calls WHERE task_id = $1 ORDER BY id")
        .bind(task_id)
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

/// The provider's Retry-After: the task cannot end sooner.
const RETRY_AFTER: Duration = Duration::from_secs(1);

#[tokio::test]
async fn status_429_and_500_are_retried_then_the_task_completes() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "retry-429-500";
    env.fake.script(
        marker,
        vec![
            ModelReply::status(429, "slow down").with_retry_after(RETRY_AFTER.as_secs()),
            ModelReply::status(500, "boom"),
            answer_reply("made it"),
        ],
    );
    let started = Instant::now();
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert!(started.elapsed() >= RETRY_AFTER, "Retry-After was honoured");
    let retries: Vec<_> = events.iter().filter(|e| e["type"] == "llm.retry").collect();
    assert_eq!(retries.len(), 2, "{events:#?}");
    assert_eq!(retries[0]["data"]["attempt"], 1);
    assert_eq!(retries[0]["data"]["delay_ms"], 1000);
    assert!(
        retries[0]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("slow down")
    );
    assert_eq!(retries[1]["data"]["attempt"], 2);
    assert_eq!(
        retries[1]["data"]["delay_ms"], 40,
        "second retry: initial 20 ms doubled"
    );
    assert_eq!(
        llm_statuses(&env, task_id).await,
        vec![
            (1, "http_429".to_owned()),
            (2, "http_500".to_owned()),
            (3, "200".to_owned())
        ]
    );
    assert_eq!(task.iterations, 1, "retries stay inside one recursion");
    env.stop().await;
}

#[tokio::test]
async fn status_400_is_fatal_with_the_provider_message() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "fatal-400";
    env.fake.script(
        marker,
        vec![ModelReply::status(400, "model fake-model does not exist")],
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(task.fail_reason.as_deref(), Some("llm_error"));
    let error = task.error.expect("error");
    assert!(error.contains("model fake-model does not exist"), "{error}");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "task.failed");
    assert_eq!(last["data"]["reason"], "llm_error");
    assert!(events.iter().all(|e| e["type"] != "llm.retry"));
    assert_eq!(
        llm_statuses(&env, task_id).await,
        vec![(1, "http_400".to_owned())]
    );
    let (status, error_log): (String, Option<String>) =
        sqlx::query_as("SELECT status, error_log FROM recursions WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(status, "error");
    assert!(error_log.unwrap().contains("does not exist"));
    env.stop().await;
}

#[tokio::test]
async fn retries_exhausted_fail_the_task() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "exhausted-503";
    env.fake.script(
        marker,
        (0..4)
            .map(|_| ModelReply::status(503, "overloaded"))
            .collect(),
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(task.fail_reason.as_deref(), Some("llm_error"));
    assert!(task.error.unwrap().contains("4 attempt"));
    assert_eq!(
        events.iter().filter(|e| e["type"] == "llm.retry").count(),
        3
    );
    assert_eq!(llm_statuses(&env, task_id).await.len(), 4);
    env.stop().await;
}

#[tokio::test]
async fn max_iteration_ends_the_task_after_exactly_that_many_recursions() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(Some(3), None).await;
    let marker = "max-iteration";
    env.fake.script(
        marker,
        vec![
            reflect_reply("thinking 1"),
            reflect_reply("thinking 2"),
            reflect_reply("best so far: 42"),
            answer_reply("never reached"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(task.fail_reason.as_deref(), Some("max_iteration"));
    assert_eq!(task.iterations, 3);
    let recursions: i64 = sqlx::query_scalar("SELECT count(*) FROM recursions WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(recursions, 3);
    assert_eq!(env.fake.requests_for(marker).len(), 3);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "task.failed");
    assert_eq!(last["data"]["reason"], "max_iteration");
    assert_eq!(last["data"]["partial"], json!("best so far: 42"));
    // The last request told the model it was on its last recursion.
    let state = env.fake.requests_for(marker)[2].system_state().unwrap();
    assert_eq!(state["global"]["max_iteration"], 3);
    assert_eq!(state["global"]["remaining_iterations"], 0);
    env.stop().await;
}

/// Publishes a task asking for streamed tokens; returns its id.
async fn submit_streamed(env: &TestEnv, agent: uuid::Uuid, input: &str) -> uuid::Uuid {
    let task_id = uuid::Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": input, "stream": true});
    env.publish_raw(body.to_string().as_bytes()).await;
    task_id
}

/// The `llm.delta` events of `events`: (content, truncated).
fn deltas(events: &[serde_json::Value]) -> Vec<(String, Option<bool>)> {
    events
        .iter()
        .filter(|e| e["type"] == "llm.delta")
        .map(|e| {
            let content = e["data"]["content"].as_str().unwrap_or_default().to_owned();
            (content, e["data"]["truncated"].as_bool())
        })
        .collect()
}

#[tokio::test]
async fn an_endless_token_stream_fails_the_task_with_bounded_deltas() {
    let mut env = TestEnv::start_with(|s| {
        s.llm.max_stream_bytes = 256 * 1024;
        s.llm.max_delta_bytes = 4096;
        s.llm.max_delta_events = 5;
    })
    .await;
    let agent = env.agent(None, None).await;
    let marker = "endless-stream";
    env.fake.script(
        marker,
        vec![ModelReply::content("tok ").with_endless_stream()],
    );
    let task_id = submit_streamed(&env, agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(task.fail_reason.as_deref(), Some("llm_error"));
    let error = task.error.unwrap_or_default();
    assert!(error.contains("llm.max_stream_bytes"), "{error}");
    assert_eq!(
        llm_statuses(&env, task_id).await,
        vec![(1, "too_large".to_owned())],
        "fatal: asked once, not retried"
    );
    let kept = deltas(&events);
    assert!(
        (1..=5).contains(&kept.len()),
        "{} llm.delta events",
        kept.len()
    );
    let bytes: usize = kept.iter().map(|(content, _)| content.len()).sum();
    assert!(bytes <= 4096, "{bytes} bytes of deltas kept");
    assert_eq!(
        kept.last().and_then(|(_, cut)| *cut),
        Some(true),
        "{kept:?}"
    );
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE task_id = $1 AND type = 'llm.delta'")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(stored as usize, kept.len());
    env.stop().await;
}

#[tokio::test]
async fn a_long_stream_keeps_its_deltas_within_the_bound_and_the_whole_answer() {
    let mut env = TestEnv::start_with(|s| {
        s.llm.max_delta_bytes = 2048;
        s.llm.max_delta_events = 3;
    })
    .await;
    let agent = env.agent(None, None).await;
    let marker = "long-bounded-stream";
    let long = "z".repeat(20_000);
    env.fake.script(marker, vec![answer_reply(&long)]);
    let task_id = submit_streamed(&env, agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(
        task.answer.as_deref(),
        Some(long.as_str()),
        "the reply is whole"
    );
    let kept = deltas(&events);
    assert!(
        (1..=3).contains(&kept.len()),
        "{} llm.delta events",
        kept.len()
    );
    let bytes: usize = kept.iter().map(|(content, _)| content.len()).sum();
    assert!(bytes <= 2048, "{bytes} bytes of deltas kept");
    assert_eq!(kept.last().and_then(|(_, cut)| *cut), Some(true));
    env.stop().await;
}

#[tokio::test]
async fn an_oversized_body_fails_the_task_at_once() {
    let mut env = TestEnv::start_with(|s| s.llm.max_response_bytes = 64 * 1024).await;
    let agent = env.agent(None, None).await;
    let marker = "oversized-body";
    env.fake
        .script(marker, vec![answer_reply(&"w".repeat(300 * 1024))]);
    let task_id = env.submit(agent, marker).await;
    env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    let error = task.error.unwrap_or_default();
    assert!(
        error.contains("llm.max_response_bytes (65536 bytes)"),
        "{error}"
    );
    assert_eq!(
        llm_statuses(&env, task_id).await,
        vec![(1, "too_large".to_owned())]
    );
    env.stop().await;
}
