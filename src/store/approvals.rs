//! The `approvals` table (CONTRACT §4, §7): one row per gated tool call, written with the
//! step that makes its task wait; the first decision recorded on a row wins. A decision
//! takes the task's row lock first, so decisions about one task (and a worker claiming it)
//! are serialized: the last gated call decided frees the task, exactly once.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::reconcile::Orphan;
use crate::core::approval::{Decision, DecisionKind};
use crate::core::tenancy::ALL_TENANTS;

/// One row of `approvals`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct ApprovalRow {
    pub task_id: Uuid,
    pub tool_call_id: String,
    /// The recursion whose reply made the call.
    pub trace_id: Uuid,
    pub name: String,
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// read_only, idempotent or side_effect.
    pub effect: Option<String>,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// approve, edit, reject, respond or expired; null while it waits.
    pub decision: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub arguments_edited: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    pub reason: Option<String>,
    pub decided_by: Option<String>,
    /// Who decided as agentd verified it (CONTRACT v3 §15); null when nothing did.
    pub decided_by_verified: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl ApprovalRow {
    /// The recorded decision, if there is one.
    pub fn decision(&self) -> Option<Decision> {
        let kind = DecisionKind::parse(self.decision.as_deref()?)?;
        Some(Decision {
            kind,
            arguments: self.arguments_edited.clone(),
            result: self.result.clone(),
            reason: self.reason.clone(),
            by: self.decided_by.clone(),
        })
    }
}

const COLUMNS: &str = "task_id, tool_call_id, trace_id, name, arguments, effect, requested_at, \
     expires_at, decision, arguments_edited, result, reason, decided_by, decided_by_verified, decided_at";

/// The approval rows of one recursion's calls.
pub async fn of_recursion(pool: &PgPool, trace_id: Uuid) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as::<_, ApprovalRow>(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE trace_id = $1"
    ))
    .bind(trace_id)
    .fetch_all(pool)
    .await
}

/// The requests that wait for a decision (oldest first), of one task or of all.
pub async fn pending(
    pool: &PgPool,
    task_id: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    pending_in(pool, task_id, ALL_TENANTS, limit).await
}

/// [`pending`], of tenant `tenant` only (`*`: of every tenant).
pub async fn pending_in(
    pool: &PgPool,
    task_id: Option<Uuid>,
    tenant: &str,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as::<_, ApprovalRow>(&format!(
        "SELECT {COLUMNS} FROM approvals \
         WHERE decision IS NULL AND ($1::uuid IS NULL OR task_id = $1) \
           AND ($3 = '*' OR tenant_id = $3) \
           AND EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = approvals.task_id \
                       AND t.status = 'waiting') \
         ORDER BY requested_at, task_id, tool_call_id LIMIT $2"
    ))
    .bind(task_id)
    .bind(limit)
    .bind(tenant)
    .fetch_all(pool)
    .await
}

/// The decided requests (newest decision first), of one task or of all, of tenant
/// `tenant` only (`*`: of every tenant).
pub async fn decided_in(
    pool: &PgPool,
    task_id: Option<Uuid>,
    tenant: &str,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as::<_, ApprovalRow>(&format!(
        "SELECT {COLUMNS} FROM approvals \
         WHERE decision IS NOT NULL AND ($1::uuid IS NULL OR task_id = $1) \
           AND ($3 = '*' OR tenant_id = $3) \
         ORDER BY decided_at DESC, task_id, tool_call_id LIMIT $2"
    ))
    .bind(task_id)
    .bind(limit)
    .bind(tenant)
    .fetch_all(pool)
    .await
}

/// What recording a decision did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// The decision is the call's; `resumed`: it was the last one the task waited for, and
    /// the task is `pending` again (its message must be enqueued in the same transaction).
    Decided {
        agent_id: Option<Uuid>,
        iterations: i32,
        resumed: Option<Orphan>,
    },
    /// The call was decided already (the first decision wins): that decision.
    AlreadyDecided(String),
    /// The task does not wait for approvals (it ended, or never asked): its status.
    NotWaiting(String),
    /// No such task or no request for that call.
    NotFound,
}

/// Records `decision` for a gated call of a waiting task, in the caller's transaction (which
/// then stores the `approval.decided` event). `decision` is checked by the caller.
/// `resume`: free the task when this was the last request it waited for.
pub async fn decide(
    conn: &mut PgConnection,
    task_id: Uuid,
    tool_call_id: &str,
    decision: &Decision,
    verified_by: Option<&str>,
    resume: bool,
) -> sqlx::Result<Recorded> {
    let task: Option<(String, Option<String>, Option<Uuid>, i32)> = sqlx::query_as(
        "SELECT status, wait_reason, agent_id, iterations FROM tasks WHERE task_id = $1 \
         FOR UPDATE",
    )
    .bind(task_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((status, wait_reason, agent_id, iterations)) = task else {
        return Ok(Recorded::NotFound);
    };
    let recorded: Option<(Uuid,)> = sqlx::query_as(
        "UPDATE approvals SET decision = $3, arguments_edited = $4, result = $5, reason = $6, \
                decided_by = $7, decided_by_verified = $9, decided_at = now() \
         WHERE task_id = $1 AND tool_call_id = $2 AND decision IS NULL \
           AND $8 = 'waiting' \
         RETURNING trace_id",
    )
    .bind(task_id)
    .bind(tool_call_id)
    .bind(decision.kind.as_str())
    .bind(decision.arguments.as_ref().map(sqlx::types::Json))
    .bind(decision.result.as_ref().map(sqlx::types::Json))
    .bind(decision.reason.as_deref())
    .bind(decision.by.as_deref())
    .bind(status.as_str())
    .bind(verified_by)
    .fetch_optional(&mut *conn)
    .await?;
    if recorded.is_none() {
        let earlier: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT decision FROM approvals WHERE task_id = $1 AND tool_call_id = $2",
        )
        .bind(task_id)
        .bind(tool_call_id)
        .fetch_optional(&mut *conn)
        .await?;
        return Ok(match earlier {
            None => Recorded::NotFound,
            Some((Some(decision),)) => Recorded::AlreadyDecided(decision),
            Some((None,)) => Recorded::NotWaiting(status),
        });
    }
    let resumed = match wait_reason.as_deref() {
        Some("approval") if resume => resume_if_decided(conn, task_id).await?,
        _ => None,
    };
    Ok(Recorded::Decided {
        agent_id,
        iterations,
        resumed,
    })
}

/// Frees a task waiting for approvals once none of its requests waits any more: it becomes
/// `pending` (resume reason `approval`) and the fields of the message that brings it back
/// are returned.
async fn resume_if_decided(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<Option<Orphan>> {
    sqlx::query_as(
        "UPDATE tasks SET status = 'pending', resume_reason = 'approval', wait_reason = NULL, \
                updated_at = now() \
         WHERE task_id = $1 AND status = 'waiting' AND wait_reason = 'approval' \
           AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.task_id = $1 \
                           AND a.decision IS NULL) \
         RETURNING task_id, agent_id, input, conversation_id, constraints, stream, status",
    )
    .bind(task_id)
    .fetch_optional(conn)
    .await
}

/// A request whose time ran out, with what its agent does about it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Expired {
    pub task_id: Uuid,
    pub tool_call_id: String,
    /// The task's agent version's `on_approval_expiry` (null: reject).
    pub on_expiry: Option<String>,
}

/// Up to `limit` expired requests of waiting tasks, their task rows locked (`SKIP LOCKED`:
/// another worker's pass or a decision in progress takes them another time).
pub async fn lock_expired(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<Expired>> {
    sqlx::query_as::<_, Expired>(
        "SELECT a.task_id, a.tool_call_id, \
                COALESCE(v.on_approval_expiry, g.on_approval_expiry) AS on_expiry \
         FROM approvals a \
         JOIN tasks t ON t.task_id = a.task_id AND t.status = 'waiting' \
         LEFT JOIN agents g ON g.agent_id = t.agent_id \
         LEFT JOIN agent_versions v \
             ON v.agent_id = t.agent_id AND v.version = t.agent_version \
         WHERE a.decision IS NULL AND a.expires_at <= now() \
         ORDER BY a.expires_at LIMIT $1 \
         FOR UPDATE OF t SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(conn)
    .await
}
