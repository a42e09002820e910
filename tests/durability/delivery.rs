//! Nothing lost downstream (CONTRACT v2 §2–3): stored events nobody confirmed are published
//! again (a redelivered message of the ended task, the periodic sweep), a task cancelled
//! before any worker reads its message never starts (one waiting behind a running task:
//! the features tier's `cancel.rs`), and
//! control messages published while no worker runs are applied before any task is taken,
//! one that can never be applied dropped without holding up the others.

use std::time::{Duration, Instant};

use crate::support::harness::{TestEnv, assert_whole_stream};
use crate::support::wait::{self, NEXT_STEP_WITHIN, TASK_ENDS_WITHIN};
use crate::support::words::{self, ByInput};
use agentd::contract::ControlMessage;
use agentd::contract::control::{Cancel, Inject};
use agentd::scripted_model::ScriptedModel;
use serde_json::{Value, json};
use uuid::Uuid;

async fn env_with(llm: &ScriptedModel, concurrency: u16) -> TestEnv {
    let base_url = llm.base_url();
    TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.concurrency = concurrency;
    })
    .await
}

/// Publishes a `cancel` straight to the control exchange, as any producer may.
async fn publish_cancel(env: &TestEnv, task_id: Uuid) {
    let message = ControlMessage::Cancel(Cancel { task_id });
    agentd::amqp::control::send_control(&env.publisher, &env.settings.amqp, &message)
        .await
        .expect("publish cancel");
}

/// Makes the stored events of an ended task look as a worker that died between its last
/// commit and the broker's confirms leaves them: stored, flagged, never confirmed.
async fn strand(env: &TestEnv, task_id: Uuid, flagged_secs_ago: f64) {
    sqlx::query(
        "UPDATE tasks SET confirmed_seq = 0, outbox_pending = true, \
                updated_at = now() - make_interval(secs => $2) WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(flagged_secs_ago)
    .execute(&env.pool)
    .await
    .expect("strand");
}

/// The sweep republishes what stayed unconfirmed past its grace: within a sweep period
/// after that (see `worker::outbox`), plus a margin for a loaded machine.
const SWEPT_WITHIN: Duration = Duration::from_secs(30);

/// Runs one task to its end and consumes its published events.
async fn run_one(env: &mut TestEnv, agent: Uuid, input: &str) -> (Uuid, Vec<u8>) {
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": input}).to_string();
    env.publish_raw(body.as_bytes()).await;
    let first = env.published_streams(&[task_id], TASK_ENDS_WITHIN).await;
    assert_whole_stream(task_id, &first[&task_id]);
    env.wait_confirmed(task_id).await;
    (task_id, body.into_bytes())
}

#[tokio::test]
async fn stranded_events_go_out_when_the_ended_task_is_redelivered() {
    let llm = words::start().await;
    let mut env = env_with(&llm, 4).await;
    env.spawn_worker();
    let agent = env.agent(None, None).await;
    let (task_id, body) = run_one(&mut env, agent, "redelivered steps=2").await;
    let stored = env.stored_events(task_id).await;
    strand(&env, task_id, 0.0).await;
    let sent = Instant::now();
    env.publish_raw(&body).await;
    let again = env.published_streams(&[task_id], TASK_ENDS_WITHIN).await;
    let took = sent.elapsed();
    assert_whole_stream(task_id, &again[&task_id]);
    assert_eq!(again[&task_id], stored, "the same events, ids and seqs");
    // The redelivery published them, not the sweep (which leaves a fresh flag alone).
    let grace = agentd::outbox::SWEEP_GRACE;
    assert!(took < grace, "republished after {took:?}");
    env.wait_confirmed(task_id).await;
    assert_eq!(llm.calls_for("redelivered steps=2"), 3, "nothing ran again");
    env.stop().await;
}

#[tokio::test]
async fn the_sweep_publishes_what_nobody_confirmed_within_30_seconds() {
    let llm = words::start().await;
    let mut env = env_with(&llm, 4).await;
    env.spawn_worker();
    let agent = env.agent(None, None).await;
    let (task_id, _) = run_one(&mut env, agent, "swept steps=1").await;
    let stored = env.stored_events(task_id).await;
    strand(&env, task_id, 60.0).await;
    let stranded = Instant::now();
    let again = env.published_streams(&[task_id], SWEPT_WITHIN).await;
    assert_whole_stream(task_id, &again[&task_id]);
    assert_eq!(again[&task_id], stored);
    assert!(stranded.elapsed() < SWEPT_WITHIN);
    env.wait_confirmed(task_id).await;
    env.stop().await;
}

#[tokio::test]
async fn control_messages_published_while_no_worker_runs_are_applied_first() {
    let llm = words::start().await;
    let mut env = env_with(&llm, 4).await;
    let agent = env.agent(None, None).await;
    let task_id = env.submit(agent, "never steps=1").await;
    publish_cancel(&env, task_id).await;
    env.spawn_worker();
    let streams = env.published_streams(&[task_id], TASK_ENDS_WITHIN).await;
    let kinds: Vec<&str> = streams[&task_id]
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds, ["task.cancelled"]);
    assert_eq!(env.wait_terminal(task_id).await.status, "cancelled");
    assert_eq!(llm.calls_for("never steps=1"), 0);
    env.stop().await;
}

/// Records a task `waiting` (paused) for `agent`, as a paused task's row is.
async fn waiting_task(env: &TestEnv, agent: Uuid) -> Uuid {
    let task_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, wait_reason, started_at) \
         VALUES ($1, $2, 'paused work', 'waiting', 'paused', now())",
    )
    .bind(task_id)
    .bind(agent)
    .execute(&env.pool)
    .await
    .expect("waiting task");
    task_id
}

/// Makes the database refuse every change of `task_id`'s guidance for good (a constraint
/// that the control message breaks, as NUL did), counting the refusals in a sequence,
/// which a rolled-back statement does not undo.
async fn refuse_guidance_for(env: &TestEnv, task_id: Uuid) {
    let statements = [
        "CREATE SEQUENCE test_refusals".to_owned(),
        format!(
            "CREATE FUNCTION test_refuse_guidance() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
               IF NEW.task_id = '{task_id}' \
                  AND NEW.pending_guidance IS DISTINCT FROM OLD.pending_guidance THEN \
                 PERFORM nextval('test_refusals'); \
                 RAISE EXCEPTION 'guidance refused' USING ERRCODE = 'check_violation'; \
               END IF; \
               RETURN NEW; \
             END $$"
        ),
        "CREATE TRIGGER test_refuse_guidance BEFORE UPDATE ON tasks \
         FOR EACH ROW EXECUTE FUNCTION test_refuse_guidance()"
            .to_owned(),
    ];
    for statement in statements {
        sqlx::query(&statement)
            .execute(&env.pool)
            .await
            .expect("refusing trigger");
    }
}

async fn refusals(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM test_refusals")
        .fetch_one(&env.pool)
        .await
        .expect("refusals")
}

async fn publish_inject(env: &TestEnv, task_id: Uuid, text: &str) {
    let message = ControlMessage::Inject(Inject {
        task_id,
        text: text.to_owned(),
    });
    agentd::amqp::control::send_control(&env.publisher, &env.settings.amqp, &message)
        .await
        .expect("publish inject");
}

/// Waits until the task's pending guidance is `expected`.
async fn wait_guidance(env: &TestEnv, task_id: Uuid, expected: &Value) {
    let what = format!("pending guidance {expected}");
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        let guidance: Option<Value> =
            sqlx::query_scalar("SELECT pending_guidance FROM tasks WHERE task_id = $1")
                .bind(task_id)
                .fetch_one(&env.pool)
                .await
                .expect("guidance");
        guidance.as_ref() == Some(expected)
    })
    .await;
}

/// Control messages published while no worker runs: one the database refuses for good,
/// guidance holding NUL, and a cancel of a queued task. The worker's first pass applies what
/// it can, drops the one it never can (logged, not put back), and goes on, so the cancelled
/// task never starts; the NUL is stored as U+FFFD.
#[tokio::test]
async fn a_control_message_that_can_never_be_applied_does_not_stop_the_others() {
    let llm = words::start().await;
    let mut env = env_with(&llm, 4).await;
    let agent = env.agent(None, None).await;
    let (poisoned, guided) = (
        waiting_task(&env, agent).await,
        waiting_task(&env, agent).await,
    );
    refuse_guidance_for(&env, poisoned).await;
    let queued = env.submit(agent, "cancelled-behind-poison steps=1").await;
    publish_inject(&env, poisoned, "never stored").await;
    publish_inject(&env, guided, "mind\u{0}the gap").await;
    publish_cancel(&env, queued).await;
    env.spawn_worker();
    let streams = env.published_streams(&[queued], TASK_ENDS_WITHIN).await;
    let kinds: Vec<&str> = streams[&queued]
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds, ["task.cancelled"], "no task.started before it");
    assert_eq!(llm.calls_for("cancelled-behind-poison steps=1"), 0);
    wait_guidance(&env, guided, &json!(["mind\u{FFFD}the gap"])).await;
    let injected = env.stored_events(guided).await;
    assert_eq!(injected[0]["type"], "input.injected");
    assert_eq!(injected[0]["data"]["text"], "mind\u{FFFD}the gap");
    // A message published after them is applied once the refused one is settled: had it
    // been put back, the consumer would have met it (and been refused) again first.
    publish_inject(&env, guided, "after").await;
    wait_guidance(&env, guided, &json!(["mind\u{FFFD}the gap", "after"])).await;
    assert_eq!(refusals(&env).await, 1, "tried once, then dropped");
    let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE task_id = $1")
        .bind(poisoned)
        .fetch_one(&env.pool)
        .await
        .expect("status");
    assert_eq!(status, "waiting", "the refused message changed nothing");
    env.stop().await;
}
