//! The `events` table: every progress event of a task, in seq order, so a late subscriber
//! can replay what it missed.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// One stored event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub task_id: Uuid,
    pub seq: i64,
    pub event_id: Uuid,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub payload: Value,
}

/// Inserts a task's events in one statement; `payloads` are JSON texts.
pub async fn insert_many(
    conn: &mut PgConnection,
    task_id: Uuid,
    seqs: &[i64],
    event_ids: &[Uuid],
    types: &[&str],
    payloads: &[&str],
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload) \
         SELECT $1, seq, event_id, type, payload::jsonb \
         FROM UNNEST($2::bigint[], $3::uuid[], $4::text[], $5::text[]) \
              AS batch (seq, event_id, type, payload)",
    )
    .bind(task_id)
    .bind(seqs)
    .bind(event_ids)
    .bind(types)
    .bind(payloads)
    .execute(conn)
    .await?;
    Ok(())
}

/// The highest seq stored for a task (0 when it has none).
pub async fn last_seq(pool: &PgPool, task_id: Uuid) -> sqlx::Result<i64> {
    let seq: Option<i64> = sqlx::query_scalar("SELECT max(seq) FROM events WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(pool)
        .await?;
    Ok(seq.unwrap_or(0))
}

/// A task's events with seq greater than `after`, in order.
pub async fn list_after(pool: &PgPool, task_id: Uuid, after: i64) -> sqlx::Result<Vec<EventRow>> {
    sqlx::query_as::<_, EventRow>(
        "SELECT task_id, seq, event_id, type, payload FROM events \
         WHERE task_id = $1 AND seq > $2 ORDER BY seq",
    )
    .bind(task_id)
    .bind(after)
    .fetch_all(pool)
    .await
}
