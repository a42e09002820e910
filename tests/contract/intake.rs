//! What comes in: poison messages are dead-lettered with a reason (bounded, however large
//! the bad value) and the worker keeps serving; NUL in the input is stored as U+FFFD; a
//! task_id published twice runs once, and a message naming another agent's task is refused.
//! Cancel, wherever the task is, is tested in the features tier (`cancel.rs`).

use std::time::Duration;

use crate::support::harness::TestEnv;
use agentd::scripted_model::answer_reply;
use lapin::BasicProperties;
use serde_json::json;
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

/// Longest `x-agentd-reason` a rejection may carry: a few hundred characters of the bad
/// value and the rest of the sentence (the broker closes the connection of a client whose
/// header does not fit in one frame, 128 KiB by default).
const MAX_REASON_HEADER: usize = 1024;

#[tokio::test]
async fn a_huge_bad_task_id_is_dead_lettered_with_a_bounded_reason_and_nothing_else_suffers() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    // An unrelated task is in flight (in its LLM call) when the poison arrives.
    let marker = "in-flight-beside-poison";
    let slow = answer_reply("unharmed").with_delay(Duration::from_millis(1500));
    env.fake.script(marker, vec![slow]);
    let in_flight = env.submit(agent, marker).await;
    env.wait_asked(marker, 1).await;
    let bad_id = "x".repeat(200_000);
    let body = json!({"task_id": bad_id, "agent_id": agent, "input": "hi"}).to_string();
    env.publish_raw(body.as_bytes()).await;
    let (dead_body, reason) = env.dead_letter().await.expect("dead-lettered");
    // Compared without printing: the body is 200 KB.
    let (got, sent) = (dead_body.len(), body.len());
    assert!(
        dead_body == body.as_bytes(),
        "the poison's own body ({got} of {sent} bytes)"
    );
    let reason = reason.expect("x-agentd-reason header");
    assert!(reason.len() < MAX_REASON_HEADER, "{} bytes", reason.len());
    assert!(reason.contains("task_id is not a valid UUID"), "{reason}");
    assert!(reason.ends_with("(200000 bytes)"), "{reason}");
    // The worker's connection stayed up: the task in flight ends once, never taken again.
    assert_eq!(env.wait_terminal(in_flight).await.status, "completed");
    let kinds: Vec<String> = (env.stored_events(in_flight).await.iter())
        .map(|e| e["type"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "task.started").count(), 1);
    assert!(!kinds.iter().any(|k| k == "task.resumed"), "{kinds:?}");
    assert_eq!(env.fake.requests_for(marker).len(), 1, "asked once");
    assert_eq!(env.dead_letter_now().await, None, "dead-lettered once");
    env.stop().await;
}

#[tokio::test]
async fn nul_in_the_input_and_constraints_is_stored_as_the_replacement_character() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "nul-input";
    env.fake.script(marker, vec![answer_reply("read it")]);
    let task_id = Uuid::now_v7();
    let body = json!({
        "task_id": task_id, "agent_id": agent,
        "input": format!("{marker} a\u{0}b"), "constraints": ["be\u{0} brief"],
    });
    env.publish_raw(body.to_string().as_bytes()).await;
    let events = env.published_events(task_id).await;
    assert_eq!(events.last().unwrap()["type"], "task.completed");
    let task = env.wait_terminal(task_id).await;
    let stored = format!("{marker} a\u{FFFD}b");
    assert_eq!(task.input.as_deref(), Some(stored.as_str()));
    let constraints: serde_json::Value =
        sqlx::query_scalar("SELECT constraints FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("constraints");
    assert_eq!(constraints, json!(["be\u{FFFD} brief"]));
    // The model saw what is stored.
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests[0].messages()[0].1, stored);
    env.stop().await;
}

/// Publishes `body` to the tasks queue with a `reply_to` and `correlation_id`.
async fn publish_with_reply(env: &TestEnv, body: &serde_json::Value, to: &str, id: &str) {
    let queue = &env.settings.amqp.tasks_queue;
    (env.publisher)
        .publish_task_with_reply(queue, body.to_string().as_bytes(), to, id)
        .await
        .expect("publish task");
}

/// The stored task's status and agent.
async fn status_and_agent(env: &TestEnv, task_id: Uuid) -> (String, Option<Uuid>) {
    sqlx::query_as("SELECT status, agent_id FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("task row")
}

#[tokio::test]
async fn a_message_naming_another_agent_or_reply_route_for_a_task_id_is_refused() {
    let env = TestEnv::start().await;
    let (owner, intruder) = (env.agent(None, None).await, env.agent(None, None).await);
    let marker = "owned-task";
    env.fake.script(marker, vec![answer_reply("the owner's")]);
    // A producer recorded the task (as the gateway does) before its message is read.
    let task_id = Uuid::now_v7();
    let route = agentd::store::replies::ReplyRoute {
        reply_to: "owner-replies".into(),
        correlation_id: Some("c-owner".into()),
    };
    let row = agentd::store::tasks::NewTask {
        task_id,
        agent_id: Some(owner),
        conversation_id: None,
        input: Some(marker),
        constraints: &[],
        stream: false,
        reply: Some(&route),
        received_at: None,
        tenant_id: None,
        priority: Default::default(),
        rerun: None,
    };
    assert!(
        agentd::store::tasks::insert_pending(&env.pool, &row)
            .await
            .unwrap()
    );
    let message = |agent: Uuid| json!({"task_id": task_id, "agent_id": agent, "input": marker});
    for (agent, reply_to, needle) in [
        (intruder, "owner-replies", "names a task of agent"),
        (Uuid::now_v7(), "owner-replies", "names a task of agent"),
        (owner, "intruder-replies", "\"owner-replies\""),
    ] {
        publish_with_reply(&env, &message(agent), reply_to, "c-owner").await;
        let (_, reason) = env.dead_letter().await.expect("refused");
        let reason = reason.expect("x-agentd-reason header");
        assert!(reason.contains(needle), "{reason}");
        // The stored task is left as it is: not run, not rejected.
        assert_eq!(
            status_and_agent(&env, task_id).await,
            ("pending".to_owned(), Some(owner))
        );
    }
    assert!(env.fake.requests_for(marker).is_empty(), "never ran");
    // The task's own message runs it, and its redelivery is a duplicate, not a refusal.
    publish_with_reply(&env, &message(owner), "owner-replies", "c-owner").await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    publish_with_reply(&env, &message(owner), "owner-replies", "c-owner").await;
    env.fake.script("after-owner", vec![answer_reply("next")]);
    let next = env.submit(owner, "after-owner").await;
    env.wait_terminal(next).await;
    assert_eq!(env.dead_letter_now().await, None);
    assert_eq!(env.fake.requests_for(marker).len(), 1, "ran once");
    env.stop().await;
}
