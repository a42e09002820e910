//! The queries behind `agentd replay` (CONTRACT §10): which ended tasks to run again, and
//! the new task's `pending` row pointing at its original (`forked_from_task_id`,
//! `forked_from_iteration = 0`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

/// An ended task to replay: what its new task copies.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Original {
    pub task_id: Uuid,
    pub agent_id: Uuid,
    pub input: String,
    pub conversation_id: Option<Uuid>,
    pub constraints: Value,
    pub stream: bool,
    pub budget: Option<Value>,
    pub fail_reason: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Which ended tasks to replay.
#[derive(Debug, Clone)]
pub struct Selection<'a> {
    /// completed, failed, cancelled or rejected.
    pub status: &'a str,
    /// Only this `fail_reason` (llm_error, budget, ...).
    pub reason: Option<&'a str>,
    /// Only tasks that ended after this.
    pub since: Option<DateTime<Utc>>,
    /// Also tasks replayed before.
    pub again: bool,
    pub limit: i64,
}

/// The tasks `selection` names, oldest end first. A task without a known agent or input
/// (a message rejected before they could be read) cannot be replayed and is left out, and
/// so is, unless `again`, a task that was replayed already.
pub async fn candidates(pool: &PgPool, selection: &Selection<'_>) -> sqlx::Result<Vec<Original>> {
    sqlx::query_as::<_, Original>(
        "SELECT t.task_id, t.agent_id, t.input, t.conversation_id, t.constraints, t.stream, \
                t.budget, t.fail_reason, t.finished_at \
         FROM tasks t JOIN agents a ON a.agent_id = t.agent_id \
         WHERE t.status = $1 AND ($2::text IS NULL OR t.fail_reason = $2) \
           AND ($3::timestamptz IS NULL OR t.finished_at >= $3) AND t.input IS NOT NULL \
           AND ($4 OR NOT EXISTS (SELECT 1 FROM tasks r WHERE r.forked_from_task_id = t.task_id \
                                  AND r.forked_from_iteration = 0)) \
         ORDER BY t.finished_at, t.task_id LIMIT $5",
    )
    .bind(selection.status)
    .bind(selection.reason)
    .bind(selection.since)
    .bind(selection.again)
    .bind(selection.limit)
    .fetch_all(pool)
    .await
}

/// Those of `task_ids` that have a replay already (read on the primary: a replica may not
/// have the replay made a moment ago yet).
pub async fn replayed_already(
    pool: &PgPool,
    task_ids: &[Uuid],
) -> sqlx::Result<std::collections::HashSet<Uuid>> {
    let replayed: Vec<Uuid> = sqlx::query_scalar(
        "SELECT DISTINCT forked_from_task_id FROM tasks \
         WHERE forked_from_task_id = ANY($1) AND forked_from_iteration = 0",
    )
    .bind(task_ids)
    .fetch_all(pool)
    .await?;
    Ok(replayed.into_iter().collect())
}

/// Records the replay of `original` as the `pending` task `task_id` (its message is
/// published next; if that fails, the reconciler enqueues the row later).
pub async fn record(pool: &PgPool, original: &Original, task_id: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, conversation_id, input, constraints, stream, \
                            budget, forked_from_task_id, forked_from_iteration, tenant_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, \
                 COALESCE((SELECT tenant_id FROM tasks WHERE task_id = $8), 'default'))",
    )
    .bind(task_id)
    .bind(original.agent_id)
    .bind(original.conversation_id)
    .bind(&original.input)
    .bind(&original.constraints)
    .bind(original.stream)
    .bind(&original.budget)
    .bind(original.task_id)
    .execute(pool)
    .await?;
    Ok(())
}
