//! Which tenant an object named in a request belongs to (CONTRACT v3 §15): a task, an agent,
//! a schedule or an evaluation run. The gateway answers 404 for another tenant's.

use sqlx::PgPool;
use uuid::Uuid;

/// An object a route names by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned {
    Task(Uuid),
    Agent(Uuid),
    Schedule(Uuid),
    /// An evaluation run (CONTRACT v3 §13).
    EvalRun(Uuid),
}

/// The tenant of `object`, `None` when there is no such object.
pub async fn tenant_of(pool: &PgPool, object: Owned) -> sqlx::Result<Option<String>> {
    let (query, id) = match object {
        Owned::Task(task_id) => return super::steering::tenant_of(pool, task_id).await,
        Owned::Agent(agent_id) => ("SELECT tenant_id FROM agents WHERE agent_id = $1", agent_id),
        Owned::Schedule(schedule_id) => (
            "SELECT tenant_id FROM schedules WHERE schedule_id = $1",
            schedule_id,
        ),
        Owned::EvalRun(eval_run_id) => (
            "SELECT tenant_id FROM eval_runs WHERE eval_run_id = $1",
            eval_run_id,
        ),
    };
    sqlx::query_scalar(query)
        .bind(id)
        .fetch_optional(pool)
        .await
}
