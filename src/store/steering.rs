//! What "who may steer" (CONTRACT v3 §15) reads and removes: a task's tenant, and the
//! tombstones that cancels for unknown task ids leave behind.
//!
//! A tombstone is a `cancelled` row without agent and input, written by a cancel that came
//! before (or instead of) its task's message (`store::unheld::cancel_unstarted`). It must
//! outlive the message it waits for, but nothing says such a message exists: a cancel of a
//! made-up id would stay forever. So a tombstone lives `control.tombstone_secs` (a day by
//! default), then [`remove_tombstones`] takes it with its event. When the task's message
//! does arrive, [`adopt_tombstone`] fills in its agent and input, and the row becomes an
//! ordinary cancelled task that only a prune removes.

use sqlx::PgPool;
use uuid::Uuid;

/// The tenant of `task_id` (CONTRACT v3 §15), `None` when no table knows the task.
pub async fn tenant_of(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT tenant_id FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_optional(pool)
        .await
}

/// The tombstone of a cancelled task (SQL over `tasks`).
const TOMBSTONE: &str = "status = 'cancelled' AND agent_id IS NULL AND input IS NULL";

/// Removes up to `limit` tombstones older than `older_than_secs`, with their events;
/// returns how many. Rows another transaction holds are left for the next pass.
pub async fn remove_tombstones(
    pool: &PgPool,
    older_than_secs: f64,
    limit: i64,
) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let ids: Vec<Uuid> = sqlx::query_scalar(&format!(
        "SELECT task_id FROM tasks WHERE {TOMBSTONE} \
           AND finished_at < now() - make_interval(secs => $1) \
         ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    ))
    .bind(older_than_secs)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    sqlx::query(
        "DELETE FROM events e USING tasks t \
         WHERE t.task_id = ANY($1) AND e.task_id = t.task_id \
           AND e.task_created_at = t.created_at",
    )
    .bind(&ids)
    .execute(&mut *tx)
    .await?;
    let removed = sqlx::query(&format!(
        "DELETE FROM tasks WHERE task_id = ANY($1) AND {TOMBSTONE}"
    ))
    .bind(&ids)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(removed)
}

/// Fills in the agent and input of `task_id`'s tombstone from the message that arrived for
/// it: the cancel found its task, which is kept like any other cancelled one.
pub async fn adopt_tombstone(
    pool: &PgPool,
    task_id: Uuid,
    agent_id: Uuid,
    input: &str,
) -> sqlx::Result<bool> {
    // The task and its cancel event become its agent's tenant's (CONTRACT v3 §15).
    sqlx::query_scalar(&format!(
        "WITH adopted AS ( \
             UPDATE tasks SET agent_id = $2, input = $3, updated_at = now(), \
                    tenant_id = COALESCE((SELECT tenant_id FROM agents WHERE agent_id = $2), \
                                         tenant_id) \
             WHERE task_id = $1 AND {TOMBSTONE} \
             RETURNING tenant_id, created_at \
         ), moved AS ( \
             UPDATE events SET tenant_id = adopted.tenant_id FROM adopted \
             WHERE events.task_id = $1 AND events.task_created_at = adopted.created_at \
         ) \
         SELECT EXISTS (SELECT 1 FROM adopted)"
    ))
    .bind(task_id)
    .bind(agent_id)
    .bind(input)
    .fetch_one(pool)
    .await
}
