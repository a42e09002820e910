//! The record of every model call (CONTRACT v3 §12) in PostgreSQL: what an attempt's
//! `llm_calls` row carries (`request_sha256`, `request_key`, `request_parts`, `response`),
//! the task's `llm_request_parts` it refers to (written with the step, in the same
//! statement: `store::step`), and reading it back as the view `llm_call_bodies` does, from
//! the task's partition.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::call_record::StoredPart;

/// What an attempt's row records of its exchange.
#[derive(Debug, Clone, Default)]
pub struct CallRecord {
    /// Lowercase hex SHA-256 of the exact body bytes sent.
    pub request_sha256: String,
    /// Lowercase hex SHA-256 of the canonical form (`core::request_key`).
    pub request_key: String,
    /// `llm.record = full`: the body's parts in order.
    pub parts: Option<Vec<Uuid>>,
    /// The parts of `parts` that this task has not stored yet.
    pub new_parts: Vec<StoredPart>,
    /// `llm.record = full`: the response (JSON text, storable and redacted).
    pub response: Option<String>,
}

/// One attempt with its request and response, as `llm_call_bodies` and `llm_calls` hold it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct RecordedCall {
    /// `llm_calls.id`.
    pub llm_call_id: i64,
    pub trace_id: Uuid,
    pub iteration: i32,
    pub attempt: i32,
    /// `200` or the error class.
    pub status: String,
    pub model: Option<String>,
    pub latency_ms: i64,
    pub started_at: Option<DateTime<Utc>>,
    pub request_sha256: Option<String>,
    pub request_key: Option<String>,
    /// The body as sent (null unless `llm.record = full`).
    #[schema(value_type = Option<Object>)]
    pub request: Option<Value>,
    /// The response (null unless `llm.record = full`).
    #[schema(value_type = Option<Object>)]
    pub response: Option<Value>,
}

/// Every attempt of `task_id` (of its recursion `iteration` only, when given) in order, with
/// its request and response when recorded.
pub async fn calls(
    pool: &PgPool,
    task_id: Uuid,
    iteration: Option<i32>,
) -> sqlx::Result<Vec<RecordedCall>> {
    sqlx::query_as(
        "SELECT c.id AS llm_call_id, c.trace_id, c.iteration, c.attempt, c.status, c.model,
                c.latency_ms, c.started_at, c.request_sha256, c.request_key,
                CASE WHEN c.request_parts IS NOT NULL
                     THEN llm_try_jsonb(llm_request_text(c.task_id, c.request_parts,
                                                         c.task_created_at)) END AS request,
                CASE WHEN c.request_parts IS NOT NULL THEN c.response END AS response
         FROM llm_calls c
         WHERE c.task_id = $1 AND ($2::int IS NULL OR c.iteration = $2)
           AND c.task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1)
         ORDER BY c.iteration, c.attempt, c.id",
    )
    .bind(task_id)
    .bind(iteration)
    .fetch_all(pool)
    .await
}

/// The exact request text of one attempt (its parts joined), when recorded in full.
pub async fn request_text(pool: &PgPool, llm_call_id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT llm_request_text(task_id, request_parts, task_created_at) FROM llm_calls \
         WHERE id = $1",
    )
    .bind(llm_call_id)
    .fetch_optional(pool)
    .await
    .map(Option::flatten)
}
