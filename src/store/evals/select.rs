//! Which ended tasks an evaluation reruns. Two ways in, both only over the agent's ended
//! tasks (`core::eval::SELECTABLE`) that have an input and are not themselves an
//! evaluation's reruns, oldest first, at most `limit`:
//!
//! - [`by_condition`]: the operator's SQL condition over `tasks` (`agentd eval run
//!   --where`), run in a READ ONLY transaction with a statement timeout; the ids it returns
//!   are checked again against the agent and the statuses by a query of our own, so a
//!   condition that closes the parenthesis cannot widen the selection.
//! - [`by_fields`]: the gateway's structured selection; it never takes SQL.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::core::eval::SELECTABLE;

/// How long the operator's condition may run.
pub const CONDITION_TIMEOUT_MS: u64 = 30_000;

/// A structured selection (`POST /v1/evals`).
#[derive(Debug, Clone, Default)]
pub struct Fields {
    /// Only these tasks (still only the agent's ended ones).
    pub task_ids: Option<Vec<Uuid>>,
    /// Only these ended statuses (default: every selectable one).
    pub statuses: Option<Vec<String>>,
    /// Only tasks created at or after this.
    pub since: Option<DateTime<Utc>>,
    pub limit: i64,
}

/// Why a `--where` selection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConditionError {
    /// PostgreSQL refused the condition (syntax, unknown column, timeout, a write).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The agent's ended tasks that `condition` (SQL over `tasks`) accepts.
pub async fn by_condition(
    pool: &PgPool,
    agent_id: Uuid,
    condition: &str,
    limit: i64,
) -> Result<Vec<Uuid>, ConditionError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION READ ONLY")
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "SET LOCAL statement_timeout = {CONDITION_TIMEOUT_MS}"
    ))
    .execute(&mut *tx)
    .await?;
    let query = format!(
        "SELECT tasks.task_id FROM tasks \
         WHERE tasks.agent_id = $1 AND tasks.status = ANY($2) AND tasks.input IS NOT NULL \
           AND NOT EXISTS (SELECT 1 FROM eval_items e WHERE e.rerun_task_id = tasks.task_id) \
           AND ({condition}\n) \
         ORDER BY tasks.created_at, tasks.task_id LIMIT $3"
    );
    let statuses: Vec<String> = SELECTABLE.iter().map(|s| (*s).to_owned()).collect();
    let chosen: Vec<Uuid> = match sqlx::query_scalar(&query)
        .bind(agent_id)
        .bind(&statuses)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
    {
        Ok(ids) => ids,
        Err(sqlx::Error::Database(err)) => {
            return Err(ConditionError::Refused(err.message().to_owned()));
        }
        Err(err) => return Err(err.into()),
    };
    let fields = Fields {
        task_ids: Some(chosen),
        statuses: None,
        since: None,
        limit,
    };
    let ids = fields_query(&mut tx, agent_id, &fields).await?;
    tx.commit().await?;
    Ok(ids)
}

/// The agent's ended tasks that `fields` names.
pub async fn by_fields(pool: &PgPool, agent_id: Uuid, fields: &Fields) -> sqlx::Result<Vec<Uuid>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION READ ONLY")
        .execute(&mut *tx)
        .await?;
    let ids = fields_query(&mut tx, agent_id, fields).await?;
    tx.commit().await?;
    Ok(ids)
}

async fn fields_query(
    tx: &mut Transaction<'_, Postgres>,
    agent_id: Uuid,
    fields: &Fields,
) -> sqlx::Result<Vec<Uuid>> {
    let statuses: Vec<String> = fields
        .statuses
        .clone()
        .unwrap_or_else(|| SELECTABLE.iter().map(|s| (*s).to_owned()).collect());
    sqlx::query_scalar(
        "SELECT t.task_id FROM tasks t \
         WHERE t.agent_id = $1 AND t.status = ANY($2) AND t.status = ANY($3) \
           AND t.input IS NOT NULL \
           AND ($4::uuid[] IS NULL OR t.task_id = ANY($4)) \
           AND ($5::timestamptz IS NULL OR t.created_at >= $5) \
           AND NOT EXISTS (SELECT 1 FROM eval_items e WHERE e.rerun_task_id = t.task_id) \
         ORDER BY t.created_at, t.task_id LIMIT $6",
    )
    .bind(agent_id)
    .bind(statuses)
    .bind(
        SELECTABLE
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>(),
    )
    .bind(fields.task_ids.as_deref())
    .bind(fields.since)
    .bind(fields.limit)
    .fetch_all(&mut **tx)
    .await
}
