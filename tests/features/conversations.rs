//! One task at a time per conversation (CONTRACT §10, `agents.conversation_policy`) with
//! real workers, the fake LLM over HTTP, RabbitMQ and PostgreSQL: turns of one conversation
//! published together never run at once, even on two workers, each later turn sees the
//! earlier turns' answers, turns published back to back by the gateway or `agentd submit`
//! run in publish order, and the `reject` policy ends a turn that arrives while another runs.
//! A parked turn is cancelled in `cancel.rs`.

use std::time::Duration;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use agentd::contract::TaskMessage;
use agentd::scripted_model::{ModelReply, answer_reply};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub(super) async fn publish_turn(
    env: &TestEnv,
    agent: Uuid,
    conversation: Uuid,
    input: &str,
) -> Uuid {
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": input,
                      "conversation_id": conversation});
    env.publish_raw(body.to_string().as_bytes()).await;
    task_id
}

fn ts(event: &Value) -> DateTime<Utc> {
    event["ts"].as_str().unwrap().parse().expect("ts")
}

#[tokio::test]
async fn turns_published_together_run_one_at_a_time_on_two_workers_and_see_each_other() {
    let env = TestEnv::start().await;
    // A second worker in this process: the turns are spread over both.
    let second_stop = CancellationToken::new();
    let second = tokio::spawn(agentd::worker::run(
        env.settings.clone(),
        second_stop.clone(),
    ));
    let agent = env.agent(None, None).await;
    let conversation = Uuid::now_v7();
    let slow = Duration::from_millis(300);
    let markers = ["turn-a", "turn-b", "turn-c"];
    for marker in markers {
        env.fake.script(
            marker,
            vec![answer_reply(&format!("answer of {marker}")).with_delay(slow)],
        );
    }
    let mut tasks = Vec::new();
    for marker in markers {
        tasks.push(publish_turn(&env, agent, conversation, &format!("{marker}: go")).await);
    }
    // Each turn's span from task.started to its end, from its stored events.
    let mut spans = Vec::new();
    for task_id in &tasks {
        assert_eq!(env.wait_terminal(*task_id).await.status, "completed");
        let events = env.stored_events(*task_id).await;
        let started = events.iter().find(|e| e["type"] == "task.started").unwrap();
        spans.push((ts(started), ts(events.last().unwrap()), *task_id));
    }
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "turn {} started at {} before turn {} ended at {}",
            pair[1].2,
            pair[1].0,
            pair[0].2,
            pair[0].1
        );
    }
    // Two of the three waited for their turn, and each later turn saw the earlier answers.
    let parked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE task_id = ANY($1) AND type = 'task.waiting' \
           AND payload -> 'data' ->> 'reason' = 'conversation'",
    )
    .bind(&tasks)
    .fetch_one(&env.pool)
    .await
    .expect("parked");
    assert!(parked >= 2, "{parked} turns parked");
    for (index, (_, _, task_id)) in spans.iter().enumerate() {
        let marker = markers[tasks.iter().position(|t| t == task_id).unwrap()];
        let state = env.fake.requests_for(marker)[0].system_state().unwrap();
        let seen = state["context"]["conversation"]
            .as_array()
            .map_or(0, Vec::len);
        assert_eq!(
            seen, index,
            "turn {index} ({marker}) saw {seen} earlier turns"
        );
        if index > 0 {
            let earlier = &state["context"]["conversation"][index - 1];
            assert_eq!(earlier["status"], "completed");
            assert!(
                earlier["answer"]
                    .as_str()
                    .unwrap()
                    .starts_with("answer of turn-")
            );
        }
    }
    second_stop.cancel();
    let _ = second.await;
    env.stop().await;
}

/// Conversations published as bursts of two turns in the publish-order tests.
const BURSTS: usize = 10;

/// How a producer publishes the turns of a burst.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// `POST /v1/tasks` (even bursts) or `agentd submit` (odd bursts): both record the turn
    /// before they publish it, the second once the first was accepted.
    RecordedFirst,
    /// Straight to the tasks queue, one message after the other, with random (v4) task ids
    /// as a producer in another language would: placed when a worker receives them.
    Queue,
}

/// Publishes the two turns of a burst back to back.
async fn publish_burst(
    env: &TestEnv,
    gateway: &Gateway,
    agent: Uuid,
    (burst, via): (usize, Via),
) -> [Uuid; 2] {
    let conversation = Uuid::now_v7();
    let mut turns = [Uuid::nil(); 2];
    for (turn, which) in turns.iter_mut().zip(["first", "second"]) {
        let input = format!("burst-{burst:02}-{which}: go");
        *turn = match via {
            Via::Queue => {
                let task_id = Uuid::new_v4();
                let body = json!({"task_id": task_id, "agent_id": agent, "input": input,
                                  "conversation_id": conversation});
                env.publish_raw(body.to_string().as_bytes()).await;
                task_id
            }
            Via::RecordedFirst if burst.is_multiple_of(2) => {
                let body =
                    json!({"agent_id": agent, "input": input, "conversation_id": conversation});
                let accepted = gateway.post_json("/v1/tasks", &body, 202).await;
                accepted["task_id"].as_str().unwrap().parse().unwrap()
            }
            Via::RecordedFirst => {
                let task_id = Uuid::now_v7();
                let task = TaskMessage {
                    task_id: Some(task_id),
                    agent_id: agent,
                    input,
                    conversation_id: Some(conversation),
                    constraints: Vec::new(),
                    stream: false,
                    budget: None,
                    agent_version: None,
                    channel: None,
                    tenant_id: None,
                    priority: None,
                    rerun: None,
                };
                agentd::cli::submit::run(&env.settings, &task, false, None)
                    .await
                    .expect("agentd submit");
                task_id
            }
        };
    }
    turns
}

/// [`BURSTS`] conversations of two turns published `via`, all bursts at once on two
/// workers: in each, the first turn never waits, the second starts after the first ended
/// and sees its answer.
async fn bursts_run_in_publish_order(via: Via) {
    let env = TestEnv::start().await;
    let second_stop = CancellationToken::new();
    let second = tokio::spawn(agentd::worker::run(
        env.settings.clone(),
        second_stop.clone(),
    ));
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    for burst in 0..BURSTS {
        for which in ["first", "second"] {
            let marker = format!("burst-{burst:02}-{which}");
            env.fake
                .script(&marker, vec![answer_reply(&format!("answer of {marker}"))]);
        }
    }
    // Every burst at once, so that the two workers race for the turns of each.
    let bursts = (0..BURSTS).map(|burst| publish_burst(&env, &gateway, agent, (burst, via)));
    let bursts = futures::future::join_all(bursts).await;
    for (burst, [first, second]) in bursts.into_iter().enumerate() {
        assert_eq!(env.wait_terminal(first).await.status, "completed");
        assert_eq!(env.wait_terminal(second).await.status, "completed");
        let first_events = env.stored_events(first).await;
        let second_events = env.stored_events(second).await;
        assert!(
            first_events.iter().all(|e| e["type"] != "task.waiting"),
            "{via:?} burst {burst}: the first turn waited behind the second: {first_events:?}"
        );
        let started = second_events
            .iter()
            .find(|e| e["type"] == "task.started")
            .unwrap();
        let first_ended = first_events.last().unwrap();
        assert!(
            ts(first_ended) <= ts(started),
            "{via:?} burst {burst}: the second turn started at {} before the first ended at {}",
            ts(started),
            ts(first_ended)
        );
        let marker = format!("burst-{burst:02}-second");
        let state = env.fake.requests_for(&marker)[0].system_state().unwrap();
        let earlier = &state["context"]["conversation"];
        assert_eq!(
            earlier.as_array().map_or(0, Vec::len),
            1,
            "{via:?} burst {burst}: {earlier}"
        );
        assert_eq!(
            earlier[0]["answer"],
            format!("answer of burst-{burst:02}-first"),
            "{via:?} burst {burst}"
        );
    }
    gateway.stop().await;
    second_stop.cancel();
    let _ = second.await;
    env.stop().await;
}

#[tokio::test]
async fn turns_run_in_publish_order_when_published_back_to_back_on_two_workers() {
    bursts_run_in_publish_order(Via::RecordedFirst).await;
}

#[tokio::test]
async fn turns_published_straight_to_the_queue_back_to_back_run_in_publish_order() {
    bursts_run_in_publish_order(Via::Queue).await;
}

#[tokio::test]
async fn the_reject_policy_refuses_a_turn_that_arrives_while_another_runs() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    // A turn arriving while another runs ends rejected, and the first is unharmed.
    sqlx::query("UPDATE agents SET conversation_policy = 'reject' WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("policy");
    let conversation = Uuid::now_v7();
    env.fake.script(
        "slow-turn",
        vec![answer_reply("first").with_delay(Duration::from_millis(800))],
    );
    env.fake.script(
        "refused-turn",
        vec![ModelReply::status(500, "must not be called")],
    );
    let running = publish_turn(&env, agent, conversation, "slow-turn: go").await;
    env.wait_asked("slow-turn", 1).await;
    let refused = publish_turn(&env, agent, conversation, "refused-turn: go").await;
    let events = env.published_events(refused).await;
    let task = env.wait_terminal(refused).await;
    assert_eq!(task.status, "rejected");
    assert!(
        task.error
            .as_deref()
            .unwrap()
            .contains("conversation_policy"),
        "{:?}",
        task.error
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "task.failed");
    assert_eq!(last["data"]["reason"], "rejected");
    assert!(env.fake.requests_for("refused-turn").is_empty());
    assert_eq!(env.wait_terminal(running).await.status, "completed");
    // Once the conversation is idle, a new turn runs.
    env.fake.script("later-turn", vec![answer_reply("later")]);
    let later = publish_turn(&env, agent, conversation, "later-turn: go").await;
    assert_eq!(env.wait_terminal(later).await.status, "completed");
    env.stop().await;
}
