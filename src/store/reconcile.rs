//! The reconciler's queries: tasks that nobody works on and no message will bring back
//! (their worker died and their message is gone), found and re-enqueued at most once per
//! `orphan_after_secs`. One worker at a time reconciles, under an advisory lock.

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// The advisory lock key of the reconciler ("agentd-r" in ASCII).
const RECONCILER_LOCK: i64 = 0x6167_656e_7464_2d72;

/// What a re-enqueued task message is rebuilt from.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Orphan {
    pub task_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub input: Option<String>,
    pub conversation_id: Option<Uuid>,
    pub constraints: Value,
    pub stream: bool,
    pub status: String,
    /// The budget the task's message carried (`tasks.budget`), when the query reads it: a
    /// re-enqueued message that did not carry it would run under the agent's.
    #[sqlx(default)]
    pub budget: Option<Value>,
}

/// Takes the reconciler's lock for the caller's transaction; false when another worker
/// reconciles right now.
pub async fn try_lock(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(RECONCILER_LOCK)
        .fetch_one(conn)
        .await
}

/// The orphans, marked so that they are not found again for another `orphan_after_secs`:
/// `running` tasks whose lease expired (or was released) that long ago, and `pending` tasks
/// untouched that long. Their new message makes the next claim resume them; a duplicate
/// message is harmless (the task id is the idempotency key, the lease the runner's fence).
pub async fn take_orphans(
    conn: &mut PgConnection,
    orphan_after_secs: f64,
    limit: i64,
) -> sqlx::Result<Vec<Orphan>> {
    sqlx::query_as::<_, Orphan>(
        "WITH found AS ( \
             SELECT task_id FROM tasks \
             WHERE (status = 'running' \
                    AND COALESCE(lease_until, updated_at) \
                        < now() - make_interval(secs => $1)) \
                OR (status = 'pending' AND updated_at < now() - make_interval(secs => $1)) \
             ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED \
         ) \
         UPDATE tasks SET updated_at = now(), \
                lease_until = CASE WHEN status = 'running' THEN now() ELSE lease_until END \
         FROM found WHERE tasks.task_id = found.task_id \
         RETURNING tasks.task_id, agent_id, input, conversation_id, constraints, stream, \
                   status, budget",
    )
    .bind(orphan_after_secs)
    .bind(limit)
    .fetch_all(conn)
    .await
}
