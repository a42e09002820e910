//! The tool ledger (CONTRACT §7): what `tool_calls` says about the calls of a recursion
//! whose tools were about to run or running when its worker stopped, and the outcome of a
//! call with effects, committed as soon as the call ends.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::limits::{trim_json, trim_text};
use crate::core::types::ToolCallResult;

/// A call's ledger row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LedgerRow {
    pub tool_call_id: String,
    /// started, succeeded, failed, unknown, ...
    pub state: Option<String>,
    pub success: Option<bool>,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
}

impl LedgerRow {
    /// Whether the call's outcome is committed (it must never run again).
    pub fn has_outcome(&self) -> bool {
        self.success.is_some()
    }
}

/// The ledger rows of one recursion's tool calls.
pub async fn of_recursion(pool: &PgPool, trace_id: Uuid) -> sqlx::Result<Vec<LedgerRow>> {
    sqlx::query_as::<_, LedgerRow>(
        "SELECT tool_call_id, state, success, result, error, duration_ms \
         FROM tool_calls WHERE trace_id = $1",
    )
    .bind(trace_id)
    .fetch_all(pool)
    .await
}

/// The outcome of one call, as committed when it ends.
#[derive(Debug, Clone, Copy)]
pub struct CallOutcome<'a> {
    pub task_id: Uuid,
    pub owner: Uuid,
    pub trace_id: Uuid,
    pub result: &'a ToolCallResult,
    /// succeeded, failed or unknown.
    pub state: &'a str,
    pub finished_at: DateTime<Utc>,
    pub max_result_chars: usize,
}

/// Commits a call's outcome on its `started` row, fenced by the lease. Returns false when
/// the lease is no longer `owner`'s (the call's outcome is then for the next holder to
/// decide: it finds the call `started`).
pub async fn record_outcome(pool: &PgPool, outcome: &CallOutcome<'_>) -> sqlx::Result<bool> {
    let result = outcome.result;
    let max = outcome.max_result_chars;
    let updated = sqlx::query(
        "UPDATE tool_calls SET success = $4, result = $5::jsonb, error = $6, \
                duration_ms = $7, state = $8, finished_at = $9 \
         WHERE trace_id = $3 AND tool_call_id = $10 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
           AND EXISTS (SELECT 1 FROM tasks WHERE task_id = $1 AND lease_owner = $2 \
                       AND status = 'running')",
    )
    .bind(outcome.task_id)
    .bind(outcome.owner)
    .bind(outcome.trace_id)
    .bind(result.success)
    .bind(
        result
            .result
            .as_ref()
            .map(|v| trim_json(v, max).to_string()),
    )
    .bind(result.error.as_deref().map(|e| trim_text(e, max)))
    .bind(i64::try_from(result.duration_ms).unwrap_or(i64::MAX))
    .bind(outcome.state)
    .bind(outcome.finished_at)
    .bind(&result.tool_call_id)
    .execute(pool)
    .await?;
    Ok(updated.rows_affected() == 1)
}
