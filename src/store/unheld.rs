//! Status changes of a task no worker holds (CONTRACT §2, §7): a cancel before any worker
//! took it, an end decided by someone other than its runner (a cancel of a waiting or
//! orphaned task, the delivery limit, an expired approval, a rejection), a `resume` that
//! frees a waiting task, guidance kept for a task nobody runs. Each statement is fenced by
//! the status and the lease, so it never races a live runner.

use sqlx::PgConnection;
use uuid::Uuid;

/// Ends a task that no worker has taken yet: a `pending` row, or no row at all (its message
/// still waits in the queue; a `cancelled` row makes the worker acknowledge it unrun).
/// Returns `Some(agent_id)` when this call ended it, `None` when it had started or ended.
pub async fn cancel_unstarted(
    conn: &mut PgConnection,
    task_id: Uuid,
) -> sqlx::Result<Option<Option<Uuid>>> {
    let row: Option<(Option<Uuid>,)> = sqlx::query_as(
        "INSERT INTO tasks (task_id, status, finished_at) VALUES ($1, 'cancelled', now()) \
         ON CONFLICT (task_id) DO UPDATE \
             SET status = 'cancelled', finished_at = now(), updated_at = now() \
             WHERE tasks.status = 'pending' \
         RETURNING agent_id",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(agent_id,)| agent_id))
}

/// A task ended by someone other than its runner (the delivery limit): what its terminal
/// event needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedUnheld {
    pub agent_id: Option<Uuid>,
    pub iterations: i32,
}

/// How a task no worker holds ends.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// `failed` or `cancelled`.
    pub status: &'static str,
    pub fail_reason: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// Ends a `pending` or `running` task as `ending` says unless a live worker other than
/// `dead_owner` holds its lease. Returns what its terminal event needs when this call
/// ended it.
pub async fn end_unheld(
    conn: &mut PgConnection,
    task_id: Uuid,
    dead_owner: Option<Uuid>,
    ending: Ending<'_>,
) -> sqlx::Result<Option<EndedUnheld>> {
    let row: Option<(Option<Uuid>, i32)> = sqlx::query_as(
        "UPDATE tasks SET status = $3, fail_reason = $4, error = $5, \
                finished_at = now(), updated_at = now(), checkpoint = NULL, \
                lease_owner = NULL, lease_until = NULL \
         WHERE task_id = $1 AND status IN ('pending', 'running', 'waiting') \
           AND (lease_owner IS NULL OR lease_until < now() OR lease_owner = $2) \
         RETURNING agent_id, iterations",
    )
    .bind(task_id)
    .bind(dead_owner)
    .bind(ending.status)
    .bind(ending.fail_reason)
    .bind(ending.error)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(agent_id, iterations)| EndedUnheld {
        agent_id,
        iterations,
    }))
}

/// Frees a task `waiting` for a pause or a budget (a `resume`): it becomes `pending` with
/// the reason and the new budget for the worker that takes it, and the fields of the task
/// message that brings it back are returned. `None`: the task does not wait for that.
pub async fn resume_waiting(
    conn: &mut PgConnection,
    task_id: Uuid,
    budget: Option<&crate::core::budget::Budget>,
) -> sqlx::Result<Option<super::reconcile::Orphan>> {
    sqlx::query_as(
        "UPDATE tasks SET status = 'pending', \
                resume_reason = CASE wait_reason WHEN 'budget' THEN 'budget' ELSE 'resumed' END, \
                wait_reason = NULL, resume_budget = $2, budget = COALESCE($2, budget), \
                updated_at = now() \
         WHERE task_id = $1 AND status = 'waiting' \
           AND wait_reason IN ('paused', 'budget', 'stalled') \
         RETURNING task_id, agent_id, input, conversation_id, constraints, stream, status",
    )
    .bind(task_id)
    .bind(budget.map(sqlx::types::Json))
    .fetch_optional(conn)
    .await
}

/// Keeps guidance for a task nobody holds (waiting, or running under a dead worker's
/// lease): the worker that takes it up again hands it to the machine. Returns the task's
/// agent and recursions, or `None` when the task is held, queued or ended.
pub async fn inject_unheld(
    conn: &mut PgConnection,
    task_id: Uuid,
    text: &str,
    dead_owner: Option<Uuid>,
) -> sqlx::Result<Option<EndedUnheld>> {
    let row: Option<(Option<Uuid>, i32)> = sqlx::query_as(
        "UPDATE tasks SET pending_guidance = COALESCE(pending_guidance, '[]'::jsonb) \
                    || jsonb_build_array($2::text), updated_at = now() \
         WHERE task_id = $1 AND (status = 'waiting' OR (status = 'running' \
               AND (lease_owner IS NULL OR lease_until < now() OR lease_owner = $3))) \
         RETURNING agent_id, iterations",
    )
    .bind(task_id)
    .bind(text)
    .bind(dead_owner)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(agent_id, iterations)| EndedUnheld {
        agent_id,
        iterations,
    }))
}
