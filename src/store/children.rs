//! Delegation (CONTRACT §10), the queries: a parent's children (one per `delegate` call,
//! found by the call's id), recording a child, and freeing a parent that waits for children
//! once every one of them ended.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::reconcile::Orphan;
use super::tasks::{TASK_COLUMNS, TaskRow};

/// A child as its parent reads it: its row and the parent's call it answers.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Child {
    pub parent_tool_call_id: Option<String>,
    #[sqlx(flatten)]
    pub task: TaskRow,
}

/// The children of `parent`.
pub async fn of_parent(pool: &PgPool, parent: Uuid) -> sqlx::Result<Vec<Child>> {
    sqlx::query_as::<_, Child>(&format!(
        "SELECT parent_tool_call_id, {TASK_COLUMNS} FROM tasks WHERE parent_task_id = $1 \
         ORDER BY created_at, task_id"
    ))
    .bind(parent)
    .fetch_all(pool)
    .await
}

/// A child to record.
#[derive(Debug, Clone)]
pub struct NewChild<'a> {
    pub task_id: Uuid,
    pub parent_task_id: Uuid,
    pub parent_tool_call_id: &'a str,
    pub agent_id: Uuid,
    pub input: &'a str,
    pub stream: bool,
    pub budget: Option<Value>,
}

/// Records a child `pending` unless the call has one already. Returns the call's child id.
pub async fn record(pool: &PgPool, child: &NewChild<'_>) -> sqlx::Result<Uuid> {
    let inserted: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO tasks (task_id, agent_id, input, stream, budget, parent_task_id, \
                            parent_tool_call_id, root_task_id, tenant_id) \
         SELECT $1, $2, $3, $4, $5, $6, $7, \
                COALESCE((SELECT root_task_id FROM tasks WHERE task_id = $6), $6), \
                COALESCE((SELECT tenant_id FROM tasks WHERE task_id = $6), 'default') \
         ON CONFLICT (parent_task_id, parent_tool_call_id) WHERE parent_task_id IS NOT NULL \
         DO NOTHING RETURNING task_id",
    )
    .bind(child.task_id)
    .bind(child.agent_id)
    .bind(child.input)
    .bind(child.stream)
    .bind(&child.budget)
    .bind(child.parent_task_id)
    .bind(child.parent_tool_call_id)
    .fetch_optional(pool)
    .await?;
    match inserted {
        Some(task_id) => Ok(task_id),
        None => {
            sqlx::query_scalar(
                "SELECT task_id FROM tasks WHERE parent_task_id = $1 AND parent_tool_call_id = $2",
            )
            .bind(child.parent_task_id)
            .bind(child.parent_tool_call_id)
            .fetch_one(pool)
            .await
        }
    }
}

/// The parent of `task_id`, if it was delegated.
pub async fn parent_of(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<Uuid>> {
    let parent: Option<Option<Uuid>> =
        sqlx::query_scalar("SELECT parent_task_id FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_optional(pool)
            .await?;
    Ok(parent.flatten())
}

/// Frees `parent` if it waits for children and none of them runs any more: it becomes
/// `pending` (resume reason `child`) and the fields of its message are returned.
pub async fn free_parent(conn: &mut PgConnection, parent: Uuid) -> sqlx::Result<Option<Orphan>> {
    sqlx::query_as(
        "UPDATE tasks SET status = 'pending', resume_reason = 'child', wait_reason = NULL, \
                updated_at = now() \
         WHERE task_id = $1 AND status = 'waiting' AND wait_reason = 'child' \
           AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_task_id = $1 \
                           AND c.status IN ('pending', 'running', 'waiting')) \
         RETURNING task_id, agent_id, input, conversation_id, constraints, stream, status",
    )
    .bind(parent)
    .fetch_optional(conn)
    .await
}

/// Parents that have waited for children at least `secs` and whose children all ended.
pub async fn idle_parents(
    conn: &mut PgConnection,
    secs: f64,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT p.task_id FROM tasks p \
         WHERE p.status = 'waiting' AND p.wait_reason = 'child' \
           AND p.updated_at < now() - make_interval(secs => $1) \
           AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_task_id = p.task_id \
                           AND c.status IN ('pending', 'running', 'waiting')) \
         LIMIT $2",
    )
    .bind(secs)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The children of `parent` that have not ended.
pub async fn running_children(pool: &PgPool, parent: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT task_id FROM tasks WHERE parent_task_id = $1 \
           AND status IN ('pending', 'running', 'waiting')",
    )
    .bind(parent)
    .fetch_all(pool)
    .await
}
