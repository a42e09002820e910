//! The per-recursion trace: `recursions`, `tool_calls` and `llm_calls` rows, written by the
//! driver and read back by `agentd trace`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::core::limits::{trim_json, trim_text};
use crate::core::machine::RecursionRecord;

/// Writes a finished recursion and its tool calls. Tool results and errors longer than
/// `max_result_chars` are stored cut, with the visible truncation marker.
pub async fn insert_recursion(
    conn: &mut PgConnection,
    task_id: Uuid,
    record: &RecursionRecord,
    max_result_chars: usize,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO recursions (trace_id, task_id, iteration, step_id, action_type, observe, \
                                 thought, abstract, output, status, error_log, started_at, finished_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(record.trace_id)
    .bind(task_id)
    .bind(i32::try_from(record.iteration).unwrap_or(i32::MAX))
    .bind(record.step_id.as_deref())
    .bind(record.action_type.as_deref())
    .bind(&record.observe)
    .bind(&record.thought)
    .bind(&record.abstract_)
    .bind(&record.output)
    .bind(record.status.as_str())
    .bind(record.error_log.as_deref())
    .bind(record.started_at)
    .bind(record.finished_at)
    .execute(&mut *conn)
    .await?;
    for call in &record.tool_call_results {
        sqlx::query(
            "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, \
                                     result, error, duration_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(task_id)
        .bind(record.trace_id)
        .bind(&call.tool_call_id)
        .bind(&call.name)
        .bind(trim_json(&call.arguments, max_result_chars))
        .bind(call.success)
        .bind(
            call.result
                .as_ref()
                .map(|result| trim_json(result, max_result_chars)),
        )
        .bind(
            call.error
                .as_deref()
                .map(|error| trim_text(error, max_result_chars)),
        )
        .bind(i64::try_from(call.duration_ms).unwrap_or(i64::MAX))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// One LLM attempt as recorded in `llm_calls`.
#[derive(Debug, Clone)]
pub struct LlmCallRow {
    pub task_id: Uuid,
    pub trace_id: Uuid,
    pub iteration: u32,
    pub attempt: u32,
    pub status: String,
    pub latency_ms: u64,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub error: Option<String>,
}

/// Records one LLM attempt.
pub async fn insert_llm_call(conn: &mut PgConnection, row: &LlmCallRow) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms, \
                                prompt_tokens, completion_tokens, error) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(row.task_id)
    .bind(row.trace_id)
    .bind(i32::try_from(row.iteration).unwrap_or(i32::MAX))
    .bind(i32::try_from(row.attempt).unwrap_or(i32::MAX))
    .bind(&row.status)
    .bind(i64::try_from(row.latency_ms).unwrap_or(i64::MAX))
    .bind(row.prompt_tokens)
    .bind(row.completion_tokens)
    .bind(row.error.as_deref())
    .execute(conn)
    .await?;
    Ok(())
}

/// A stored recursion, for `agentd trace`.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct RecursionRow {
    pub trace_id: Uuid,
    pub iteration: i32,
    pub step_id: Option<String>,
    pub action_type: Option<String>,
    pub observe: String,
    pub thought: String,
    #[sqlx(rename = "abstract")]
    #[serde(rename = "abstract")]
    pub abstract_: String,
    pub output: Option<Value>,
    pub status: String,
    pub error_log: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// A stored tool call, for `agentd trace`.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct ToolCallRow {
    pub trace_id: Uuid,
    pub tool_call_id: String,
    pub name: String,
    pub arguments: Option<Value>,
    pub success: bool,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// A stored LLM attempt, for `agentd trace`.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct LlmCallRecord {
    pub trace_id: Uuid,
    pub attempt: i32,
    pub status: String,
    pub latency_ms: i64,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub error: Option<String>,
}

/// A task's recursions in order (CONTRACT §4's first query).
pub async fn recursions(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Vec<RecursionRow>> {
    sqlx::query_as::<_, RecursionRow>(
        "SELECT trace_id, iteration, step_id, action_type, observe, thought, abstract, output, \
                status, error_log, started_at, finished_at \
         FROM recursions WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
}

/// A task's tool calls in the order they were recorded.
pub async fn tool_calls(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Vec<ToolCallRow>> {
    sqlx::query_as::<_, ToolCallRow>(
        "SELECT trace_id, tool_call_id, name, arguments, success, result, error, duration_ms \
         FROM tool_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
}

/// A task's LLM attempts in order.
pub async fn llm_calls(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Vec<LlmCallRecord>> {
    sqlx::query_as::<_, LlmCallRecord>(
        "SELECT trace_id, attempt, status, latency_ms, prompt_tokens, completion_tokens, error \
         FROM llm_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
}
