//! `operator_actions` (CONTRACT §14): a person's resolve of a call whose outcome is unknown,
//! held for them (`agents.on_unknown` = `hold`, the task `waiting`, reason
//! `unknown_outcome`). The first resolution of a call wins (a unique index); a resolution
//! takes the task's row lock first, so the one that resolves the last held call frees the
//! task exactly once.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::reconcile::Orphan;
use crate::core::unknown::Resolution;

/// What recording a resolution did.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// Recorded as `action_id`; `resumed`: it was the last held call and the task is
    /// `pending` again (its message must be enqueued in the same transaction).
    Recorded {
        action_id: Uuid,
        agent_id: Option<Uuid>,
        iterations: i32,
        resumed: Option<Orphan>,
    },
    /// The call was resolved already (the first resolution wins): that outcome.
    AlreadyResolved(String),
    /// The task does not wait for a resolution (its status and wait reason).
    NotWaiting(String),
    /// No such task, or no held call with that id.
    NotFound,
}

/// Records `resolution` (checked and made storable by the caller) for a held call, in the
/// caller's transaction (which then stores `tool.resolved`).
pub async fn resolve(
    conn: &mut PgConnection,
    task_id: Uuid,
    tool_call_id: &str,
    resolution: &Resolution,
    verified_by: Option<&str>,
) -> sqlx::Result<Resolved> {
    let task: Option<(String, Option<String>, Option<Uuid>, i32)> = sqlx::query_as(
        "SELECT status, wait_reason, agent_id, iterations FROM tasks WHERE task_id = $1 \
         FOR UPDATE",
    )
    .bind(task_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((status, wait_reason, agent_id, iterations)) = task else {
        return Ok(Resolved::NotFound);
    };
    let earlier: Option<(String,)> = sqlx::query_as(
        "SELECT action FROM operator_actions WHERE task_id = $1 AND tool_call_id = $2",
    )
    .bind(task_id)
    .bind(tool_call_id)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some((action,)) = earlier {
        return Ok(Resolved::AlreadyResolved(action));
    }
    let held: Option<(i32,)> = sqlx::query_as(
        "SELECT 1 FROM tool_calls WHERE task_id = $1 AND tool_call_id = $2 \
           AND state = 'unknown' AND success IS NULL \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1)",
    )
    .bind(task_id)
    .bind(tool_call_id)
    .fetch_optional(&mut *conn)
    .await?;
    if held.is_none() {
        return Ok(Resolved::NotFound);
    }
    if status != "waiting" || wait_reason.as_deref() != Some("unknown_outcome") {
        let reason = wait_reason.map(|r| format!(" ({r})")).unwrap_or_default();
        return Ok(Resolved::NotWaiting(format!("{status}{reason}")));
    }
    let action_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO operator_actions (action_id, task_id, tool_call_id, action, payload, \
                                       reason, by, verified_by, tenant_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                 COALESCE((SELECT tenant_id FROM tasks WHERE task_id = $2), 'default'))",
    )
    .bind(action_id)
    .bind(task_id)
    .bind(tool_call_id)
    .bind(resolution.outcome.as_str())
    .bind(sqlx::types::Json(resolution.payload()))
    .bind(&resolution.reason)
    .bind(resolution.by.as_deref())
    .bind(verified_by)
    .execute(&mut *conn)
    .await?;
    let resumed = resume_if_resolved(conn, task_id).await?;
    Ok(Resolved::Recorded {
        action_id,
        agent_id,
        iterations,
        resumed,
    })
}

/// Frees a task held for unknown outcomes once every held call is resolved: it becomes
/// `pending` (resume reason `resolved`) and the fields of its message are returned.
async fn resume_if_resolved(
    conn: &mut PgConnection,
    task_id: Uuid,
) -> sqlx::Result<Option<Orphan>> {
    sqlx::query_as(
        "UPDATE tasks SET status = 'pending', resume_reason = 'resolved', wait_reason = NULL, \
                updated_at = now() \
         WHERE task_id = $1 AND status = 'waiting' AND wait_reason = 'unknown_outcome' \
           AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.task_id = $1 \
                           AND c.task_created_at = tasks.created_at \
                           AND c.state = 'unknown' AND c.success IS NULL \
                           AND NOT EXISTS (SELECT 1 FROM operator_actions o \
                                           WHERE o.task_id = c.task_id \
                                             AND o.tool_call_id = c.tool_call_id)) \
         RETURNING task_id, agent_id, input, conversation_id, constraints, stream, status",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await
}

/// The resolutions recorded for a task's calls, by tool_call_id.
pub async fn of_task(pool: &PgPool, task_id: Uuid) -> sqlx::Result<HashMap<String, Resolution>> {
    let rows: Vec<(String, String, Value, String, Option<String>)> = sqlx::query_as(
        "SELECT tool_call_id, action, payload, reason, by FROM operator_actions \
         WHERE task_id = $1 AND tool_call_id IS NOT NULL",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, action, payload, reason, by)| {
            Resolution::from_row(&action, &payload, &reason, by.as_deref()).map(|r| (id, r))
        })
        .collect())
}

/// A held call waiting for a person (`GET /v1/tool_calls?state=unknown`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct HeldCall {
    pub task_id: Uuid,
    pub tool_call_id: String,
    pub trace_id: Uuid,
    pub name: String,
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    pub effect: Option<String>,
    pub idempotency_key: Option<String>,
    pub state: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
}

/// Up to `limit` calls whose outcome is unknown and that wait for a person, oldest first,
/// of one task or of all.
pub async fn held(pool: &PgPool, task_id: Option<Uuid>, limit: i64) -> sqlx::Result<Vec<HeldCall>> {
    held_in(pool, task_id, crate::core::tenancy::ALL_TENANTS, limit).await
}

/// [`held`], of tenant `tenant` only (`*`: of every tenant).
pub async fn held_in(
    pool: &PgPool,
    task_id: Option<Uuid>,
    tenant: &str,
    limit: i64,
) -> sqlx::Result<Vec<HeldCall>> {
    sqlx::query_as::<_, HeldCall>(
        "SELECT c.task_id, c.tool_call_id, c.trace_id, c.name, c.arguments, c.effect, \
                c.idempotency_key, c.state, c.started_at \
         FROM tool_calls c \
         JOIN tasks t ON t.task_id = c.task_id AND t.created_at = c.task_created_at \
         WHERE c.state = 'unknown' AND c.success IS NULL \
           AND t.status = 'waiting' AND t.wait_reason = 'unknown_outcome' \
           AND ($1::uuid IS NULL OR c.task_id = $1) \
           AND ($3 = '*' OR t.tenant_id = $3) \
           AND NOT EXISTS (SELECT 1 FROM operator_actions o WHERE o.task_id = c.task_id \
                           AND o.tool_call_id = c.tool_call_id) \
         ORDER BY c.started_at, c.task_id, c.tool_call_id LIMIT $2",
    )
    .bind(task_id)
    .bind(limit)
    .bind(tenant)
    .fetch_all(pool)
    .await
}
