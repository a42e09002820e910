//! The queries behind a fork (CONTRACT §10): the original task and its recursions before
//! the fork point, with their replies, tool results and spending, and the new task's
//! `pending` row that starts from the rebuilt machine.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::machine::PastRecursion;
use crate::core::types::{LlmReply, ToolCallRequest, ToolCallResult};

/// The original task, as a fork copies it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Original {
    pub task_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub input: Option<String>,
    pub constraints: Value,
    pub stream: bool,
    pub budget: Option<Value>,
    pub status: String,
    pub iterations: i32,
    /// The version it ran on (CONTRACT §11); null when it never started.
    pub agent_version: Option<i32>,
}

/// Reads the original task.
pub async fn original(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<Original>> {
    sqlx::query_as(
        "SELECT task_id, agent_id, input, constraints, stream, budget, status, iterations, \
                agent_version \
         FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_optional(pool)
    .await
}

type RecursionRow = (
    Uuid,
    i32,
    Value,
    Option<String>,
    Option<String>,
    DateTime<Utc>,
    DateTime<Utc>,
);

type CallRow = (
    Uuid,
    String,
    String,
    Option<Value>,
    Option<bool>,
    Option<Value>,
    Option<String>,
    Option<i64>,
);

/// The recursions `1..before` of `task_id` as recorded, oldest first.
pub async fn recursions_before(
    pool: &PgPool,
    task_id: Uuid,
    before: i32,
) -> sqlx::Result<Vec<PastRecursion>> {
    let rows: Vec<RecursionRow> = sqlx::query_as(
        "SELECT trace_id, iteration, output, action_type, error_log, started_at, finished_at \
         FROM recursions WHERE task_id = $1 AND iteration < $2 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY iteration",
    )
    .bind(task_id)
    .bind(before)
    .fetch_all(pool)
    .await?;
    let calls: Vec<CallRow> = sqlx::query_as(
        "SELECT c.trace_id, c.tool_call_id, c.name, c.arguments, c.success, c.result, c.error, \
                c.duration_ms \
         FROM tool_calls c \
         JOIN recursions r ON r.trace_id = c.trace_id AND r.task_created_at = c.task_created_at \
         WHERE r.task_id = $1 AND r.iteration < $2 \
           AND r.task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY r.iteration, c.started_at NULLS LAST, c.finished_at, c.tool_call_id",
    )
    .bind(task_id)
    .bind(before)
    .fetch_all(pool)
    .await?;
    let usage: Vec<(Uuid, i64, i64, Option<f64>, bool)> = sqlx::query_as(
        "SELECT trace_id, COALESCE(sum(prompt_tokens), 0)::bigint, \
                COALESCE(sum(completion_tokens), 0)::bigint, sum(cost_usd), \
                bool_or(cost_usd IS NULL AND prompt_tokens IS NOT NULL) \
         FROM llm_calls WHERE task_id = $1 AND iteration < $2 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         GROUP BY trace_id",
    )
    .bind(task_id)
    .bind(before)
    .fetch_all(pool)
    .await?;
    let usage: HashMap<Uuid, (i64, i64, Option<f64>)> = usage
        .into_iter()
        .map(|(trace, prompt, completion, cost, unpriced)| {
            (
                trace,
                (
                    prompt,
                    completion,
                    if unpriced {
                        None
                    } else {
                        Some(cost.unwrap_or(0.0))
                    },
                ),
            )
        })
        .collect();
    let mut by_trace: HashMap<Uuid, Vec<CallRow>> = HashMap::new();
    for call in calls {
        by_trace.entry(call.0).or_default().push(call);
    }
    Ok(rows
        .into_iter()
        .map(
            |(trace_id, _, output, action_type, error_log, started_at, finished_at)| {
                let calls = by_trace.remove(&trace_id).unwrap_or_default();
                let (prompt, completion, cost) =
                    usage.get(&trace_id).copied().unwrap_or((0, 0, None));
                past_recursion(
                    (
                        trace_id,
                        output,
                        action_type,
                        error_log,
                        started_at,
                        finished_at,
                    ),
                    calls,
                    (prompt, completion, cost),
                )
            },
        )
        .collect())
}

/// One recorded recursion: its reply is the recorded output (the reply's JSON, or the raw
/// text of a reply that could not be used) with its native tool calls.
fn past_recursion(
    (trace_id, output, action_type, error_log, started_at, finished_at): (
        Uuid,
        Value,
        Option<String>,
        Option<String>,
        DateTime<Utc>,
        DateTime<Utc>,
    ),
    calls: Vec<CallRow>,
    (prompt, completion, cost): (i64, i64, Option<f64>),
) -> PastRecursion {
    let content = match (&output, action_type.as_deref()) {
        (Value::Null, _) => None,
        (Value::Object(map), None) if map.contains_key("raw") => {
            map.get("raw").and_then(Value::as_str).map(str::to_owned)
        }
        (value, _) => Some(value.to_string()),
    };
    let text = |value: &Option<Value>| match value {
        Some(Value::String(raw)) => raw.clone(),
        Some(other) => other.to_string(),
        None => "{}".to_owned(),
    };
    let tool_calls: Vec<ToolCallRequest> = calls
        .iter()
        .map(|call| ToolCallRequest {
            id: call.1.clone(),
            name: call.2.clone(),
            arguments: text(&call.3),
        })
        .collect();
    let tool_results = calls
        .into_iter()
        .map(
            |(_, id, name, arguments, success, result, error, duration)| ToolCallResult {
                tool_call_id: id,
                name,
                arguments: arguments.unwrap_or(Value::Null),
                success: success.unwrap_or(false),
                result,
                error,
                memo: None,
                duration_ms: duration.and_then(|d| u64::try_from(d).ok()).unwrap_or(0),
            },
        )
        .collect();
    PastRecursion {
        trace_id,
        started_at,
        finished_at,
        reply: content.map(|content| LlmReply {
            content,
            tool_calls,
            usage: Default::default(),
        }),
        error_log,
        tool_results,
        prompt_tokens: u64::try_from(prompt).unwrap_or(0),
        completion_tokens: u64::try_from(completion).unwrap_or(0),
        cost_usd: cost,
    }
}

/// The fork's row: `pending`, starting from `checkpoint`, pointing at its original.
#[derive(Debug, Clone)]
pub struct NewFork<'a> {
    pub task_id: Uuid,
    pub original: &'a Original,
    pub from_iteration: i32,
    pub input: &'a str,
    pub checkpoint: &'a str,
    /// The version the fork runs on: the original's unless the request named one.
    pub agent_version: Option<i32>,
}

/// Inserts the fork's row.
pub async fn insert(pool: &PgPool, fork: &NewFork<'_>) -> sqlx::Result<()> {
    let original = fork.original;
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, constraints, stream, budget, checkpoint, \
                            iterations, forked_from_task_id, forked_from_iteration, \
                            agent_version, tenant_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                 COALESCE((SELECT tenant_id FROM tasks WHERE task_id = $9), 'default'))",
    )
    .bind(fork.task_id)
    .bind(original.agent_id)
    .bind(fork.input)
    .bind(&original.constraints)
    .bind(original.stream)
    .bind(&original.budget)
    .bind(fork.checkpoint)
    .bind(fork.from_iteration - 1)
    .bind(original.task_id)
    .bind(fork.from_iteration)
    .bind(fork.agent_version)
    .execute(pool)
    .await?;
    Ok(())
}
