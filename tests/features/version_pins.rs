//! A task is pinned to its agent version (CONTRACT v3 §11) also when its row was recorded
//! `pending` without one by a producer that publishes the message first and records the row
//! after (the gateway): the row's insert is still uncommitted when the worker's intake
//! statement runs, so intake waits for it and finds it, but intake's pin does not see it.
//! The claim that follows pins it (issue 25: `tasks.agent_version` stayed NULL now and
//! then). The race is made certain here: the test holds the row's insert open until the
//! worker's intake waits on it, then commits.

use std::time::Duration;

use crate::support::harness::TestEnv;
use crate::support::wait;
use agentd::scripted_model::answer_reply;
use serde_json::json;
use uuid::Uuid;

/// The worker takes the message and its intake statement reaches the uncommitted row.
const INTAKE_WAITS_WITHIN: Duration = wait::NEXT_STEP_WITHIN;

/// Backends of the test's database waiting for a lock (the intake on the open insert).
async fn waiting_for_a_lock(env: &TestEnv) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("pg_stat_activity")
}

#[tokio::test]
async fn a_row_recorded_pending_while_intake_runs_is_pinned_by_the_claim() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "pinned-late";
    env.fake.script(marker, vec![answer_reply("pinned")]);
    let task_id = Uuid::now_v7();
    let input = format!("{marker}: which version?");
    // The producer's `insert_pending`, left open: no agent_version, as the gateway records it.
    let mut producer = env.pool.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, tenant_id) \
         SELECT $1, $2, $3, tenant_id FROM agents WHERE agent_id = $2",
    )
    .bind(task_id)
    .bind(agent)
    .bind(&input)
    .execute(&mut *producer)
    .await
    .expect("insert the pending row");
    let message = json!({"task_id": task_id, "agent_id": agent, "input": input});
    env.publish_raw(message.to_string().as_bytes()).await;
    wait::until_true(
        "the intake waits on the open insert",
        INTAKE_WAITS_WITHIN,
        || async { waiting_for_a_lock(&env).await > 0 },
    )
    .await;
    producer.commit().await.expect("commit the pending row");

    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.answer.as_deref(), Some("pinned"));
    assert_eq!(
        task.agent_version,
        Some(1),
        "the task is pinned to version 1"
    );
    env.stop().await;
}
