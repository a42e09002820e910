//! Completion delivery to producers (CONTRACT §9): a task message with `reply_to` gets its
//! terminal event on that queue with the `correlation_id` (the task_id when absent), once,
//! after it is committed: for a completed task, a rejected message, a task cancelled before
//! its message was read, and a reply owed by a worker that died before sending it. And
//! `agentd submit --wait` waits on its own reply queue.

use std::process::Command;
use std::time::Duration;

use crate::support::harness::TestEnv;
use crate::support::wait::{self, NEXT_STEP_WITHIN, TASK_ENDS_WITHIN};
use agentd::amqp::control::send_control;
use agentd::contract::ControlMessage;
use agentd::contract::control::Cancel;
use agentd::scripted_model::answer_reply;
use futures::StreamExt;
use lapin::Consumer;
use serde_json::{Value, json};
use uuid::Uuid;

/// One reply: its correlation_id, its AMQP `type` and `message_id`, and its body.
struct Reply {
    correlation_id: Option<String>,
    kind: Option<String>,
    message_id: Option<String>,
    event: Value,
}

async fn next_reply(replies: &mut Consumer, within: Duration) -> Option<Reply> {
    let delivery = tokio::time::timeout(within, replies.next()).await.ok()??;
    let delivery = delivery.expect("reply delivery");
    let props = &delivery.properties;
    let text = |value: &Option<lapin::types::ShortString>| value.as_ref().map(|v| v.to_string());
    Some(Reply {
        correlation_id: text(props.correlation_id()),
        kind: text(props.kind()),
        message_id: text(props.message_id()),
        event: serde_json::from_slice(&delivery.data).expect("reply JSON"),
    })
}

async fn reply_queue(env: &TestEnv) -> (String, Consumer) {
    agentd::amqp::subscriber::reply_queue(env.publisher.broker())
        .await
        .expect("reply queue")
}

async fn publish_with_reply(env: &TestEnv, body: &Value, reply_to: &str, correlation: &str) {
    env.publisher
        .publish_task_with_reply(
            &env.settings.amqp.tasks_queue,
            body.to_string().as_bytes(),
            reply_to,
            correlation,
        )
        .await
        .expect("publish task");
}

/// The task's stored terminal event (the JSON published on the fanout).
async fn stored_terminal(env: &TestEnv, task_id: Uuid) -> Value {
    env.stored_events(task_id)
        .await
        .pop()
        .expect("a stored terminal event")
}

/// A sweep of owed replies runs every 5 s: once this has passed, one has run.
const OWED_REPLY_SWEEP_RAN: Duration = Duration::from_secs(6);

/// How long a test listens for a reply that must not come while no worker runs.
const NO_REPLY_FOR: Duration = Duration::from_millis(300);

/// Waits until the row records the reply sent (the mark commits just after the broker
/// confirmed the reply, so a fast consumer can see the reply first); true once it does.
async fn replied_at_set(env: &TestEnv, task_id: Uuid) -> bool {
    wait::until_true("replied_at recorded", NEXT_STEP_WITHIN, || async {
        let sql = "SELECT replied_at IS NOT NULL FROM tasks WHERE task_id = $1";
        sqlx::query_scalar::<_, bool>(sql)
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("replied_at")
    })
    .await;
    true
}

#[tokio::test]
async fn a_completed_task_replies_once_with_its_correlation_id() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    env.fake
        .script("reply-done", vec![answer_reply("forty-two")]);
    let (queue, mut replies) = reply_queue(&env).await;
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": "reply-done"});
    publish_with_reply(&env, &body, &queue, "order-7").await;

    let reply = next_reply(&mut replies, TASK_ENDS_WITHIN)
        .await
        .expect("a reply");
    assert_eq!(reply.correlation_id.as_deref(), Some("order-7"));
    assert_eq!(reply.kind.as_deref(), Some("task.completed"));
    assert_eq!(reply.event["data"]["answer"], "forty-two");
    // The same event as on the fanout and in `events`, with its event_id as message_id.
    let stored = stored_terminal(&env, task_id).await;
    assert_eq!(reply.event, stored);
    assert_eq!(
        reply.message_id,
        stored["event_id"].as_str().map(str::to_owned)
    );
    assert!(replied_at_set(&env, task_id).await);
    // Once: nothing more arrives, also after a sweep of owed replies ran (every 5 s).
    let again = next_reply(&mut replies, OWED_REPLY_SWEEP_RAN).await;
    assert!(
        again.is_none(),
        "a second reply: {:?}",
        again.map(|r| r.event)
    );
    env.stop().await;
}

#[tokio::test]
async fn a_rejected_message_replies_with_the_task_id_as_correlation_id() {
    let env = TestEnv::start().await;
    let (queue, mut replies) = reply_queue(&env).await;
    let task_id = Uuid::now_v7();
    let unknown_agent = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": unknown_agent, "input": "who runs me?"});
    // No correlation_id: the reply carries the task_id.
    env.publisher
        .publish(
            "",
            &env.settings.amqp.tasks_queue,
            body.to_string().as_bytes(),
            lapin::BasicProperties::default()
                .with_content_type("application/json".into())
                .with_reply_to(queue.as_str().into()),
        )
        .await
        .expect("publish task");

    let reply = next_reply(&mut replies, TASK_ENDS_WITHIN)
        .await
        .expect("a reply");
    assert_eq!(reply.correlation_id, Some(task_id.to_string()));
    assert_eq!(reply.kind.as_deref(), Some("task.failed"));
    assert_eq!(reply.event["data"]["reason"], "rejected");
    assert_eq!(reply.event["task_id"], json!(task_id));
    env.stop().await;
}

#[tokio::test]
async fn a_task_cancelled_before_its_message_was_read_replies_when_the_message_arrives() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let task_id = Uuid::now_v7();
    let cancel = ControlMessage::Cancel(Cancel { task_id });
    send_control(&env.publisher, &env.settings.amqp, &cancel)
        .await
        .expect("cancel");
    let row = env.wait_terminal(task_id).await;
    assert_eq!(row.status, "cancelled");

    // The message comes later, asking for a reply: the task stays cancelled (unrun) and
    // the producer still learns how it ended.
    let (queue, mut replies) = reply_queue(&env).await;
    let body = json!({"task_id": task_id, "agent_id": agent, "input": "too late"});
    publish_with_reply(&env, &body, &queue, "late-1").await;
    let reply = next_reply(&mut replies, TASK_ENDS_WITHIN)
        .await
        .expect("a reply");
    assert_eq!(reply.correlation_id.as_deref(), Some("late-1"));
    assert_eq!(reply.kind.as_deref(), Some("task.cancelled"));
    assert_eq!(reply.event, stored_terminal(&env, task_id).await);
    assert!(env.fake.requests().is_empty(), "a cancelled task was run");
    env.stop().await;
}

#[tokio::test]
async fn a_reply_owed_by_a_dead_worker_is_sent_by_the_next_worker() {
    // A worker that committed a task's end and died before replying leaves the reply owed
    // in the row; any worker sends it when it starts (and every 5 s after).
    let mut env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let (queue, mut replies) = reply_queue(&env).await;
    let task_id = Uuid::now_v7();
    let event_id = Uuid::now_v7();
    let event = json!({
        "event_id": event_id, "task_id": task_id, "agent_id": agent, "seq": 1,
        "type": "task.completed", "trace_id": null, "iteration": 1,
        "ts": "2026-11-24T00:00:00Z", "data": {"answer": "done before the crash", "iterations": 1}
    });
    let mut tx = env.pool.begin().await.expect("tx");
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, answer, iterations, event_seq, \
                            confirmed_seq, finished_at, reply_to, correlation_id) \
         VALUES ($1, $2, 'x', 'completed', 'done before the crash', 1, 1, 1, now(), $3, 'c-9')",
    )
    .bind(task_id)
    .bind(agent)
    .bind(&queue)
    .execute(&mut *tx)
    .await
    .expect("task row");
    sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, 1, $2, 'task.completed', $3, created_at FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(event_id)
    .bind(&event)
    .execute(&mut *tx)
    .await
    .expect("event row");
    tx.commit().await.expect("commit");
    assert!(next_reply(&mut replies, NO_REPLY_FOR).await.is_none());

    env.spawn_worker();
    let reply = next_reply(&mut replies, TASK_ENDS_WITHIN)
        .await
        .expect("the owed reply");
    assert_eq!(reply.correlation_id.as_deref(), Some("c-9"));
    assert_eq!(reply.event, event);
    assert_eq!(reply.message_id, Some(event_id.to_string()));
    assert!(replied_at_set(&env, task_id).await);
    env.stop().await;
}

#[tokio::test]
async fn submit_wait_prints_the_answer_from_its_reply_queue() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    env.fake
        .script("submit-wait", vec![answer_reply("the answer by reply")]);
    let settings = env.settings.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_agentd"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .envs(crate::support::process::env_for(&settings))
            .args([
                "submit",
                "--agent",
                &agent.to_string(),
                "--wait",
                "submit-wait",
            ])
            .output()
            .expect("agentd submit")
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "submit --wait failed: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines();
    let task_id: Uuid = lines.next().expect("task id").parse().expect("uuid");
    assert_eq!(lines.next(), Some("the answer by reply"));
    // It was a reply: the row records it sent.
    assert!(replied_at_set(&env, task_id).await);
    env.stop().await;
}
