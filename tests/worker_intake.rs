//! What comes in: poison messages are dead-lettered with a reason and the worker keeps
//! serving; a task_id published twice runs once; cancel works in the queue, inside an LLM
//! call and inside a retry wait.

#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use lapin::BasicProperties;
use serde_json::json;
use support::fake_llm::{FakeReply, answer_reply};
use support::harness::TestEnv;
use uuid::Uuid;

#[tokio::test]
async fn poison_messages_are_dead_lettered_and_the_worker_keeps_serving() {
    let mut env = TestEnv::start_with(|s| s.worker.max_message_bytes = 2048).await;
    let agent = env.agent(None, None).await;
    let unknown_agent = Uuid::now_v7();
    let rejected_id = Uuid::now_v7();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not valid JSON"),
        (
            json!({"agent_id": agent}).to_string().into_bytes(),
            "input is required",
        ),
        (
            json!({"agent_id": agent, "input": ""})
                .to_string()
                .into_bytes(),
            "input must not be empty",
        ),
        (
            json!({"task_id": rejected_id, "agent_id": unknown_agent, "input": "hi"})
                .to_string()
                .into_bytes(),
            "unknown agent_id",
        ),
        (
            json!({"agent_id": agent, "input": "x".repeat(4096)})
                .to_string()
                .into_bytes(),
            "larger than worker.max_message_bytes",
        ),
    ];
    for (body, reason) in &cases {
        env.publish_raw(body).await;
        let (dead_body, dead_reason) = env.dead_letter().await.expect("dead-lettered");
        assert_eq!(&dead_body, body, "original body kept");
        let dead_reason = dead_reason.expect("x-agentd-reason header");
        assert!(
            dead_reason.contains(reason),
            "{dead_reason} should mention {reason}"
        );
    }
    // A wrong content type.
    let body = json!({"agent_id": agent, "input": "hi"}).to_string();
    let properties = BasicProperties::default().with_content_type("text/plain".into());
    env.publisher
        .publish(
            "",
            &env.settings.amqp.tasks_queue,
            body.as_bytes(),
            properties,
        )
        .await
        .unwrap();
    let (_, reason) = env.dead_letter().await.expect("dead-lettered");
    assert!(reason.unwrap().contains("content_type"));

    // The rejected task with a readable id is recorded, with a task.failed event.
    let task = env.wait_terminal(rejected_id).await;
    assert_eq!(task.status, "rejected");
    assert!(task.error.unwrap().contains("unknown agent_id"));
    assert_eq!(task.agent_id, Some(unknown_agent));
    let events = env.stored_events(rejected_id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "task.failed");
    assert_eq!(events[0]["data"]["reason"], "rejected");

    // Still serving.
    env.fake.script("after-poison", vec![answer_reply("alive")]);
    let task_id = env.submit(agent, "after-poison").await;
    env.published_events(task_id).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    env.stop().await;
}

#[tokio::test]
async fn a_task_id_published_twice_runs_once() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "duplicate-publish";
    env.fake.script(marker, vec![answer_reply("once")]);
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": marker}).to_string();
    env.publish_raw(body.as_bytes()).await;
    env.published_events(task_id).await;
    env.wait_terminal(task_id).await;
    env.publish_raw(body.as_bytes()).await;
    // A marker task published after the duplicate: once it is done, the duplicate was handled
    // (prefetch order), so counting now is meaningful.
    env.fake
        .script("after-duplicate", vec![answer_reply("next")]);
    let next = env.submit(agent, "after-duplicate").await;
    env.published_events(next).await;
    let events = env.stored_events(task_id).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "task.started")
            .count(),
        1
    );
    assert_eq!(env.fake.requests_for(marker).len(), 1, "the LLM ran once");
    env.stop().await;
}

async fn cancel_when_running(env: &mut TestEnv, marker: &str, replies: Vec<FakeReply>) {
    let agent = env.agent(None, None).await;
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    // Wait until the LLM has been called (the recursion is in flight).
    let deadline = Instant::now() + Duration::from_secs(10);
    while env.fake.requests_for(marker).is_empty() {
        assert!(Instant::now() < deadline, "LLM never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.assert_cancels_within_a_second(task_id).await;
}

#[tokio::test]
async fn cancel_inside_an_llm_call() {
    let mut env = TestEnv::start().await;
    let slow = answer_reply("too late").with_delay(Duration::from_secs(20));
    cancel_when_running(&mut env, "cancel-in-llm", vec![slow]).await;
    env.stop().await;
}

#[tokio::test]
async fn cancel_inside_a_retry_wait() {
    let mut env = TestEnv::start().await;
    let limited = FakeReply::status(429, "wait").with_retry_after(30);
    cancel_when_running(
        &mut env,
        "cancel-in-retry",
        vec![limited, answer_reply("late")],
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn cancel_while_waiting_in_the_queue() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "cancel-queued";
    env.fake.script(marker, vec![answer_reply("never")]);
    let task_id = Uuid::now_v7();
    agentd::cli::cancel::run(&env.settings, task_id)
        .await
        .unwrap();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": marker}).to_string();
    env.publish_raw(body.as_bytes()).await;
    env.fake
        .script("after-cancelled", vec![answer_reply("next")]);
    let next = env.submit(agent, "after-cancelled").await;
    env.published_events(next).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "cancelled");
    assert!(env.fake.requests_for(marker).is_empty(), "never ran");
    let events = env.stored_events(task_id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "task.cancelled");
    env.stop().await;
}
