//! `eval_runs` and `eval_items` (CONTRACT v3 §13): a run and its items made in one
//! transaction, the items still to publish, a run cancelled, a run read with its items.
//! Which tasks a run takes is [`select`]'s; filling the items when their reruns end is
//! [`settle`]'s.

pub mod select;
pub mod settle;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::eval::rerun_task_id;

/// A run to create.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub eval_run_id: Uuid,
    pub name: Option<String>,
    pub agent_id: Uuid,
    pub agent_version: Option<i32>,
    pub channel: Option<String>,
    pub selector: Value,
    pub llm_mode: String,
    pub tools_mode: String,
    pub rate: f64,
    pub tenant_id: String,
}

/// A row of `eval_runs`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct RunRow {
    pub eval_run_id: Uuid,
    pub name: Option<String>,
    pub agent_id: Uuid,
    pub agent_version: Option<i32>,
    pub channel: Option<String>,
    pub selector: Value,
    pub llm_mode: String,
    pub tools_mode: String,
    pub rate: f64,
    pub status: String,
    pub tenant_id: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A row of `eval_items`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ItemRow {
    pub source_task_id: Uuid,
    pub rerun_task_id: Uuid,
    pub status: String,
    pub answer_equal: Option<bool>,
    pub actions_equal: Option<bool>,
    pub first_divergence_iteration: Option<i32>,
    pub iterations_delta: Option<i32>,
    pub tokens_delta: Option<i64>,
    pub cost_delta_usd: Option<f64>,
    pub passed: Option<bool>,
    pub published_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// What a rerun message copies from its source.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Outgoing {
    pub source_task_id: Uuid,
    pub rerun_task_id: Uuid,
    pub agent_id: Uuid,
    pub input: String,
    pub tenant_id: String,
}

/// Creates the run and one `pending` item per source, in one transaction.
pub async fn create(pool: &PgPool, run: &NewRun, sources: &[Uuid]) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO eval_runs (eval_run_id, name, agent_id, agent_version, channel, selector, \
                                llm_mode, tools_mode, rate, tenant_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(run.eval_run_id)
    .bind(&run.name)
    .bind(run.agent_id)
    .bind(run.agent_version)
    .bind(&run.channel)
    .bind(&run.selector)
    .bind(&run.llm_mode)
    .bind(&run.tools_mode)
    .bind(run.rate)
    .bind(&run.tenant_id)
    .execute(&mut *tx)
    .await?;
    let reruns: Vec<Uuid> = sources
        .iter()
        .map(|source| rerun_task_id(run.eval_run_id, *source))
        .collect();
    sqlx::query(
        "INSERT INTO eval_items (eval_run_id, source_task_id, rerun_task_id, tenant_id) \
         SELECT $1, s, r, $4 FROM unnest($2::uuid[], $3::uuid[]) AS u(s, r)",
    )
    .bind(run.eval_run_id)
    .bind(sources)
    .bind(&reruns)
    .bind(&run.tenant_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The items of `run` whose rerun has not ended, with what their messages copy from the
/// source, in the order the sources were created.
pub async fn outgoing(pool: &PgPool, run: Uuid) -> sqlx::Result<Vec<Outgoing>> {
    sqlx::query_as(
        "SELECT i.source_task_id, i.rerun_task_id, t.agent_id, t.input, t.tenant_id \
         FROM eval_items i JOIN tasks t ON t.task_id = i.source_task_id \
         WHERE i.eval_run_id = $1 AND i.status IN ('pending', 'published') \
           AND t.agent_id IS NOT NULL AND t.input IS NOT NULL \
         ORDER BY t.created_at, t.task_id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// Marks an item published, before its message is sent, while its run is running (a no-op
/// once its rerun has ended). `false`: the run is no longer running (it was cancelled),
/// and nothing more of it is to be sent.
pub async fn mark_published(pool: &PgPool, run: Uuid, source: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "WITH marked AS ( \
             UPDATE eval_items i \
             SET status = 'published', published_at = coalesce(published_at, now()) \
             FROM eval_runs r \
             WHERE r.eval_run_id = i.eval_run_id AND r.status = 'running' \
               AND i.eval_run_id = $1 AND i.source_task_id = $2 \
               AND i.status IN ('pending', 'published') \
             RETURNING 1) \
         SELECT EXISTS (SELECT 1 FROM eval_runs WHERE eval_run_id = $1 AND status = 'running')",
    )
    .bind(run)
    .bind(source)
    .fetch_one(pool)
    .await
}

/// Cancels `run` if it is running, in one transaction: the run becomes `cancelled`, its
/// items never published become `cancelled` (nothing will send them), and the reruns
/// already sent that have not ended are returned, to be cancelled like any task. `None`:
/// the run was not running (none, completed, or cancelled already).
pub async fn cancel(pool: &PgPool, run: Uuid) -> sqlx::Result<Option<Cancelled>> {
    let mut tx = pool.begin().await?;
    let cancelled: Option<Uuid> = sqlx::query_scalar(
        "UPDATE eval_runs SET status = 'cancelled', finished_at = now() \
         WHERE eval_run_id = $1 AND status = 'running' RETURNING eval_run_id",
    )
    .bind(run)
    .fetch_optional(&mut *tx)
    .await?;
    if cancelled.is_none() {
        tx.rollback().await?;
        return Ok(None);
    }
    let unsent = sqlx::query(
        "UPDATE eval_items SET status = 'cancelled', finished_at = now() \
         WHERE eval_run_id = $1 AND status = 'pending'",
    )
    .bind(run)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let in_flight: Vec<Uuid> = sqlx::query_scalar(
        "SELECT i.rerun_task_id FROM eval_items i \
         LEFT JOIN tasks t ON t.task_id = i.rerun_task_id \
         WHERE i.eval_run_id = $1 AND i.status = 'published' \
           AND (t.status IS NULL OR t.status IN ('pending', 'running', 'waiting')) \
         ORDER BY i.rerun_task_id",
    )
    .bind(run)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(Cancelled { unsent, in_flight }))
}

/// What [`cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancelled {
    /// Items never published, now `cancelled`.
    pub unsent: u64,
    /// The reruns sent that had not ended (a rerun whose message is still queued has no
    /// row yet).
    pub in_flight: Vec<Uuid>,
}

/// A run, `None` when there is none.
pub async fn get(pool: &PgPool, run: Uuid) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as(
        "SELECT eval_run_id, name, agent_id, agent_version, channel, selector, llm_mode, \
                tools_mode, rate, status, tenant_id, created_at, finished_at \
         FROM eval_runs WHERE eval_run_id = $1",
    )
    .bind(run)
    .fetch_optional(pool)
    .await
}

/// A run's items, in the order their sources were selected (oldest source first).
pub async fn items(pool: &PgPool, run: Uuid) -> sqlx::Result<Vec<ItemRow>> {
    sqlx::query_as(
        "SELECT i.source_task_id, i.rerun_task_id, i.status, i.answer_equal, i.actions_equal, \
                i.first_divergence_iteration, i.iterations_delta, i.tokens_delta, \
                i.cost_delta_usd, i.passed, i.published_at, i.finished_at \
         FROM eval_items i LEFT JOIN tasks t ON t.task_id = i.source_task_id \
         WHERE i.eval_run_id = $1 ORDER BY t.created_at, i.source_task_id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// The tenant of a run, `None` when there is none.
pub async fn tenant_of(pool: &PgPool, run: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT tenant_id FROM eval_runs WHERE eval_run_id = $1")
        .bind(run)
        .fetch_optional(pool)
        .await
}
