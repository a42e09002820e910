//! The `tasks` table: one row per task, from intake to its terminal status.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::agents::Agent;
pub use super::claim::{Claim, ResumePoint, claim};
use super::replies::ReplyRoute;
use crate::core::fair_share::Priority;

/// A task's status as stored (`tasks.status`).
pub mod status {
    pub const PENDING: &str = "pending";
    pub const RUNNING: &str = "running";
    pub const WAITING: &str = "waiting";
    pub const COMPLETED: &str = "completed";
    pub const FAILED: &str = "failed";
    pub const CANCELLED: &str = "cancelled";
    pub const REJECTED: &str = "rejected";

    /// Whether a status is final.
    pub fn is_terminal(status: &str) -> bool {
        matches!(status, COMPLETED | FAILED | CANCELLED | REJECTED)
    }
}

/// The fields of a new task row.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub task_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub conversation_id: Option<Uuid>,
    pub input: Option<&'a str>,
    pub constraints: &'a [String],
    pub stream: bool,
    /// Where the producer wants the terminal event (CONTRACT §9).
    pub reply: Option<&'a ReplyRoute>,
    /// When the task's message reached the worker that records it: its `created_at`, which
    /// places a conversation turn (`store::conversations`). `None`: now.
    pub received_at: Option<DateTime<Utc>>,
    /// The tenant the message or its producer names (CONTRACT v3 §15); `None`: its
    /// agent's (`default` for a row without one).
    pub tenant_id: Option<&'a str>,
    /// Its place within its tenant's waiting tasks.
    pub priority: Priority,
    /// The ended task it reruns, and how (CONTRACT v3 §13): `tasks.rerun_of`,
    /// `rerun_llm`, `rerun_tools`, written with the row so every continuation reruns alike.
    pub rerun: Option<crate::core::rerun::RerunSpec>,
}

/// One row of `tasks`.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct TaskRow {
    pub task_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub conversation_id: Option<Uuid>,
    pub input: Option<String>,
    pub status: String,
    pub iterations: i32,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub fail_reason: Option<String>,
    pub plan: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Why a waiting task waits (paused, budget, approval).
    pub wait_reason: Option<String>,
    /// Summed over every LLM attempt; cost_usd is null when the model has no price.
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: Option<f64>,
    pub tool_call_count: i64,
    /// The task this one was forked or replayed from, and the recursion it starts from
    /// (0 for a replay).
    pub forked_from_task_id: Option<Uuid>,
    pub forked_from_iteration: Option<i32>,
    /// The task that delegated this one, and the root of its tree (CONTRACT §10).
    pub parent_task_id: Option<Uuid>,
    pub root_task_id: Option<Uuid>,
    /// The schedule whose fire made this task, and the fire's time (CONTRACT v3 §14).
    pub schedule_id: Option<Uuid>,
    pub fire_at: Option<DateTime<Utc>>,
    /// The agent version the task is pinned to (CONTRACT v3 §11); null until it starts.
    pub agent_version: Option<i32>,
    /// The tenant it belongs to, and its priority within it (CONTRACT v3 §15).
    pub tenant_id: String,
    pub priority: String,
}

/// The columns of [`TaskRow`], in its order (every query that reads task rows selects these).
pub const TASK_COLUMNS: &str = "task_id, agent_id, conversation_id, input, status, iterations, \
     answer, error, fail_reason, plan, created_at, started_at, finished_at, wait_reason, \
     prompt_tokens, completion_tokens, cost_usd, tool_call_count, forked_from_task_id, \
     forked_from_iteration, parent_task_id, root_task_id, schedule_id, fire_at, agent_version, \
     tenant_id, priority";

/// Inserts the task as `pending` unless a row with its id exists. Returns whether it was new.
pub async fn insert_pending(pool: &PgPool, task: &NewTask<'_>) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, conversation_id, input, constraints, stream, \
                            reply_to, correlation_id, tenant_id, priority) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                 COALESCE($9, (SELECT tenant_id FROM agents WHERE agent_id = $2), 'default'), \
                 $10) \
         ON CONFLICT (task_id) DO NOTHING",
    )
    .bind(task.task_id)
    .bind(task.agent_id)
    .bind(task.conversation_id)
    .bind(task.input)
    .bind(sqlx::types::Json(task.constraints))
    .bind(task.stream)
    .bind(task.reply.map(|r| r.reply_to.as_str()))
    .bind(task.reply.and_then(|r| r.correlation_id.as_deref()))
    .bind(task.tenant_id)
    .bind(task.priority.as_str())
    .execute(pool)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// A task message's agent, and whether its task was new (and is now taken).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Intake {
    #[sqlx(flatten)]
    pub agent: Agent,
    /// True: the task had no row; it is now recorded `running` under the caller's lease
    /// (or, when `limited`, `waiting` for its tenant's admission, without a lease).
    /// False: a row existed (recorded by a producer, or a redelivery): claim it.
    pub inserted: bool,
    /// Whether the agent's tenant is held to `tenants.max_running` (CONTRACT v3 §15): its
    /// tasks start only through admission (`worker::admission`).
    pub limited: bool,
    /// The tenant of the task's row when one existed with an agent (recorded by a
    /// producer, or a redelivery); `None` for a new task.
    pub row_tenant: Option<String>,
}

/// Looks up the task's agent at its stable version and, when it exists and the task has no
/// row yet, records the task already `running` under `owner`'s lease, pinned to that
/// version: the common start in one statement. A row that exists keeps the version it was
/// pinned to (the agent is read at that one); one recorded before its version was chosen
/// (by a producer, a fork, a parked turn) is pinned now. `None`: no such agent or version
/// (nothing is written).
pub async fn take_new(
    pool: &PgPool,
    task: &NewTask<'_>,
    agent_id: Uuid,
    owner: Uuid,
    lease_secs: f64,
    budget: Option<&crate::core::budget::Budget>,
) -> sqlx::Result<Option<Intake>> {
    take_at(pool, task, (agent_id, None), owner, lease_secs, budget).await
}

/// [`take_new`] at the version chosen for the task (`None`: its agent's stable version).
pub async fn take_at(
    pool: &PgPool,
    task: &NewTask<'_>,
    (agent_id, version): (Uuid, Option<i32>),
    owner: Uuid,
    lease_secs: f64,
    budget: Option<&crate::core::budget::Budget>,
) -> sqlx::Result<Option<Intake>> {
    sqlx::query_as::<_, Intake>(&format!(
        "WITH pinned AS ( \
             SELECT COALESCE((SELECT agent_version FROM tasks WHERE task_id = $1), $13, \
                             (SELECT version FROM agent_channels \
                              WHERE agent_id = $2 AND channel = 'stable')) AS version \
         ), agent AS ( \
             SELECT {} FROM agents a \
             JOIN agent_versions v ON v.agent_id = a.agent_id \
                                  AND v.version = (SELECT version FROM pinned) \
             WHERE a.agent_id = $2 \
         ), gate AS ( \
             SELECT EXISTS (SELECT 1 FROM tenants t, agent \
                            WHERE t.tenant_id = agent.tenant_id \
                              AND t.max_running IS NOT NULL) AS limited \
         ), pin AS ( \
             UPDATE tasks SET agent_version = (SELECT version FROM agent) \
             WHERE task_id = $1 AND agent_version IS NULL \
               AND EXISTS (SELECT 1 FROM agent) \
         ), inserted AS ( \
             INSERT INTO tasks (task_id, agent_id, conversation_id, input, constraints, \
                                stream, status, started_at, lease_owner, lease_until, budget, \
                                reply_to, correlation_id, created_at, agent_version, tenant_id, \
                                priority, wait_reason, rerun_of, rerun_llm, rerun_tools) \
             SELECT $1, agent.agent_id, $3, $4, $5, $6, \
                    CASE WHEN gate.limited THEN 'waiting' ELSE 'running' END, \
                    CASE WHEN gate.limited THEN NULL ELSE now() END, \
                    CASE WHEN gate.limited THEN NULL ELSE $7 END, \
                    CASE WHEN gate.limited THEN NULL \
                         ELSE now() + make_interval(secs => $8) END, \
                    COALESCE($9, agent.budget), $10, $11, COALESCE($12, now()), agent.version, \
                    agent.tenant_id, $15, \
                    CASE WHEN gate.limited THEN 'tenant_limit' END, $16, $17, $18 \
             FROM agent, gate \
             WHERE $14::text IS NULL OR $14 = agent.tenant_id \
             ON CONFLICT (task_id) DO NOTHING \
             RETURNING task_id \
         ) \
         SELECT agent.*, EXISTS (SELECT 1 FROM inserted) AS inserted, gate.limited, \
                (SELECT tenant_id FROM tasks WHERE task_id = $1 AND agent_id IS NOT NULL) \
                    AS row_tenant \
         FROM agent, gate",
        super::agents::pinned_columns()
    ))
    .bind(task.task_id)
    .bind(agent_id)
    .bind(task.conversation_id)
    .bind(task.input)
    .bind(sqlx::types::Json(task.constraints))
    .bind(task.stream)
    .bind(owner)
    .bind(lease_secs)
    .bind(budget.map(sqlx::types::Json))
    .bind(task.reply.map(|r| r.reply_to.as_str()))
    .bind(task.reply.and_then(|r| r.correlation_id.as_deref()))
    .bind(task.received_at)
    .bind(version)
    .bind(task.tenant_id)
    .bind(task.priority.as_str())
    .bind(task.rerun.map(|r| r.source_task_id))
    .bind(task.rerun.map(|r| r.llm.as_str()))
    .bind(task.rerun.map(|r| r.tools.as_str()))
    .fetch_optional(pool)
    .await
}

/// Who a stored task belongs to: its agent and where its reply goes (CONTRACT §9), for
/// comparing a message that names the task's id with the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `None` for a row recorded before its agent was known (a cancel's tombstone).
    pub agent_id: Option<Uuid>,
    pub reply: Option<ReplyRoute>,
}

/// The agent and reply route of `task_id`'s row, `None` when it has none.
pub async fn origin(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<Origin>> {
    let row: Option<(Option<Uuid>, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT agent_id, reply_to, correlation_id FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(agent_id, reply_to, correlation_id)| Origin {
        agent_id,
        reply: reply_to.map(|reply_to| ReplyRoute {
            reply_to,
            correlation_id,
        }),
    }))
}

/// Records the task as `rejected` with `reason`: a new row, or a row still `pending` (a
/// producer such as the gateway recorded it before the worker read the message). Returns
/// whether this call ended it; a task that started or ended is left alone.
pub async fn insert_rejected(
    conn: &mut PgConnection,
    task: &NewTask<'_>,
    reason: &str,
) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, conversation_id, input, constraints, stream, \
                            status, error, fail_reason, finished_at, reply_to, correlation_id, \
                            tenant_id, priority) \
         VALUES ($1, $2, $3, $4, $5, $6, 'rejected', $7, 'rejected', now(), $8, $9, \
                 COALESCE($10, (SELECT tenant_id FROM agents WHERE agent_id = $2), 'default'), \
                 $11) \
         ON CONFLICT (task_id) DO UPDATE \
             SET status = 'rejected', error = $7, fail_reason = 'rejected', \
                 finished_at = now(), updated_at = now(), \
                 reply_to = COALESCE(tasks.reply_to, $8), \
                 correlation_id = CASE WHEN tasks.reply_to IS NULL THEN $9 \
                                       ELSE tasks.correlation_id END \
             WHERE tasks.status = 'pending'",
    )
    .bind(task.task_id)
    .bind(task.agent_id)
    .bind(task.conversation_id)
    .bind(task.input)
    .bind(sqlx::types::Json(task.constraints))
    .bind(task.stream)
    .bind(reason)
    .bind(task.reply.map(|r| r.reply_to.as_str()))
    .bind(task.reply.and_then(|r| r.correlation_id.as_deref()))
    .bind(task.tenant_id)
    .bind(task.priority.as_str())
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Renews the lease. Returns false when `owner` no longer holds the task.
pub async fn renew_lease(
    pool: &PgPool,
    task_id: Uuid,
    owner: Uuid,
    lease_secs: f64,
) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "UPDATE tasks SET lease_until = now() + make_interval(secs => $3) \
         WHERE task_id = $1 AND lease_owner = $2 AND status = 'running'",
    )
    .bind(task_id)
    .bind(owner)
    .bind(lease_secs)
    .execute(pool)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Gives the lease up (shutdown): the task stays `running` and whoever receives its
/// redelivered message resumes it at once. `confirmed_seq`: the events known confirmed.
pub async fn release_lease(
    pool: &PgPool,
    task_id: Uuid,
    owner: Uuid,
    confirmed_seq: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE tasks SET lease_owner = NULL, lease_until = NULL, \
                confirmed_seq = GREATEST(confirmed_seq, $3) \
         WHERE task_id = $1 AND lease_owner = $2",
    )
    .bind(task_id)
    .bind(owner)
    .bind(confirmed_seq)
    .execute(pool)
    .await?;
    Ok(())
}

/// Reads one task.
pub async fn get(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<TaskRow>> {
    sqlx::query_as::<_, TaskRow>(&format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1"
    ))
    .bind(task_id)
    .fetch_optional(pool)
    .await
}

/// The earlier turns of a conversation: its other tasks of `agent_id` that ended (rejected
/// ones aside), the `limit` that ended last, in the order they ended. Turns run one at a
/// time (`conversation_policy`), so these are the turns that ran before this one. Another
/// agent's task never shows (a conversation belongs to one agent: `store::conversations`).
pub async fn conversation_turns(
    pool: &PgPool,
    conversation_id: Uuid,
    task_id: Uuid,
    agent_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<crate::core::machine::ConversationTurn>> {
    let rows: Vec<(Uuid, Option<String>, Option<String>, String)> = sqlx::query_as(
        "SELECT task_id, input, answer, status FROM ( \
             SELECT task_id, input, answer, status, finished_at FROM tasks \
             WHERE conversation_id = $1 AND task_id <> $2 AND finished_at IS NOT NULL \
               AND status <> 'rejected' AND agent_id = $4 \
             ORDER BY finished_at DESC LIMIT $3) AS recent \
         ORDER BY finished_at",
    )
    .bind(conversation_id)
    .bind(task_id)
    .bind(limit)
    .bind(agent_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(task_id, input, answer, status)| crate::core::machine::ConversationTurn {
                task_id,
                input: input.unwrap_or_default(),
                answer,
                status,
            },
        )
        .collect())
}

/// An agent's history, oldest first (CONTRACT §4's second query).
pub async fn list_for_agent(
    pool: &PgPool,
    agent_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<TaskRow>> {
    sqlx::query_as::<_, TaskRow>(&format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE agent_id = $1 ORDER BY created_at LIMIT $2"
    ))
    .bind(agent_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The lease holder of a running task (`None` when nobody holds it or it is not running).
pub async fn holder(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<Uuid>> {
    let owner: Option<Option<Uuid>> = sqlx::query_scalar(
        "SELECT lease_owner FROM tasks WHERE task_id = $1 AND status = 'running' \
           AND lease_until > now()",
    )
    .bind(task_id)
    .fetch_optional(pool)
    .await?;
    Ok(owner.flatten())
}
