//! Retention against the real database: `agentd prune` (the binary) and
//! `store::prune` remove old ended tasks with every trace row, in batches, and leave
//! running, pending and recent tasks alone; `--dry-run` removes nothing.

use crate::support::harness::TestEnv;
use crate::support::wait::{self, NEXT_STEP_WITHIN};
use agentd::store::prune::{self, PruneCounts, PruneRequest};
use chrono::Duration;
use sqlx::PgPool;
use uuid::Uuid;

/// Inserts a task with `status`, created and (when ended) finished `days_ago`, with one
/// recursion, one tool call, one LLM call and two events.
async fn task(pool: &PgPool, status: &str, days_ago: i64) -> Uuid {
    let task_id = Uuid::now_v7();
    let trace_id = Uuid::now_v7();
    let at = chrono::Utc::now() - Duration::days(days_ago);
    let ended = agentd::store::tasks::status::is_terminal(status);
    sqlx::query(
        "INSERT INTO tasks (task_id, input, status, created_at, finished_at) \
         VALUES ($1, 'x', $2, $3, CASE WHEN $4 THEN $3 END)",
    )
    .bind(task_id)
    .bind(status)
    .bind(at)
    .bind(ended)
    .execute(pool)
    .await
    .expect("task");
    // Each trace row carries its task's creation time, the partition key.
    let statements = [
        "INSERT INTO recursions (trace_id, task_id, iteration, status, started_at, finished_at, \
                                 task_created_at) \
         SELECT $2, $1, 1, 'done', now(), now(), created_at FROM tasks WHERE task_id = $1",
        "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, success, duration_ms, \
                                 task_created_at) \
         SELECT $1, $2, 'call_1', 'calculate', true, 1, created_at FROM tasks WHERE task_id = $1",
        "INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms, \
                                task_created_at) \
         SELECT $1, $2, 1, 1, '200', 5, created_at FROM tasks WHERE task_id = $1",
        "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, seq, gen_random_uuid(), type, '{}', created_at \
         FROM tasks, (VALUES (1, 'task.started'), (2, 'recursion.started')) AS e (seq, type) \
         WHERE task_id = $1",
    ];
    for statement in statements {
        sqlx::query(statement)
            .bind(task_id)
            .bind(trace_id)
            .execute(pool)
            .await
            .expect(statement);
    }
    task_id
}

/// Rows per table for these tasks: tasks, recursions, tool_calls, llm_calls, events.
async fn rows(pool: &PgPool, ids: &[Uuid]) -> [i64; 5] {
    let mut counts = [0; 5];
    for (i, table) in ["tasks", "recursions", "tool_calls", "llm_calls", "events"]
        .iter()
        .enumerate()
    {
        counts[i] = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} WHERE task_id = ANY($1)"
        ))
        .bind(ids)
        .fetch_one(pool)
        .await
        .expect("count");
    }
    counts
}

/// Runs the real binary against the test database.
async fn agentd_prune(env: &TestEnv, args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .arg("prune")
        .args(args)
        .env("AGENTD__DATABASE__URL", &env.settings.database.url)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .await
        .expect("run agentd prune");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    stdout
}

#[tokio::test]
async fn prune_removes_old_ended_tasks_only() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let old_completed = task(pool, "completed", 40).await;
    let old_failed = task(pool, "failed", 45).await;
    let old_cancelled = task(pool, "cancelled", 50).await;
    let old_rejected = task(pool, "rejected", 60).await;
    let kept = [
        task(pool, "running", 40).await,
        task(pool, "pending", 40).await,
        task(pool, "completed", 2).await,
    ];

    let dry = agentd_prune(&env, &["--older-than", "30d", "--dry-run"]).await;
    assert!(dry.starts_with("would remove 4 task(s)"), "{dry}");
    assert!(dry.contains("  events       8"), "{dry}");
    let all = [old_completed, old_failed, old_cancelled, old_rejected];
    assert_eq!(
        rows(pool, &all).await,
        [4, 4, 4, 4, 8],
        "a dry run removes nothing"
    );

    prune_completed_and_failed_in_batches(pool, &[old_completed, old_failed], old_cancelled).await;

    let out = agentd_prune(
        &env,
        &["--older-than", "30d", "--status", "cancelled,rejected"],
    )
    .await;
    assert!(out.starts_with("removed 2 task(s)"), "{out}");
    assert!(out.contains("  recursions   2"), "{out}");
    assert_eq!(rows(pool, &all).await, [0; 5]);
    assert_eq!(
        rows(pool, &kept).await,
        [3, 3, 3, 3, 6],
        "live and recent tasks stay"
    );
    env.stop().await;
}

/// The library call with batches of one: only the two selected statuses go.
async fn prune_completed_and_failed_in_batches(pool: &PgPool, doomed: &[Uuid], other: Uuid) {
    let statuses = vec!["completed".to_owned(), "failed".to_owned()];
    let request = PruneRequest::older_than(Duration::days(30), statuses, 1);
    let removed = prune::prune(pool, &request).await.expect("prune");
    let expected = PruneCounts {
        tasks: 2,
        recursions: 2,
        tool_calls: 2,
        llm_calls: 2,
        events: 4,
        partitions: 0,
    };
    assert_eq!(removed, expected, "two batches of one task");
    assert_eq!(rows(pool, doomed).await, [0; 5]);
    assert_eq!(rows(pool, &[other]).await, [1, 1, 1, 1, 2], "status filter");
}

#[tokio::test]
async fn live_statuses_and_bad_ages_are_refused() {
    for args in [
        ["--older-than", "1s", "--status", "running"],
        ["--older-than", "30", "--status", "completed"],
    ] {
        let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
            .arg("prune")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .await
            .expect("run agentd prune");
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("not an ended status") || stderr.contains("no unit"),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn the_worker_prunes_periodically_when_configured() {
    let env = TestEnv::start_with(|s| {
        s.retention.interval_secs = 1;
        s.retention.older_than = "7d".to_owned();
    })
    .await;
    let old = task(&env.pool, "completed", 8).await;
    let recent = task(&env.pool, "completed", 6).await;
    // Every second (retention.interval_secs): the first pass comes within a few.
    wait::until_true("the periodic prune ran", NEXT_STEP_WITHIN, || async {
        rows(&env.pool, &[old]).await[0] == 0
    })
    .await;
    assert_eq!(rows(&env.pool, &[old]).await, [0; 5]);
    assert_eq!(rows(&env.pool, &[recent]).await, [1, 1, 1, 1, 2]);
    env.stop().await;
}
