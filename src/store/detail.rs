//! A task's trace a page at a time, for `GET /v1/tasks/{id}`: at most `limit` recursions
//! after an iteration, the tool calls and LLM attempts of those recursions (on the last page
//! also those of the recursion still open), with every text and JSON value longer than
//! `max_chars` characters cut by PostgreSQL with the marker of
//! [`crate::core::limits::truncation_marker`], so a task with a huge reply or thousands of
//! recursions never makes the gateway load all of it. The rows are the types of
//! `store::trace`, so the JSON is the same as before.

use sqlx::PgPool;
use uuid::Uuid;

use super::trace::{LlmCallRecord, RecursionRow, ToolCallRow};

/// One page of a task's trace.
#[derive(Debug, Default)]
pub struct TracePage {
    pub recursions: Vec<RecursionRow>,
    pub tool_calls: Vec<ToolCallRow>,
    pub llm_calls: Vec<LlmCallRecord>,
    /// The iteration to pass as `after_iteration` for the next page; None on the last.
    pub next_after_iteration: Option<i32>,
}

/// `column` (text) cut at `$max` characters (parameter `max`), with the marker.
fn cut_text(column: &str, max: &str) -> String {
    format!(
        "CASE WHEN length({column}) > {max} THEN left({column}, {max}) || '…[truncated: ' \
         || {max} || ' of ' || length({column}) || ' chars shown]' ELSE {column} END"
    )
}

/// `column` (jsonb) as it is, or, when its JSON text is longer than `max` characters, a
/// JSON string of that text cut with the marker.
fn cut_json(column: &str, max: &str) -> String {
    let text = format!("{column}::text");
    format!(
        "CASE WHEN length({text}) > {max} THEN to_jsonb({}) ELSE {column} END",
        cut_text(&text, max)
    )
}

/// Reads one page: recursions with iteration > `after_iteration`, at most `limit`.
pub async fn page(
    pool: &PgPool,
    task_id: Uuid,
    after_iteration: i32,
    limit: i64,
    max_chars: i64,
) -> sqlx::Result<TracePage> {
    let max = "$4::int";
    // One more than asked tells whether another page follows.
    let mut recursions = sqlx::query_as::<_, RecursionRow>(&format!(
        "SELECT trace_id, iteration, step_id, action_type, {observe} AS observe, \
                {thought} AS thought, {abstract_} AS abstract, {output} AS output, status, \
                {error_log} AS error_log, started_at, finished_at \
         FROM recursions WHERE task_id = $1 AND iteration > $2 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY iteration LIMIT $3",
        observe = cut_text("observe", max),
        thought = cut_text("thought", max),
        abstract_ = cut_text("abstract", max),
        output = cut_json("output", max),
        error_log = cut_text("error_log", max),
    ))
    .bind(task_id)
    .bind(after_iteration)
    .bind(limit.saturating_add(1))
    .bind(max_chars)
    .fetch_all(pool)
    .await?;
    let more = recursions.len() as i64 > limit;
    recursions.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_after_iteration = more
        .then(|| recursions.last().map(|r| r.iteration))
        .flatten();
    // The last page also holds the calls of the recursion still open (no row yet).
    let up_to = next_after_iteration.unwrap_or(i32::MAX);
    let tool_calls = sqlx::query_as::<_, ToolCallRow>(&format!(
        "SELECT t.trace_id, t.tool_call_id, t.name, {arguments} AS arguments, t.success, \
                {result} AS result, {error} AS error, t.duration_ms, t.state, t.effect, \
                t.idempotency_key, t.started_at, t.finished_at \
         FROM tool_calls t LEFT JOIN recursions r \
              ON r.trace_id = t.trace_id AND r.task_created_at = t.task_created_at \
         WHERE t.task_id = $1 \
           AND t.task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
           AND coalesce(r.iteration, 2147483647) > $2 \
           AND coalesce(r.iteration, 2147483647) <= $3 \
         ORDER BY t.id",
        arguments = cut_json("t.arguments", max),
        result = cut_json("t.result", max),
        error = cut_text("t.error", max),
    ))
    .bind(task_id)
    .bind(after_iteration)
    .bind(up_to)
    .bind(max_chars)
    .fetch_all(pool)
    .await?;
    let llm_calls = sqlx::query_as::<_, LlmCallRecord>(&format!(
        "SELECT trace_id, attempt, status, latency_ms, prompt_tokens, completion_tokens, \
                {error} AS error, model, cost_usd, started_at, queued_ms \
         FROM llm_calls WHERE task_id = $1 AND iteration > $2 AND iteration <= $3 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY id",
        error = cut_text("error", max),
    ))
    .bind(task_id)
    .bind(after_iteration)
    .bind(up_to)
    .bind(max_chars)
    .fetch_all(pool)
    .await?;
    Ok(TracePage {
        recursions,
        tool_calls,
        llm_calls,
        next_after_iteration,
    })
}
