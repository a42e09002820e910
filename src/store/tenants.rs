//! Fair shares (CONTRACT v3 §15): the queries that admit a task of a tenant held to
//! `tenants.max_running`, hold it (`waiting`, reason `tenant_limit`, no lease) and give
//! freed slots to held tasks in order. Each runs under the tenant's advisory lock, so two
//! workers never both see the same free slot.
//!
//! A tenant's slots are held by its `running` tasks and by its tasks given a slot and not
//! claimed yet (`pending` with `wait_reason` `tenant_limit`: their message is on its way).
//! Its queue is its `waiting` tasks with reason `tenant_limit`, `high` priority first, then
//! by arrival (`created_at`, `recorded_seq`): the index `tasks_tenant_queue_idx`.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::reconcile::Orphan;

/// SQL over `tasks o`: a task that holds one of its tenant's slots.
const HOLDS_SLOT: &str =
    "(o.status = 'running' OR (o.status = 'pending' AND o.wait_reason = 'tenant_limit'))";

/// SQL over `tasks q`: a task in its tenant's queue.
const QUEUED: &str = "(q.status = 'waiting' AND q.wait_reason = 'tenant_limit')";

/// The queue's order (matches `tasks_tenant_queue_idx`).
const QUEUE_ORDER: &str = "(q.priority = 'high') DESC, q.created_at, q.recorded_seq";

/// Takes the tenant's advisory lock until the end of the caller's transaction.
pub async fn lock(conn: &mut PgConnection, tenant_id: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 15))")
        .bind(tenant_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Where a task stands with its tenant's limit, read under the tenant's lock (the task's
/// row locked too).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Standing {
    pub status: String,
    pub wait_reason: Option<String>,
    pub agent_id: Option<Uuid>,
    pub iterations: i32,
    /// `tenants.max_running`; `None`: no limit (any more).
    pub max_running: Option<i32>,
    /// Slots of the tenant held by its other tasks.
    pub occupied: i64,
    /// Whether one of the tenant's queued tasks comes before this one.
    pub ahead: bool,
}

/// Reads where `task_id` stands (`None`: no such task).
pub async fn standing(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<Option<Standing>> {
    sqlx::query_as(&format!(
        "SELECT t.status, t.wait_reason, t.agent_id, t.iterations, \
                (SELECT max_running FROM tenants WHERE tenant_id = t.tenant_id) AS max_running, \
                (SELECT count(*) FROM tasks o \
                 WHERE o.tenant_id = t.tenant_id AND o.task_id <> t.task_id \
                   AND {HOLDS_SLOT}) AS occupied, \
                EXISTS (SELECT 1 FROM tasks q \
                        WHERE q.tenant_id = t.tenant_id AND q.task_id <> t.task_id \
                          AND {QUEUED} \
                          AND ((q.priority <> 'high'), q.created_at, \
                               COALESCE(q.recorded_seq, 0)) \
                            < ((t.priority <> 'high'), t.created_at, \
                               COALESCE(t.recorded_seq, 0))) AS ahead \
         FROM tasks t WHERE t.task_id = $1 FOR UPDATE OF t"
    ))
    .bind(task_id)
    .fetch_optional(conn)
    .await
}

/// Gives the task a slot: `pending` with `wait_reason` `tenant_limit` until a claim takes
/// it (the claim clears the mark).
pub async fn give_slot(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<()> {
    place(conn, task_id, "pending").await
}

/// Holds the task in its tenant's queue: `waiting`, reason `tenant_limit`, no lease. What
/// it was freed with before (a resume's reason, guidance, its checkpoint) stays for the
/// claim that takes it later.
pub async fn hold(conn: &mut PgConnection, task_id: Uuid) -> sqlx::Result<()> {
    place(conn, task_id, "waiting").await
}

/// Marks the task `tenant_limit` with `status`, without a lease.
async fn place(conn: &mut PgConnection, task_id: Uuid, status: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE tasks SET status = $2, wait_reason = 'tenant_limit', lease_owner = NULL, \
                lease_until = NULL, updated_at = now() \
         WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(status)
    .execute(conn)
    .await?;
    Ok(())
}

/// Gives free slots of `tenant_id` to its queued tasks, first in the queue first, at most
/// `at_most`: each becomes `pending` with a slot, and the fields of the message that brings
/// it back are returned. A tenant without a limit (any more) frees `at_most`.
pub async fn free(
    conn: &mut PgConnection,
    tenant_id: &str,
    at_most: i64,
) -> sqlx::Result<Vec<Orphan>> {
    sqlx::query_as(&format!(
        "WITH slots AS ( \
             SELECT (SELECT max_running FROM tenants WHERE tenant_id = $1) \
                    - (SELECT count(*) FROM tasks o WHERE o.tenant_id = $1 AND {HOLDS_SLOT}) \
                    AS free \
         ), next AS ( \
             SELECT q.task_id FROM tasks q \
             WHERE q.tenant_id = $1 AND {QUEUED} \
             ORDER BY {QUEUE_ORDER} \
             LIMIT GREATEST(0, LEAST($2, (SELECT free FROM slots))) \
             FOR UPDATE \
         ) \
         UPDATE tasks SET status = 'pending', updated_at = now() \
         FROM next \
         WHERE tasks.task_id = next.task_id AND tasks.status = 'waiting' \
           AND tasks.wait_reason = 'tenant_limit' \
         RETURNING tasks.task_id, agent_id, input, conversation_id, constraints, stream, \
                   status, budget"
    ))
    .bind(tenant_id)
    .bind(at_most)
    .fetch_all(conn)
    .await
}

/// A tenant with queued tasks, for the sweep's round robin.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Contender {
    pub tenant_id: String,
    pub weight: i32,
    /// Queued tasks it may start now (its free slots, at most its queued tasks).
    pub startable: i64,
}

/// The tenants with queued tasks they may start now, at most `limit`.
pub async fn contenders(pool: &PgPool, limit: i64) -> sqlx::Result<Vec<Contender>> {
    sqlx::query_as(&format!(
        "SELECT w.tenant_id, COALESCE(t.weight, 1) AS weight, \
                CASE WHEN t.max_running IS NULL THEN w.queued \
                     ELSE LEAST(w.queued, GREATEST(0, t.max_running - \
                          (SELECT count(*) FROM tasks o \
                           WHERE o.tenant_id = w.tenant_id AND {HOLDS_SLOT}))) \
                END AS startable \
         FROM (SELECT q.tenant_id, count(*) AS queued FROM tasks q WHERE {QUEUED} \
               GROUP BY q.tenant_id) w \
         LEFT JOIN tenants t ON t.tenant_id = w.tenant_id \
         ORDER BY w.tenant_id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await
    .map(|all: Vec<Contender>| all.into_iter().filter(|c| c.startable > 0).collect())
}
