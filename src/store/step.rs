//! A step's write as one SQL statement: the finished recursions with their tool calls, the
//! LLM attempts, the task's progress (or its end) and the step's events, fenced by the
//! lease. One statement is one implicit transaction and one round trip, where the same
//! rows written one `INSERT` at a time cost seven round trips and their context switches.
//! The inserts read the `UPDATE tasks` of the same statement, so nothing is written when
//! the lease is no longer this worker's.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::limits::{trim_json, trim_text};
use crate::core::machine::RecursionRecord;
use crate::store::trace::LlmCallRow;

/// What happens to the `tasks` row of the step.
#[derive(Debug, Clone)]
pub enum Progress {
    /// Still running: only `updated_at` changes (an events-only step, such as `llm.retry`).
    Touch,
    /// Still running, after a recursion: its count, plan and machine checkpoint (JSON texts).
    Checkpoint {
        iterations: u32,
        plan: String,
        checkpoint: String,
    },
    /// The task ended: its terminal fields; the checkpoint and the lease are cleared.
    Finish(Finish),
}

/// The terminal fields of a finished task.
#[derive(Debug, Clone)]
pub struct Finish {
    pub status: &'static str,
    pub iterations: u32,
    pub plan: String,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub fail_reason: Option<&'static str>,
}

/// One event row: seq, id, type and its JSON text.
#[derive(Debug, Clone, Copy)]
pub struct EventRow<'a> {
    pub seq: i64,
    pub event_id: Uuid,
    pub event_type: &'a str,
    pub json: &'a str,
}

/// Everything one step writes.
#[derive(Debug, Clone)]
pub struct StepWrite {
    pub task_id: Uuid,
    pub owner: Uuid,
    pub progress: Progress,
    pub records: Vec<RecursionRecord>,
    pub llm_rows: Vec<LlmCallRow>,
    /// Tool results and errors longer than this are stored cut (visible marker).
    pub max_result_chars: usize,
}

/// The statement. `$1` task, `$2` owner, `$3` progress kind (touch, checkpoint, finish),
/// `$4..$10` the task's columns, then one array per column of each inserted table.
const WRITE_STEP: &str = "\
WITH task AS (
    UPDATE tasks SET
        updated_at = now(),
        iterations = CASE WHEN $3 = 'touch' THEN iterations ELSE $4 END,
        plan = CASE WHEN $3 = 'touch' THEN plan ELSE $5::jsonb END,
        checkpoint = CASE $3 WHEN 'touch' THEN checkpoint WHEN 'finish' THEN NULL
                     ELSE $6::jsonb END,
        status = CASE WHEN $3 = 'finish' THEN $7 ELSE status END,
        answer = CASE WHEN $3 = 'finish' THEN $8 ELSE answer END,
        error = CASE WHEN $3 = 'finish' THEN $9 ELSE error END,
        fail_reason = CASE WHEN $3 = 'finish' THEN $10 ELSE fail_reason END,
        finished_at = CASE WHEN $3 = 'finish' THEN now() ELSE finished_at END,
        lease_owner = CASE WHEN $3 = 'finish' THEN NULL ELSE lease_owner END,
        lease_until = CASE WHEN $3 = 'finish' THEN NULL ELSE lease_until END
    WHERE task_id = $1 AND lease_owner = $2 AND status = 'running'
    RETURNING task_id
),
recursion_rows AS (
    INSERT INTO recursions (trace_id, task_id, iteration, step_id, action_type, observe,
                            thought, abstract, output, status, error_log, started_at,
                            finished_at)
    SELECT r.trace_id, task.task_id, r.iteration, r.step_id, r.action_type, r.observe,
           r.thought, r.abstract, r.output::jsonb, r.status, r.error_log, r.started_at,
           r.finished_at
    FROM task, UNNEST($11::uuid[], $12::int[], $13::text[], $14::text[], $15::text[],
                      $16::text[], $17::text[], $18::text[], $19::text[], $20::text[],
                      $21::timestamptz[], $22::timestamptz[])
         AS r (trace_id, iteration, step_id, action_type, observe, thought, abstract,
               output, status, error_log, started_at, finished_at)
),
tool_call_rows AS (
    INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, result,
                            error, duration_ms)
    SELECT task.task_id, c.trace_id, c.tool_call_id, c.name, c.arguments::jsonb, c.success,
           c.result::jsonb, c.error, c.duration_ms
    FROM task, UNNEST($23::uuid[], $24::text[], $25::text[], $26::text[], $27::bool[],
                      $28::text[], $29::text[], $30::bigint[]) WITH ORDINALITY
         AS c (trace_id, tool_call_id, name, arguments, success, result, error, duration_ms,
               ord)
    ORDER BY c.ord
),
llm_call_rows AS (
    INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms,
                           prompt_tokens, completion_tokens, error)
    SELECT task.task_id, l.trace_id, l.iteration, l.attempt, l.status, l.latency_ms,
           l.prompt_tokens, l.completion_tokens, l.error
    FROM task, UNNEST($31::uuid[], $32::int[], $33::int[], $34::text[], $35::bigint[],
                      $36::bigint[], $37::bigint[], $38::text[]) WITH ORDINALITY
         AS l (trace_id, iteration, attempt, status, latency_ms, prompt_tokens,
               completion_tokens, error, ord)
    ORDER BY l.ord
),
event_rows AS (
    INSERT INTO events (task_id, seq, event_id, type, payload)
    SELECT task.task_id, e.seq, e.event_id, e.type, e.payload::jsonb
    FROM task, UNNEST($39::bigint[], $40::uuid[], $41::text[], $42::text[])
         AS e (seq, event_id, type, payload)
)
SELECT count(*) FROM task";

fn int(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

fn bigint(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Writes the step with its `events`. Returns false (and writes nothing) when `owner` no
/// longer holds the running task.
pub async fn write(pool: &PgPool, step: &StepWrite, events: &[EventRow<'_>]) -> sqlx::Result<bool> {
    let max = step.max_result_chars;
    let (kind, iterations, plan, checkpoint, finish) = match &step.progress {
        Progress::Touch => ("touch", 0, None, None, None),
        Progress::Checkpoint {
            iterations,
            plan,
            checkpoint,
        } => (
            "checkpoint",
            *iterations,
            Some(plan.as_str()),
            Some(checkpoint.as_str()),
            None,
        ),
        Progress::Finish(end) => (
            "finish",
            end.iterations,
            Some(end.plan.as_str()),
            None,
            Some(end),
        ),
    };
    let records = &step.records;
    let calls: Vec<(Uuid, &crate::core::types::ToolCallResult)> = records
        .iter()
        .flat_map(|r| r.tool_call_results.iter().map(|c| (r.trace_id, c)))
        .collect();
    let llm = &step.llm_rows;
    let count: i64 = sqlx::query_scalar(WRITE_STEP)
        .bind(step.task_id)
        .bind(step.owner)
        .bind(kind)
        .bind(int(iterations))
        .bind(plan)
        .bind(checkpoint)
        .bind(finish.map(|f| f.status))
        .bind(finish.and_then(|f| f.answer.as_deref()))
        .bind(finish.and_then(|f| f.error.as_deref()))
        .bind(finish.and_then(|f| f.fail_reason))
        // recursions
        .bind(records.iter().map(|r| r.trace_id).collect::<Vec<_>>())
        .bind(records.iter().map(|r| int(r.iteration)).collect::<Vec<_>>())
        .bind(
            records
                .iter()
                .map(|r| r.step_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.action_type.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.observe.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.thought.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.abstract_.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.output.to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.status.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.error_log.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.started_at)
                .collect::<Vec<DateTime<Utc>>>(),
        )
        .bind(
            records
                .iter()
                .map(|r| r.finished_at)
                .collect::<Vec<DateTime<Utc>>>(),
        )
        // tool_calls
        .bind(
            calls
                .iter()
                .map(|(trace_id, _)| *trace_id)
                .collect::<Vec<_>>(),
        )
        .bind(
            calls
                .iter()
                .map(|(_, c)| c.tool_call_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            calls
                .iter()
                .map(|(_, c)| c.name.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            calls
                .iter()
                .map(|(_, c)| trim_json(&c.arguments, max).to_string())
                .collect::<Vec<_>>(),
        )
        .bind(calls.iter().map(|(_, c)| c.success).collect::<Vec<_>>())
        .bind(
            calls
                .iter()
                .map(|(_, c)| c.result.as_ref().map(|v| trim_json(v, max).to_string()))
                .collect::<Vec<_>>(),
        )
        .bind(
            calls
                .iter()
                .map(|(_, c)| c.error.as_deref().map(|e| trim_text(e, max)))
                .collect::<Vec<_>>(),
        )
        .bind(
            calls
                .iter()
                .map(|(_, c)| bigint(c.duration_ms))
                .collect::<Vec<_>>(),
        )
        // llm_calls
        .bind(llm.iter().map(|l| l.trace_id).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| int(l.iteration)).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| int(l.attempt)).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| l.status.as_str()).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| bigint(l.latency_ms)).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| l.prompt_tokens).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| l.completion_tokens).collect::<Vec<_>>())
        .bind(llm.iter().map(|l| l.error.as_deref()).collect::<Vec<_>>())
        // events
        .bind(events.iter().map(|e| e.seq).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.event_id).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.event_type).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.json).collect::<Vec<_>>())
        .fetch_one(pool)
        .await?;
    Ok(count == 1)
}
