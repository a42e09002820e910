//! No task stays `running` with nobody on it (CONTRACT v2 §1, `worker.orphan_after_secs`): a
//! task whose worker died and whose message is gone is re-enqueued by the reconciler and
//! completes exactly once, resuming from its checkpoint.

use std::time::Duration;

use crate::support::harness::{TestEnv, assert_whole_stream};
use crate::support::process::WorkerProcess;
use crate::support::wait::{self, NEXT_STEP_WITHIN, Says, TASK_ENDS_WITHIN};
use crate::support::words;

#[tokio::test]
async fn a_running_task_whose_message_is_gone_is_re_enqueued_and_completes() {
    let llm = words::start().await;
    let base_url = llm.base_url();
    let mut env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.lease_secs = 1.0;
        s.worker.orphan_after_secs = 1.0;
    })
    .await;
    let agent = env.agent(None, None).await;
    let input = "orphan steps=3 delay_ms=300";
    let task_id = env.submit(agent, input).await;
    let mut first = WorkerProcess::spawn(&env.settings, &[]);
    let what = Says(|| format!("a recursion committed: {}", first.log()));
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        let committed: i64 =
            sqlx::query_scalar("SELECT count(*) FROM recursions WHERE task_id = $1")
                .bind(task_id)
                .fetch_one(&env.pool)
                .await
                .unwrap();
        committed >= 1
    })
    .await;
    first.kill();
    // The broker gives the unacknowledged message back; drop it, as a broker that lost it
    // (a single node restarted from a lost disk, a requeue that failed) would.
    let channel = env.publisher.channel().await.unwrap();
    wait::until_true("the message came back", NEXT_STEP_WITHIN, || async {
        let purged = channel
            .queue_purge(
                env.settings.amqp.tasks_queue.as_str().into(),
                Default::default(),
            )
            .await
            .unwrap();
        purged > 0
    })
    .await;
    let second = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{}", second.log());
    assert!(
        second.log().contains("orphan re-enqueued"),
        "{}",
        second.log()
    );
    let streams = env.published_streams(&[task_id], TASK_ENDS_WITHIN).await;
    assert_whole_stream(task_id, &streams[&task_id]);
    let kinds: Vec<&str> = streams[&task_id]
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert!(kinds.contains(&"task.resumed"), "{kinds:?}");
    let iterations: Vec<i32> = sqlx::query_scalar(
        "SELECT iteration FROM recursions WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        iterations,
        vec![1, 2, 3, 4],
        "each recursion committed once"
    );
    drop(second);
    env.stop().await;
}

/// The contract's bound for ending a task whose message the broker dead-lettered.
const DELIVERY_LIMIT_ENDS_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_task_whose_run_fails_on_every_delivery_ends_at_the_delivery_limit() {
    let env = TestEnv::start_with(|s| s.worker.max_deliveries = 3).await;
    let agent = env.agent(None, None).await;
    // A task a dead worker left `running` with a checkpoint no worker can read: every run
    // of it fails at once, for good.
    let task_id = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, started_at, lease_owner, \
                            lease_until, checkpoint, event_seq, confirmed_seq) \
         VALUES ($1, $2, 'hi', 'running', now(), $3, now() - interval '1 minute', \
                 'not a machine', 1, 1)",
    )
    .bind(task_id)
    .bind(agent)
    .bind(uuid::Uuid::now_v7())
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, 1, $2, 'task.started', '{}', created_at FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(uuid::Uuid::now_v7())
    .execute(&env.pool)
    .await
    .unwrap();
    let body = serde_json::json!({"task_id": task_id, "agent_id": agent, "input": "hi"});
    env.publish_raw(body.to_string().as_bytes()).await;
    // A failed run gives its lease up: the deliveries follow each other at once, and the
    // deaths consumer does not take the task for one a live worker runs.
    let task = env
        .wait_terminal_within(task_id, DELIVERY_LIMIT_ENDS_WITHIN)
        .await;
    assert_eq!(
        (task.status.as_str(), task.fail_reason.as_deref()),
        ("failed", Some("delivery_limit"))
    );
    env.stop().await;
}
