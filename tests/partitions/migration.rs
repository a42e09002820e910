//! The partitioning migration on a database that already holds a trace: every row moves
//! with its task's creation time into the partition of its day (a row whose task is gone into
//! the default partition), ids and keys are kept, and what agentd writes next goes on.

use std::borrow::Cow;

use agentd::store::{self, MIGRATOR};
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use uuid::Uuid;

use super::homes;

/// The first migration of partitioned trace tables.
const PARTITIONING: i64 = 20261127010001;

/// A database of its own, migrated up to (not including) the partitioning.
struct OldDatabase {
    url: String,
    name: String,
    pool: PgPool,
}

impl OldDatabase {
    async fn create() -> Self {
        let name = format!("agentd_test_{}", &Uuid::new_v4().simple().to_string()[..12]);
        let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
        store::ensure_database(&url).await.expect("database");
        let pool = store::connect(&url, 2).await.expect("connect");
        let before = Migrator {
            migrations: Cow::Owned(
                MIGRATOR
                    .iter()
                    .filter(|m| m.version < PARTITIONING)
                    .cloned()
                    .collect(),
            ),
            ..Migrator::DEFAULT
        };
        before
            .run(&pool)
            .await
            .expect("migrations before partitioning");
        Self { url, name, pool }
    }

    async fn remove(self) {
        self.pool.close().await;
        let admin_url = self.url.replace(&self.name, "postgres");
        let admin = store::connect(&admin_url, 1).await.expect("admin");
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .execute(&admin)
        .await
        .expect("drop database");
        admin.close().await;
    }
}

/// The rows of a trace written before partitioning, as the schema of then took them.
async fn old_trace(pool: &PgPool, task_id: Uuid, created: &str) {
    sqlx::query(
        "INSERT INTO tasks (task_id, input, status, created_at, finished_at) \
         VALUES ($1, 'old', 'completed', $2::timestamptz, $2::timestamptz)",
    )
    .bind(task_id)
    .bind(created)
    .execute(pool)
    .await
    .expect("task");
    let trace_id = Uuid::now_v7();
    let part = Uuid::now_v7();
    for statement in [
        "INSERT INTO recursions (trace_id, task_id, iteration, status, started_at, finished_at) \
         VALUES ($2, $1, 1, 'done', now(), now())",
        "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, success, duration_ms) \
         VALUES ($1, $2, 'call_1', 'calculate', true, 1)",
        "INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms, \
                                request_parts, response) \
         VALUES ($1, $2, 1, 1, '200', 5, ARRAY[$3::uuid], '{\"ok\": true}')",
        "INSERT INTO llm_request_parts (task_id, part_id, content) \
         VALUES ($1, $3, '{\"messages\": []}')",
        "INSERT INTO events (task_id, seq, event_id, type, payload) \
         VALUES ($1, 1, gen_random_uuid(), 'task.started', '{}'), \
                ($1, 2, gen_random_uuid(), 'task.completed', '{}')",
    ] {
        sqlx::query(statement)
            .bind(task_id)
            .bind(trace_id)
            .bind(part)
            .execute(pool)
            .await
            .expect(statement);
    }
}

#[tokio::test]
async fn the_migration_moves_an_existing_trace_into_partitions() {
    let db = OldDatabase::create().await;
    let pool = &db.pool;
    let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
    old_trace(pool, first, "2026-10-01T10:00:00Z").await;
    old_trace(pool, second, "2026-10-02T23:59:59Z").await;
    // An event of a task that no longer exists.
    let orphan = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload) \
         VALUES ($1, 1, gen_random_uuid(), 'task.started', '{}')",
    )
    .bind(orphan)
    .execute(pool)
    .await
    .expect("orphan");
    let ids_before: Vec<i64> = sqlx::query_scalar("SELECT id FROM tool_calls ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("ids");

    MIGRATOR
        .run(pool)
        .await
        .expect("the partitioning migration");

    for (task_id, day) in [(first, "20261001"), (second, "20261002")] {
        for table in agentd::store::partitions::TRACE_TABLES {
            assert_eq!(
                homes(pool, table, task_id).await,
                vec![format!("{table}_p{day}")],
                "{table}"
            );
        }
        let keyed: bool = sqlx::query_scalar(
            "SELECT bool_and(e.task_created_at = t.created_at) \
             FROM events e JOIN tasks t USING (task_id) WHERE e.task_id = $1",
        )
        .bind(task_id)
        .fetch_one(pool)
        .await
        .expect("keys");
        assert!(keyed, "each row carries its task's creation time");
    }
    assert_eq!(homes(pool, "events", orphan).await, vec!["events_default"]);
    let ids_after: Vec<i64> = sqlx::query_scalar("SELECT id FROM tool_calls ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("ids");
    assert_eq!(ids_after, ids_before, "row ids are kept");

    // The §12 view reads the moved record; the contract keys still refuse a duplicate; a
    // new row takes the next id.
    let request: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT request FROM llm_call_bodies WHERE task_id = $1")
            .bind(first)
            .fetch_one(pool)
            .await
            .expect("body");
    assert_eq!(request, Some(serde_json::json!({"messages": []})));
    let duplicate = sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, 1, gen_random_uuid(), 'task.started', '{}', created_at \
         FROM tasks WHERE task_id = $1",
    )
    .bind(first)
    .execute(pool)
    .await;
    assert!(duplicate.is_err(), "(task_id, seq) stays unique");
    let next: i64 = sqlx::query_scalar(
        "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, task_created_at) \
         SELECT $1, gen_random_uuid(), 'call_2', 'calculate', created_at \
         FROM tasks WHERE task_id = $1 RETURNING id",
    )
    .bind(second)
    .fetch_one(pool)
    .await
    .expect("new call");
    assert!(next > *ids_before.iter().max().expect("ids"), "{next}");
    db.remove().await;
}
