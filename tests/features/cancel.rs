//! Cancel wherever a task is (CONTRACT §2, `cancel`), with the real worker, RabbitMQ,
//! PostgreSQL and the scripted model: a task ends `cancelled` within a second, with
//! `task.cancelled` as its last event, inside an LLM call, a retry wait or a tool, waiting
//! for approval, paused, parked behind its conversation's running turn, or waiting for a
//! rate-limit slot; one cancelled before its message arrives, or while its message waits
//! behind another task, never starts; cancelling a parent cancels its child. Each test puts
//! its task where it is cancelled with the helpers of that feature's own file.

use std::time::{Duration, Instant};

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::observe::broker_messages;
use crate::support::tools::TestTools;
use crate::support::wait::{self, CANCEL_WITHIN, NEXT_STEP_WITHIN};
use crate::support::words::{self, ByInput};
use agentd::contract::ControlMessage;
use agentd::contract::control::{Cancel, Pause};
use agentd::core::approval::DecisionKind;
use agentd::lifecycle::approvals::Decided;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply, reflect_reply};
use serde_json::{Value, json};
use uuid::Uuid;

use super::approvals::{decide_now, decision, gate};
use super::budgets_and_steering::control;
use super::conversations::publish_turn;
use super::delegation::{agents, child_of};
use super::rate_limits;

/// The child of a cancelled parent ends within this after the parent: its cancel goes out
/// as the parent's is applied (the same second as the parent's, and a margin).
const CHILD_CANCELLED_WITHIN: Duration = Duration::from_secs(2);

/// How long the task without a rate-limit slot is watched for a request it must not send.
const SLOTLESS_FOR: Duration = Duration::from_millis(500);

async fn cancel_when_running(env: &mut TestEnv, marker: &str, replies: Vec<ModelReply>) {
    let agent = env.agent(None, None).await;
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    // The recursion is in flight once the model has been asked.
    env.wait_asked(marker, 1).await;
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
    let limited = ModelReply::status(429, "wait").with_retry_after(30);
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

#[tokio::test]
async fn a_queued_task_cancelled_by_a_raw_control_message_never_starts() {
    let llm = words::start().await;
    // One task at a time: the second waits in the queue behind the first.
    let base_url = llm.base_url();
    let mut env = TestEnv::start_with(move |s| {
        s.llm.base_url = base_url;
        s.worker.concurrency = 1;
    })
    .await;
    let agent = env.agent(None, None).await;
    let busy = env.submit(agent, "busy steps=1 delay_ms=1500").await;
    let queued = env.submit(agent, "queued steps=1").await;
    wait::until_true(
        "the first task asked the model",
        NEXT_STEP_WITHIN,
        || async { llm.calls_for("busy steps=1 delay_ms=1500") > 0 },
    )
    .await;
    let sent = Instant::now();
    let cancel = ControlMessage::Cancel(Cancel { task_id: queued });
    agentd::amqp::control::send_control(&env.publisher, &env.settings.amqp, &cancel)
        .await
        .expect("publish cancel");
    let streams = env.published_streams(&[queued], NEXT_STEP_WITHIN).await;
    let took = sent.elapsed();
    let kinds: Vec<&str> = streams[&queued]
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds, ["task.cancelled"], "no task.started before it");
    assert!(took < CANCEL_WITHIN, "task.cancelled after {took:?}");
    assert_eq!(streams[&queued][0]["agent_id"], Value::Null);
    assert_eq!(env.wait_terminal(busy).await.status, "completed");
    // The queued message is acknowledged unrun once the worker reads it: then nothing
    // more can be published for it.
    let queue = &env.settings.amqp.tasks_queue;
    let what = "the cancelled task's message acknowledged";
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        broker_messages(queue) == Some(0)
    })
    .await;
    let stored: Vec<String> = env
        .stored_events(queued)
        .await
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(stored, ["task.cancelled"], "nothing more was published");
    assert_eq!(llm.calls_for("queued steps=1"), 0);
    env.stop().await;
}

#[tokio::test]
async fn cancel_inside_a_tool() {
    let tools = std::sync::Arc::new(TestTools);
    let mut env = TestEnv::start_with_tools(|s| s.worker.tool_timeout_ms = 60_000, tools).await;
    let agent = env.agent(None, None).await;
    let marker = "cancel-in-tool";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("sleep_ms", json!({"ms": 30_000}))]),
            answer_reply("late"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    wait::until_true("the tool started", NEXT_STEP_WITHIN, || async {
        let started: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events WHERE task_id = $1 AND type = 'tool.started'",
        )
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
        started == 1
    })
    .await;
    env.assert_cancels_within_a_second(task_id).await;
    env.stop().await;
}

#[tokio::test]
async fn a_task_waiting_for_approval_is_cancelled_within_a_second() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    gate(&env, agent, None, None).await;
    let marker = "approval-cancel";
    env.fake.script(
        marker,
        vec![call_tool_reply(vec![(
            "calculate",
            json!({"expression": "1"}),
        )])],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    env.assert_cancels_within_a_second(task_id).await;
    // Its request no longer waits, and a decision now changes nothing.
    let gateway = Gateway::start(&env, &[]).await;
    let pending = gateway.get_json("/v1/approvals?status=pending", 200).await;
    assert_eq!(pending["approvals"], json!([]));
    let late = decide_now(
        &env,
        task_id,
        "call_1",
        &decision(DecisionKind::Approve, "a"),
    )
    .await;
    assert_eq!(late, Decided::NotWaiting("cancelled".into()));
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_paused_task_is_cancelled_within_a_second() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "steer-cancel-waiting";
    env.fake.script(
        marker,
        vec![
            reflect_reply("first").with_delay(Duration::from_millis(200)),
            ModelReply::status(500, "never asked"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_asked(marker, 1).await;
    control(&env, ControlMessage::Pause(Pause { task_id })).await;
    env.wait_status(task_id, "waiting").await;
    env.assert_cancels_within_a_second(task_id).await;
    assert_eq!(env.fake.requests_for(marker).len(), 1);
    env.stop().await;
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_child() {
    let mut env = TestEnv::start().await;
    let (boss, helper) = agents(&env).await;
    env.fake.script(
        "boss-2",
        vec![call_tool_reply(vec![(
            "delegate",
            json!({"agent_id": helper, "input": "helper-2: take your time"}),
        )])],
    );
    env.fake.script(
        "helper-2",
        vec![answer_reply("late").with_delay(Duration::from_secs(3))],
    );
    let parent = env.submit(boss, "boss-2: go").await;
    let child = child_of(&env, parent).await;
    env.wait_asked("helper-2", 1).await;
    env.assert_cancels_within_a_second(parent).await;
    let started = std::time::Instant::now();
    let child_row = env.wait_terminal(child).await;
    assert_eq!(child_row.status, "cancelled");
    assert!(
        started.elapsed() < CHILD_CANCELLED_WITHIN,
        "child cancelled after {:?}",
        started.elapsed()
    );
    env.stop().await;
}

#[tokio::test]
async fn a_task_waiting_for_a_slot_is_cancelled_within_a_second() {
    let (provider, url) =
        rate_limits::Provider::start(100, Duration::from_secs(60), Duration::ZERO).await;
    let (mut env, stops) = rate_limits::env_with(url, Some(rate_limits::limit(1, 60.0)), 1).await;
    let agent = env.agent(None, None).await;
    let first = env.submit(agent, "the one slot").await;
    assert_eq!(env.wait_terminal(first).await.status, "completed");
    let waiting = env.submit(agent, "no slot left").await;
    env.wait_status(waiting, "running").await;
    // Running, it asks for a slot and gets none: the test is about it staying off the
    // provider, so it is watched for a stretch of time.
    tokio::time::sleep(SLOTLESS_FOR).await;
    assert_eq!(
        provider.arrivals().len(),
        1,
        "the second task must wait for a slot"
    );
    env.assert_cancels_within_a_second(waiting).await;
    assert_eq!(provider.arrivals().len(), 1);
    for stop in stops {
        stop.cancel();
    }
}

#[tokio::test]
async fn a_parked_turn_is_cancelled_within_a_second() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let conversation = Uuid::now_v7();
    env.fake.script(
        "long-turn",
        vec![answer_reply("done").with_delay(Duration::from_millis(1500))],
    );
    env.fake.script("parked-turn", vec![answer_reply("never")]);
    let first = publish_turn(&env, agent, conversation, "long-turn: go").await;
    env.wait_asked("long-turn", 1).await;
    let parked = publish_turn(&env, agent, conversation, "parked-turn: go").await;
    wait::until_true("the second turn parked", NEXT_STEP_WITHIN, || async {
        let reason: Option<String> =
            sqlx::query_scalar("SELECT wait_reason FROM tasks WHERE task_id = $1")
                .bind(parked)
                .fetch_optional(&env.pool)
                .await
                .expect("row")
                .flatten();
        reason.as_deref() == Some("conversation")
    })
    .await;
    env.assert_cancels_within_a_second(parked).await;
    assert!(env.fake.requests_for("parked-turn").is_empty());
    assert_eq!(env.wait_terminal(first).await.status, "completed");
    env.stop().await;
}
