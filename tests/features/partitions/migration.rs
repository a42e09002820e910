//! The partitioning migration on a database that already holds a trace: every row moves
//! with its task's creation time into the partition of its day (a row whose task is gone into
//! the default partition), ids and keys are kept, and what agentd writes next goes on. Once
//! from a database migrated before both the partitioning and the tenants (the order of the
//! files), once from one that has the tenants' columns, row-level security and grants
//! already (a database made before the partitioning file existed): they are kept.

use std::borrow::Cow;

use agentd::store::{self, MIGRATOR};
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use uuid::Uuid;

use super::homes;

/// The first migration of partitioned trace tables.
const PARTITIONING: i64 = 20261127010001;

/// A database of its own, migrated by the migrations `applied` keeps.
struct OldDatabase {
    url: String,
    name: String,
    pool: PgPool,
}

impl OldDatabase {
    async fn create(applied: impl Fn(i64) -> bool) -> Self {
        let name = format!("agentd_test_{}", &Uuid::new_v4().simple().to_string()[..12]);
        let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
        store::ensure_database(&url).await.expect("database");
        let pool = store::connect(&url, 2).await.expect("connect");
        let before = Migrator {
            migrations: Cow::Owned(
                MIGRATOR
                    .iter()
                    .filter(|m| applied(m.version))
                    .cloned()
                    .collect(),
            ),
            ..Migrator::DEFAULT
        };
        before.run(&pool).await.expect("the migrations of before");
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

/// Two tasks of two days and an orphan event, written before the partitioning.
struct OldTrace {
    first: Uuid,
    second: Uuid,
    orphan: Uuid,
    tool_call_ids: Vec<i64>,
}

impl OldTrace {
    async fn write(pool: &PgPool) -> Self {
        let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
        old_trace(pool, first, "2026-10-01T10:00:00Z").await;
        old_trace(pool, second, "2026-10-02T23:59:59Z").await;
        let orphan = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO events (task_id, seq, event_id, type, payload) \
             VALUES ($1, 1, gen_random_uuid(), 'task.started', '{}')",
        )
        .bind(orphan)
        .execute(pool)
        .await
        .expect("orphan");
        let tool_call_ids = sqlx::query_scalar("SELECT id FROM tool_calls ORDER BY id")
            .fetch_all(pool)
            .await
            .expect("ids");
        Self {
            first,
            second,
            orphan,
            tool_call_ids,
        }
    }

    /// Every row in its day's partition with its key, the orphan in the default partition,
    /// ids kept, the record readable, the keys unique, the ids going on.
    async fn assert_moved(&self, pool: &PgPool) {
        for (task_id, day) in [(self.first, "20261001"), (self.second, "20261002")] {
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
        assert_eq!(
            homes(pool, "events", self.orphan).await,
            vec!["events_default"]
        );
        let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM tool_calls ORDER BY id")
            .fetch_all(pool)
            .await
            .expect("ids");
        assert_eq!(ids, self.tool_call_ids, "row ids are kept");
        let request: Option<serde_json::Value> =
            sqlx::query_scalar("SELECT request FROM llm_call_bodies WHERE task_id = $1")
                .bind(self.first)
                .fetch_one(pool)
                .await
                .expect("body");
        assert_eq!(request, Some(serde_json::json!({"messages": []})));
        let duplicate = sqlx::query(
            "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
             SELECT $1, 1, gen_random_uuid(), 'task.started', '{}', created_at \
             FROM tasks WHERE task_id = $1",
        )
        .bind(self.first)
        .execute(pool)
        .await;
        assert!(duplicate.is_err(), "(task_id, seq) stays unique");
        let next: i64 = sqlx::query_scalar(
            "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, task_created_at) \
             SELECT $1, gen_random_uuid(), 'call_2', 'calculate', created_at \
             FROM tasks WHERE task_id = $1 RETURNING id",
        )
        .bind(self.second)
        .fetch_one(pool)
        .await
        .expect("new call");
        let last = self.tool_call_ids.iter().max().expect("ids");
        assert!(next > *last, "{next}");
    }
}

#[tokio::test]
async fn the_migration_moves_an_existing_trace_into_partitions() {
    let db = OldDatabase::create(|version| version < PARTITIONING).await;
    let trace = OldTrace::write(&db.pool).await;
    MIGRATOR
        .run(&db.pool)
        .await
        .expect("the partitioning migration, then the later ones");
    trace.assert_moved(&db.pool).await;
    db.remove().await;
}

/// The tables' row-level security and grants, and the tenant of every row, as the tenants'
/// migration left them before the partitioning ran: the reader role still sees its tenant's
/// rows only.
#[tokio::test]
async fn a_database_with_tenants_already_keeps_them_through_the_migration() {
    let db = OldDatabase::create(|version| version != PARTITIONING).await;
    let pool = &db.pool;
    let trace = OldTrace::write(pool).await;
    for table in [
        "tasks",
        "recursions",
        "tool_calls",
        "llm_calls",
        "llm_request_parts",
        "events",
    ] {
        sqlx::query(&format!(
            "UPDATE {table} SET tenant_id = 'acme' WHERE task_id = $1"
        ))
        .bind(trace.first)
        .execute(pool)
        .await
        .expect("tenant");
    }
    MIGRATOR
        .run(pool)
        .await
        .expect("the partitioning migration, after the tenants'");
    trace.assert_moved(pool).await;

    let mut reader = pool.acquire().await.expect("connection");
    sqlx::raw_sql("SET ROLE agentd_reader; SET agentd.tenant = 'acme'")
        .execute(&mut *reader)
        .await
        .expect("as acme's reader");
    for (table, rows) in [("recursions", 1), ("events", 2), ("llm_call_bodies", 1)] {
        let seen: Vec<Uuid> = sqlx::query_scalar(&format!("SELECT task_id FROM {table}"))
            .fetch_all(&mut *reader)
            .await
            .expect("read as agentd_reader");
        assert_eq!(seen, vec![trace.first; rows], "{table}: acme's rows only");
    }
    sqlx::raw_sql("RESET ROLE")
        .execute(&mut *reader)
        .await
        .expect("reset");
    drop(reader);
    db.remove().await;
}
