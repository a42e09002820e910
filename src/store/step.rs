//! A step's write as one SQL statement: the finished recursions with their tool calls, the
//! tool calls about to start (the ledger), the LLM attempts, the task's progress (or its
//! end) and the step's events, fenced by the lease. One statement is one implicit
//! transaction and one round trip, where the same rows written one `INSERT` at a time cost
//! seven round trips and their context switches. The inserts read the `UPDATE tasks` of
//! the same statement, so nothing is written when the lease is no longer this worker's.

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
    /// The task ended: its terminal fields; the checkpoint and the lease are cleared and
    /// the outbox flag is set until its last events are confirmed.
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

/// The ledger fields of a finished tool call, in the order of the records' calls.
#[derive(Debug, Clone)]
pub struct ToolMeta {
    /// succeeded, failed or unknown.
    pub state: &'static str,
    pub effect: &'static str,
    pub idempotency_key: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// A tool call recorded `started` before it runs (a tool with effects).
#[derive(Debug, Clone)]
pub struct StartedCall {
    pub trace_id: Uuid,
    pub tool_call_id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
    pub effect: &'static str,
    pub idempotency_key: Option<String>,
}

/// Everything one step writes.
#[derive(Debug, Clone)]
pub struct StepWrite {
    pub task_id: Uuid,
    pub owner: Uuid,
    pub progress: Progress,
    pub records: Vec<RecursionRecord>,
    /// One per tool call of `records`, in the same order (flattened).
    pub tool_meta: Vec<ToolMeta>,
    /// Tool calls about to run, recorded `started`.
    pub started: Vec<StartedCall>,
    pub llm_rows: Vec<LlmCallRow>,
    /// Tool results and errors longer than this are stored cut (visible marker).
    pub max_result_chars: usize,
    /// Every event up to this seq is confirmed by the broker.
    pub confirmed_seq: i64,
}

/// The statement. `$1` task, `$2` owner, `$3` progress kind (touch, checkpoint, finish),
/// `$4..$10` the task's columns, then one array per column of each inserted table, then
/// `$43` the confirmed seq, `$44..$49` the started calls.
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
        lease_until = CASE WHEN $3 = 'finish' THEN NULL ELSE lease_until END,
        event_seq = GREATEST(event_seq, COALESCE((SELECT max(s) FROM UNNEST($39::bigint[]) s), 0)),
        confirmed_seq = GREATEST(confirmed_seq, $43),
        outbox_pending = CASE WHEN $3 = 'finish' THEN true ELSE outbox_pending END
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
started_rows AS (
    INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, state, effect,
                            idempotency_key, started_at)
    SELECT task.task_id, s.trace_id, s.tool_call_id, s.name, s.arguments::jsonb, 'started',
           s.effect, s.idempotency_key, now()
    FROM task, UNNEST($44::uuid[], $45::text[], $46::text[], $47::text[], $48::text[],
                      $49::text[]) WITH ORDINALITY
         AS s (trace_id, tool_call_id, name, arguments, effect, idempotency_key, ord)
    ORDER BY s.ord
    ON CONFLICT (trace_id, tool_call_id) DO NOTHING
),
tool_call_rows AS (
    INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, result,
                            error, duration_ms, state, effect, idempotency_key, started_at,
                            finished_at)
    SELECT task.task_id, c.trace_id, c.tool_call_id, c.name, c.arguments::jsonb, c.success,
           c.result::jsonb, c.error, c.duration_ms,
           COALESCE(c.state, CASE WHEN c.success THEN 'succeeded' ELSE 'failed' END),
           c.effect, c.idempotency_key, c.started_at, COALESCE(c.finished_at, now())
    FROM task, UNNEST($23::uuid[], $24::text[], $25::text[], $26::text[], $27::bool[],
                      $28::text[], $29::text[], $30::bigint[], $50::text[], $51::text[],
                      $52::text[], $53::timestamptz[], $54::timestamptz[]) WITH ORDINALITY
         AS c (trace_id, tool_call_id, name, arguments, success, result, error, duration_ms,
               state, effect, idempotency_key, started_at, finished_at, ord)
    ORDER BY c.ord
    ON CONFLICT (trace_id, tool_call_id) DO UPDATE SET
        success = EXCLUDED.success, result = EXCLUDED.result, error = EXCLUDED.error,
        duration_ms = EXCLUDED.duration_ms, state = EXCLUDED.state,
        finished_at = EXCLUDED.finished_at
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

/// One array per field of `items`.
fn column<'a, T, U>(items: &'a [T], field: impl Fn(&'a T) -> U) -> Vec<U> {
    items.iter().map(field).collect()
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
    let meta = &step.tool_meta;
    let started = &step.started;
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
        .bind(column(records, |r| r.trace_id))
        .bind(column(records, |r| int(r.iteration)))
        .bind(column(records, |r| r.step_id.as_deref()))
        .bind(column(records, |r| r.action_type.as_deref()))
        .bind(column(records, |r| r.observe.as_str()))
        .bind(column(records, |r| r.thought.as_str()))
        .bind(column(records, |r| r.abstract_.as_str()))
        .bind(column(records, |r| r.output.to_string()))
        .bind(column(records, |r| r.status.as_str()))
        .bind(column(records, |r| r.error_log.as_deref()))
        .bind(column(records, |r| r.started_at))
        .bind(column(records, |r| r.finished_at))
        // tool_calls
        .bind(column(&calls, |(trace_id, _)| *trace_id))
        .bind(column(&calls, |(_, c)| c.tool_call_id.as_str()))
        .bind(column(&calls, |(_, c)| c.name.as_str()))
        .bind(column(&calls, |(_, c)| {
            trim_json(&c.arguments, max).to_string()
        }))
        .bind(column(&calls, |(_, c)| c.success))
        .bind(column(&calls, |(_, c)| {
            c.result.as_ref().map(|v| trim_json(v, max).to_string())
        }))
        .bind(column(&calls, |(_, c)| {
            c.error.as_deref().map(|e| trim_text(e, max))
        }))
        .bind(column(&calls, |(_, c)| bigint(c.duration_ms)))
        // llm_calls
        .bind(column(llm, |l| l.trace_id))
        .bind(column(llm, |l| int(l.iteration)))
        .bind(column(llm, |l| int(l.attempt)))
        .bind(column(llm, |l| l.status.as_str()))
        .bind(column(llm, |l| bigint(l.latency_ms)))
        .bind(column(llm, |l| l.prompt_tokens))
        .bind(column(llm, |l| l.completion_tokens))
        .bind(column(llm, |l| l.error.as_deref()))
        // events
        .bind(column(events, |e| e.seq))
        .bind(column(events, |e| e.event_id))
        .bind(column(events, |e| e.event_type))
        .bind(column(events, |e| e.json))
        .bind(step.confirmed_seq)
        // started tool calls
        .bind(column(started, |s| s.trace_id))
        .bind(column(started, |s| s.tool_call_id.as_str()))
        .bind(column(started, |s| s.name.as_str()))
        .bind(column(started, |s| s.arguments.as_str()))
        .bind(column(started, |s| s.effect))
        .bind(column(started, |s| s.idempotency_key.as_deref()))
        // ledger fields of the finished tool calls
        .bind(tool_meta_column(meta, calls.len(), |m| m.state))
        .bind(tool_meta_column(meta, calls.len(), |m| m.effect))
        .bind(column(&padded(meta, calls.len()), |m| {
            m.and_then(|m| m.idempotency_key.as_deref())
        }))
        .bind(column(&padded(meta, calls.len()), |m| {
            m.map(|m| m.started_at)
        }))
        .bind(column(&padded(meta, calls.len()), |m| {
            m.map(|m| m.finished_at)
        }))
        .fetch_one(pool)
        .await?;
    Ok(count == 1)
}

/// `meta` padded with `None` to `len` entries (a record written without ledger fields).
fn padded(meta: &[ToolMeta], len: usize) -> Vec<Option<&ToolMeta>> {
    (0..len).map(|i| meta.get(i)).collect()
}

fn tool_meta_column(
    meta: &[ToolMeta],
    len: usize,
    field: impl Fn(&ToolMeta) -> &'static str,
) -> Vec<Option<&'static str>> {
    (0..len).map(|i| meta.get(i).map(&field)).collect()
}
