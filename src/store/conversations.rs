//! One task at a time per conversation, in the order the turns were recorded (CONTRACT §10):
//! the queries that admit a new turn or park it, and that free the next parked turn once
//! the conversation is idle. Every one of them runs under the conversation's advisory lock,
//! so two workers never both see an idle conversation.
//!
//! A turn's place is `(tasks.created_at, tasks.recorded_seq)`, fixed when its row is first
//! inserted: by a producer that records the turn before publishing it (the gateway, the
//! CLI, [`record_turn`]; `created_at` is then PostgreSQL's transaction time), else by the
//! worker that reads its message (`created_at` is then when the message reached that
//! worker, and the turn waits `worker.turn_settle_ms` before admission so that a turn that
//! reached another worker just before it is recorded first). `recorded_seq`, from a
//! sequence, breaks ties. A turn runs only when no earlier turn is unended (pending,
//! running or waiting) and no other turn holds the conversation; a claimed turn holds it
//! only once admitted (`tasks.admitted_at`).
//!
//! A conversation belongs to one agent and one tenant (CONTRACT v3 §15), recorded in
//! `conversations` by its first admitted turn ([`claim_owner`]); a turn of another agent or
//! tenant is rejected before it sees anything of it.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::reconcile::Orphan;
use super::tasks::NewTask;

/// Takes the conversation's advisory lock until the end of the caller's transaction.
pub async fn lock(conn: &mut PgConnection, conversation_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7))")
        .bind(conversation_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// A task of the conversation that holds it: admitted and running, waiting for anything
/// but its turn, or freed (or resumed) and about to run. SQL over `tasks` aliased `t`.
const HOLDS: &str = "((t.status = 'running' AND t.admitted_at IS NOT NULL) \
     OR (t.status = 'waiting' AND t.wait_reason IS DISTINCT FROM 'conversation') \
     OR (t.status = 'pending' AND t.resume_reason IS NOT NULL))";

/// Unended: pending, running or waiting.
const UNENDED: &str = "t.status IN ('pending', 'running', 'waiting')";

/// What keeps `task_id` from running now: another task that holds the conversation, or an
/// earlier turn that has not ended. `None`: the turn may run.
pub async fn blocker(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    task_id: Uuid,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(&format!(
        "SELECT t.task_id FROM tasks t \
         WHERE t.conversation_id = $1 AND t.task_id <> $2 \
           AND ({HOLDS} \
                OR ({UNENDED} AND (t.created_at, t.recorded_seq) < \
                    (SELECT created_at, recorded_seq FROM tasks WHERE task_id = $2))) \
         ORDER BY t.created_at, t.recorded_seq LIMIT 1"
    ))
    .bind(conversation_id)
    .bind(task_id)
    .fetch_optional(conn)
    .await
}

/// Who a conversation belongs to: the agent and tenant of its first admitted turn.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Owner {
    pub agent_id: Uuid,
    pub tenant_id: String,
}

/// Makes `agent_id` and `tenant_id` the conversation's owner unless it has one, and returns
/// its owner. Under the conversation's lock.
pub async fn claim_owner(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    agent_id: Uuid,
    tenant_id: &str,
) -> sqlx::Result<Owner> {
    sqlx::query_as(
        "WITH claimed AS ( \
             INSERT INTO conversations (conversation_id, agent_id, tenant_id) \
             VALUES ($1, $2, $3) ON CONFLICT (conversation_id) DO NOTHING \
             RETURNING agent_id, tenant_id) \
         SELECT agent_id, tenant_id FROM claimed \
         UNION ALL \
         SELECT agent_id, tenant_id FROM conversations WHERE conversation_id = $1 \
         LIMIT 1",
    )
    .bind(conversation_id)
    .bind(agent_id)
    .bind(tenant_id)
    .fetch_one(conn)
    .await
}

/// The owner of a conversation, `None` when no turn of it was admitted yet.
pub async fn owner(pool: &PgPool, conversation_id: Uuid) -> sqlx::Result<Option<Owner>> {
    sqlx::query_as("SELECT agent_id, tenant_id FROM conversations WHERE conversation_id = $1")
        .bind(conversation_id)
        .fetch_optional(pool)
        .await
}

/// Whether the turn was admitted already (a task resumed after its worker died).
pub async fn admitted(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<bool> {
    let at: Option<Option<chrono::DateTime<chrono::Utc>>> =
        sqlx::query_scalar("SELECT admitted_at FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_optional(conn)
            .await?;
    Ok(at.flatten().is_some())
}

/// Marks the turn admitted: from now on it holds its conversation until it ends.
pub async fn admit(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE tasks SET admitted_at = now() WHERE task_id = $1")
        .bind(task_id)
        .execute(conn)
        .await?;
    Ok(())
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

/// Frees the conversation's next turn when nothing holds the conversation and its earliest
/// unended turn is parked: it becomes `pending` (resume reason `conversation`) and the
/// fields of its message are returned. An earliest turn that is pending or claimed is left
/// alone: its own message runs it.
pub async fn free_next(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Option<Orphan>> {
    sqlx::query_as(&format!(
        "UPDATE tasks SET status = 'pending', wait_reason = NULL, \
                resume_reason = 'conversation', updated_at = now() \
         WHERE task_id = (SELECT t.task_id FROM tasks t \
                          WHERE t.conversation_id = $1 AND {UNENDED} \
                          ORDER BY t.created_at, t.recorded_seq, t.task_id \
                          LIMIT 1) \
           AND status = 'waiting' AND wait_reason = 'conversation' \
           AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.conversation_id = $1 AND {HOLDS}) \
         RETURNING task_id, agent_id, input, conversation_id, constraints, stream, status"
    ))
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

/// Records a turn as `pending` before its message is published, which fixes its place in
/// the conversation (what the gateway and `agentd submit` do). Returns whether it was new.
pub async fn record_turn(pool: &PgPool, turn: &NewTask<'_>) -> sqlx::Result<bool> {
    super::tasks::insert_pending(pool, turn).await
}

/// Removes a turn recorded by [`record_turn`] whose message could not be published, so
/// that it does not hold up the turns after it. A turn a worker took meanwhile (the
/// message was published after all) is left alone.
pub async fn withdraw_turn(pool: &PgPool, task_id: Uuid) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "DELETE FROM tasks WHERE task_id = $1 AND status = 'pending' AND resume_reason IS NULL \
           AND NOT EXISTS (SELECT 1 FROM events WHERE events.task_id = $1 \
                           AND events.task_created_at = tasks.created_at)",
    )
    .bind(task_id)
    .execute(pool)
    .await?;
    Ok(result.rows_affected() == 1)
}
