//! Reruns (CONTRACT v3 §13) in PostgreSQL: the source task a rerun message names, the
//! rerun settings a task's row keeps (`tasks.rerun_of`, `rerun_llm`, `rerun_tools`), and
//! the source's record a rerun replays: its successful LLM attempts and its tool calls with
//! a committed outcome. Every read of the source's trace rows names its partition (the
//! source's `created_at`, docs/scaling.md).

use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::rerun::{
    RecordedAnswers, RecordedAttempt, RecordedToolCall, RerunMode, RerunSpec,
};

/// What a rerun takes from its source's row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Source {
    pub task_id: Uuid,
    /// None for a task rejected before its agent was known.
    pub agent_id: Option<Uuid>,
    pub input: Option<String>,
    pub constraints: Option<sqlx::types::Json<Vec<String>>>,
    pub agent_version: Option<i32>,
    pub status: String,
    pub tenant_id: String,
}

/// The row of the task a rerun names, if there is one.
pub async fn source(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<Source>> {
    sqlx::query_as(
        "SELECT task_id, agent_id, input, constraints, agent_version, status, tenant_id \
         FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_optional(pool)
    .await
}

/// The rerun settings of `task_id`'s row: `None` for a task that is not a rerun.
pub async fn of_task(pool: &PgPool, task_id: Uuid) -> sqlx::Result<Option<RerunSpec>> {
    let row: Option<(Option<Uuid>, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT rerun_of, rerun_llm, rerun_tools FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_optional(pool)
            .await?;
    let Some((Some(source_task_id), llm, tools)) = row else {
        return Ok(None);
    };
    // The column's check allows only the two names; a null is the default.
    let mode = |name: Option<String>| match name.as_deref() {
        Some("live") => RerunMode::Live,
        _ => RerunMode::Recorded,
    };
    Ok(Some(RerunSpec {
        source_task_id,
        llm: mode(llm),
        tools: mode(tools),
    }))
}

/// The source's last successful attempt of each recursion, with its key and response.
pub async fn recorded_answers(pool: &PgPool, source: Uuid) -> sqlx::Result<RecordedAnswers> {
    let rows: Vec<(i32, Option<String>, Option<Value>)> = sqlx::query_as(
        "SELECT DISTINCT ON (iteration) iteration, request_key, response \
         FROM llm_calls \
         WHERE task_id = $1 AND status = '200' \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY iteration, attempt DESC, id DESC",
    )
    .bind(source)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(iteration, request_key, response)| {
            let iteration = u32::try_from(iteration).ok()?;
            let attempt = RecordedAttempt {
                request_key,
                response,
            };
            Some((iteration, attempt))
        })
        .collect())
}

/// The source's tool calls with a committed outcome, by recursion, in the order they were
/// recorded.
pub async fn recorded_tools(pool: &PgPool, source: Uuid) -> sqlx::Result<Vec<RecordedToolCall>> {
    type Row = (
        i32,
        String,
        Option<Value>,
        bool,
        Option<Value>,
        Option<String>,
        i64,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "WITH source AS (SELECT created_at FROM tasks WHERE task_id = $1) \
         SELECT r.iteration, t.name, t.arguments, t.success, t.result, t.error, t.duration_ms \
         FROM tool_calls t \
         JOIN recursions r ON r.trace_id = t.trace_id AND r.task_id = t.task_id \
                          AND r.task_created_at = (SELECT created_at FROM source) \
         WHERE t.task_id = $1 AND t.task_created_at = (SELECT created_at FROM source) \
           AND t.success IS NOT NULL AND COALESCE(t.state, 'succeeded') IN ('succeeded', 'failed') \
         ORDER BY r.iteration, t.id",
    )
    .bind(source)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(
            |(iteration, name, arguments, success, result, error, duration_ms)| {
                Some(RecordedToolCall {
                    iteration: u32::try_from(iteration).ok()?,
                    name,
                    arguments: arguments.unwrap_or(Value::Null),
                    success,
                    result,
                    error,
                    duration_ms: u64::try_from(duration_ms).unwrap_or(0),
                })
            },
        )
        .collect())
}
