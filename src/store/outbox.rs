//! The outbox queries: which tasks have events that were stored and never confirmed by the
//! broker while no worker is responsible for publishing them, and marking them confirmed.
//!
//! A task's own runner publishes its events; once nobody runs it (it ended, or its worker
//! died), `tasks.outbox_pending` or an expired lease with `confirmed_seq < event_seq` tells
//! that something may be stranded. Rows are taken with `FOR UPDATE SKIP LOCKED`, so many
//! workers sweep at once without publishing the same task twice at the same moment, and a
//! worker claiming a task waits until its stranded events are out.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// A task with events to publish again: everything after `confirmed_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Stranded {
    pub task_id: Uuid,
    pub confirmed_seq: i64,
}

/// Locks up to `limit` tasks with stranded events, in the caller's transaction: ended (or
/// otherwise unheld) tasks whose outbox flag was set more than `grace_secs` ago (their
/// runner may still be publishing), and running tasks whose lease expired with events not
/// confirmed (their worker died).
pub async fn lock_stranded(
    conn: &mut PgConnection,
    grace_secs: f64,
    limit: i64,
) -> sqlx::Result<Vec<Stranded>> {
    sqlx::query_as::<_, Stranded>(
        "SELECT task_id, confirmed_seq FROM tasks \
         WHERE (outbox_pending AND updated_at < now() - make_interval(secs => $1)) \
            OR (status = 'running' AND confirmed_seq < event_seq \
                AND COALESCE(lease_until < now(), true)) \
         ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(grace_secs)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Locks one task's row if its outbox flag is set (a redelivered message of an ended task);
/// `None` when nothing is pending or another worker holds the row right now.
pub async fn lock_pending(
    conn: &mut PgConnection,
    task_id: Uuid,
) -> sqlx::Result<Option<Stranded>> {
    sqlx::query_as::<_, Stranded>(
        "SELECT task_id, confirmed_seq FROM tasks \
         WHERE task_id = $1 AND outbox_pending FOR UPDATE SKIP LOCKED",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await
}

/// Records that every event of each task up to its seq is confirmed, and clears the outbox
/// flag where nothing newer was stored since.
pub async fn mark_confirmed(
    conn: &mut PgConnection,
    task_ids: &[Uuid],
    seqs: &[i64],
) -> sqlx::Result<()> {
    if task_ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE tasks SET confirmed_seq = GREATEST(tasks.confirmed_seq, done.seq), \
                outbox_pending = tasks.outbox_pending AND tasks.event_seq > done.seq \
         FROM UNNEST($1::uuid[], $2::bigint[]) AS done (task_id, seq) \
         WHERE tasks.task_id = done.task_id",
    )
    .bind(task_ids)
    .bind(seqs)
    .execute(conn)
    .await?;
    Ok(())
}

/// [`mark_confirmed`] on a pooled connection.
pub async fn mark_confirmed_now(
    pool: &PgPool,
    task_ids: &[Uuid],
    seqs: &[i64],
) -> sqlx::Result<()> {
    let mut conn = pool.acquire().await?;
    mark_confirmed(&mut conn, task_ids, seqs).await
}
