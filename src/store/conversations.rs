//! One task at a time per conversation (CONTRACT §10): the queries that admit a new turn
//! or park it, and that free the next parked turn once the conversation is idle. Every one
//! of them runs under the conversation's advisory lock, so two workers never both see an
//! idle conversation.

use sqlx::PgConnection;
use uuid::Uuid;

use super::reconcile::Orphan;

/// Takes the conversation's advisory lock until the end of the caller's transaction.
pub async fn lock(conn: &mut PgConnection, conversation_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7))")
        .bind(conversation_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Another task of the conversation that holds it: running, waiting for anything but its
/// turn, or freed and about to run.
pub async fn active_other(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    task_id: Uuid,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "SELECT task_id FROM tasks \
         WHERE conversation_id = $1 AND task_id <> $2 \
           AND (status = 'running' \
                OR (status = 'waiting' AND wait_reason IS DISTINCT FROM 'conversation') \
                OR (status = 'pending' AND resume_reason IS NOT NULL)) \
         LIMIT 1",
    )
    .bind(conversation_id)
    .bind(task_id)
    .fetch_optional(conn)
    .await
}

/// Parks a task its worker holds until the conversation is free: `waiting`, reason
/// `conversation`, lease released. Returns its agent, or `None` when `owner` no longer holds it.
pub async fn park(
    conn: &mut PgConnection,
    task_id: Uuid,
    owner: Uuid,
) -> sqlx::Result<Option<Option<Uuid>>> {
    sqlx::query_scalar(
        "UPDATE tasks SET status = 'waiting', wait_reason = 'conversation', lease_owner = NULL, \
                lease_until = NULL, updated_at = now() \
         WHERE task_id = $1 AND lease_owner = $2 AND status = 'running' \
         RETURNING agent_id",
    )
    .bind(task_id)
    .bind(owner)
    .fetch_optional(conn)
    .await
}

/// Frees the conversation's oldest parked turn when nothing else holds it: it becomes
/// `pending` (resume reason `conversation`) and the fields of its message are returned.
pub async fn free_next(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Option<Orphan>> {
    if active_other(conn, conversation_id, Uuid::nil())
        .await?
        .is_some()
    {
        return Ok(None);
    }
    sqlx::query_as(
        "UPDATE tasks SET status = 'pending', wait_reason = NULL, \
                resume_reason = 'conversation', updated_at = now() \
         WHERE task_id = (SELECT task_id FROM tasks \
                          WHERE conversation_id = $1 AND status = 'waiting' \
                            AND wait_reason = 'conversation' \
                          ORDER BY created_at, task_id LIMIT 1) \
         RETURNING task_id, agent_id, input, conversation_id, constraints, stream, status",
    )
    .bind(conversation_id)
    .fetch_optional(conn)
    .await
}

/// Conversations with a parked turn that has waited at least `secs` (the sweep frees them
/// if their running turn ended without doing so, e.g. its worker died).
pub async fn with_parked(
    conn: &mut PgConnection,
    secs: f64,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT DISTINCT conversation_id FROM tasks \
         WHERE status = 'waiting' AND wait_reason = 'conversation' \
           AND updated_at < now() - make_interval(secs => $1) \
         LIMIT $2",
    )
    .bind(secs)
    .bind(limit)
    .fetch_all(conn)
    .await
}
