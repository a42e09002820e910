//! The per-recursion trace: `recursions`, `tool_calls` and `llm_calls` rows, written by
//! [`super::step`] and read back by `agentd trace`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

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
    /// The model asked.
    pub model: String,
    /// USD, when the model has a price and the provider reported usage.
    pub cost_usd: Option<f64>,
    /// How long the attempt waited for its provider's rate limit (none without a limit).
    pub queued_ms: Option<u64>,
    /// When the attempt started (after any rate-limit wait).
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// What it exchanged (CONTRACT §12); none with `llm.record = off`.
    pub record: Option<Box<super::llm_record::CallRecord>>,
    /// `recorded`: a rerun's attempt answered from its source's record, nothing sent
    /// (CONTRACT v3 §13); none: the provider answered.
    pub served_from: Option<&'static str>,
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
    /// Null while the call runs (or when its outcome is not known).
    pub success: Option<bool>,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
    /// started, succeeded, failed, unknown, ...
    pub state: Option<String>,
    /// read_only, idempotent or side_effect.
    pub effect: Option<String>,
    pub idempotency_key: Option<String>,
    /// When the call started and ended (null for calls recorded before they were kept).
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
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
    /// The model asked and the attempt's cost in USD (null without a price or usage).
    pub model: Option<String>,
    pub cost_usd: Option<f64>,
    /// When the attempt started (null for attempts recorded before it was kept) and how long
    /// it waited for a provider rate limit before.
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub queued_ms: Option<i64>,
}

/// A task's recursions in order (CONTRACT §4's first query).
pub async fn recursions(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Vec<RecursionRow>> {
    sqlx::query_as::<_, RecursionRow>(
        "SELECT trace_id, iteration, step_id, action_type, observe, thought, abstract, output, \
                status, error_log, started_at, finished_at \
         FROM recursions WHERE task_id = $1 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
}

/// A task's tool calls in the order they were recorded.
pub async fn tool_calls(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Vec<ToolCallRow>> {
    sqlx::query_as::<_, ToolCallRow>(
        "SELECT trace_id, tool_call_id, name, arguments, success, result, error, duration_ms, \
                state, effect, idempotency_key, started_at, finished_at \
         FROM tool_calls WHERE task_id = $1 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
}

/// A task's LLM attempts in order.
pub async fn llm_calls(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Vec<LlmCallRecord>> {
    sqlx::query_as::<_, LlmCallRecord>(
        "SELECT trace_id, attempt, status, latency_ms, prompt_tokens, completion_tokens, error, \
                model, cost_usd, started_at, queued_ms \
         FROM llm_calls WHERE task_id = $1 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
}
