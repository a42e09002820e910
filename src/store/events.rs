//! The `events` table: every progress event of a task, in seq order, so a late subscriber
//! can replay what it missed, and so that what was stored and never confirmed by the broker
//! can be published again (the outbox). Every query names the task's partition
//! (`store::partitions`).

use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::step::EventRow;

/// One stored event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRecord {
    pub task_id: Uuid,
    pub seq: i64,
    pub event_id: Uuid,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub payload: Value,
}

/// A stored event as JSON text, ready to be published again.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    pub task_id: Uuid,
    pub seq: i64,
    pub event_id: Uuid,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub payload: String,
}

/// Appends events of a task that no worker holds (a rejection, a cancel before start, a
/// task ended by the delivery limit), in the caller's transaction: the rows, the task's
/// `event_seq`, and its outbox flag until they are confirmed.
pub async fn append(
    conn: &mut PgConnection,
    task_id: Uuid,
    events: &[EventRow<'_>],
) -> sqlx::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "WITH stored AS ( \
             INSERT INTO events (task_id, seq, event_id, type, payload, tenant_id, \
                                 task_created_at) \
             SELECT $1, seq, event_id, type, payload::jsonb, \
                    COALESCE((SELECT tenant_id FROM tasks WHERE task_id = $1), 'default'), \
                    (SELECT created_at FROM tasks WHERE task_id = $1) \
             FROM UNNEST($2::bigint[], $3::uuid[], $4::text[], $5::text[]) \
                  AS batch (seq, event_id, type, payload) \
             RETURNING seq \
         ) \
         UPDATE tasks SET event_seq = GREATEST(event_seq, (SELECT max(seq) FROM stored)), \
                          outbox_pending = true, updated_at = now() \
         WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(events.iter().map(|e| e.seq).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.event_id).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.event_type).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.json).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// The highest seq stored for a task (0 when it has none).
pub async fn last_seq(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<i64> {
    let seq: Option<i64> = sqlx::query_scalar(
        "SELECT max(seq) FROM events WHERE task_id = $1 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1)",
    )
    .bind(task_id)
    .fetch_one(conn)
    .await?;
    Ok(seq.unwrap_or(0))
}

/// A task's stored events with seq greater than `after`, in order, as JSON text.
pub async fn stored_after(
    conn: &mut PgConnection,
    task_id: Uuid,
    after: i64,
) -> sqlx::Result<Vec<StoredEvent>> {
    sqlx::query_as::<_, StoredEvent>(
        "SELECT task_id, seq, event_id, type, payload::text AS payload FROM events \
         WHERE task_id = $1 AND seq > $2 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY seq",
    )
    .bind(task_id)
    .bind(after)
    .fetch_all(conn)
    .await
}

/// A task's events with seq greater than `after`, in order.
pub async fn list_after(
    pool: &PgPool,
    task_id: Uuid,
    after: i64,
) -> sqlx::Result<Vec<EventRecord>> {
    sqlx::query_as::<_, EventRecord>(
        "SELECT task_id, seq, event_id, type, payload FROM events \
         WHERE task_id = $1 AND seq > $2 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY seq",
    )
    .bind(task_id)
    .bind(after)
    .fetch_all(pool)
    .await
}

/// One stored event as the event stream reads it: its seq, type and payload.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventPayload {
    pub seq: i64,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub payload: Value,
}

/// One page of a task's events after `after`, in seq order: at most `max_rows` events and
/// at most `max_bytes` of JSON text (a single larger event comes alone), measured by
/// PostgreSQL, so that a reader of a task with huge events never loads more than a page.
pub async fn page_after(
    pool: &PgPool,
    task_id: Uuid,
    after: i64,
    max_rows: i64,
    max_bytes: i64,
) -> sqlx::Result<Vec<EventPayload>> {
    sqlx::query_as::<_, EventPayload>(
        "SELECT seq, type, payload FROM ( \
             SELECT seq, type, payload, size, sum(size) OVER (ORDER BY seq) AS running \
             FROM (SELECT seq, type, payload, octet_length(payload::text) AS size FROM events \
                   WHERE task_id = $1 AND seq > $2 \
                     AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
                   ORDER BY seq LIMIT $3) AS page \
         ) AS sized \
         WHERE running <= $4 OR running = size \
         ORDER BY seq",
    )
    .bind(task_id)
    .bind(after)
    .bind(max_rows)
    .bind(max_bytes)
    .fetch_all(pool)
    .await
}

/// Whether a task has a stored event after `after`.
pub async fn any_after(pool: &PgPool, task_id: Uuid, after: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM events WHERE task_id = $1 AND seq > $2 \
             AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1))",
    )
    .bind(task_id)
    .bind(after)
    .fetch_one(pool)
    .await
}
