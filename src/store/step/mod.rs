//! Steps' writes as one SQL statement: for each step, the finished recursions with their
//! tool calls, the tool calls about to start (the ledger), the LLM attempts, the task's
//! progress (or its end) and the step's events, fenced by that task's lease. One statement
//! is one implicit transaction, one round trip and one WAL flush, shared by every step in
//! it (group commit: see `worker::committer`), where the same rows written one `INSERT` at
//! a time cost seven round trips per step. The inserts read the `UPDATE tasks` of the same
//! statement, so nothing of a step is written when its task's lease is no longer its
//! writer's; the other steps of the statement are not affected.

mod refused;
mod statement;
mod storable;

pub use refused::StepRefused;

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::core::machine::{Outcome, RecursionRecord};
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
    /// The task waits for someone (`waiting`, with its reason): its checkpoint is kept,
    /// the lease is cleared and the outbox flag set, as for an end.
    Wait {
        iterations: u32,
        plan: String,
        checkpoint: String,
        reason: &'static str,
    },
}

/// What the task has spent so far (CONTRACT §8), written with every step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None` when the model has no price.
    pub cost_usd: Option<f64>,
    pub tool_calls: u64,
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

impl Finish {
    /// The `tasks` columns of `outcome`, with the task's final `plan` (JSON text).
    pub fn of(outcome: &Outcome, plan: String) -> Self {
        use crate::store::tasks::status;
        match outcome {
            Outcome::Completed { answer, iterations } => Finish {
                status: status::COMPLETED,
                iterations: *iterations,
                plan,
                answer: Some(answer.clone()),
                error: None,
                fail_reason: None,
            },
            Outcome::Failed {
                reason,
                error,
                iterations,
                ..
            } => Finish {
                status: status::FAILED,
                iterations: *iterations,
                plan,
                answer: None,
                error: Some(error.clone()),
                fail_reason: Some(reason.as_str()),
            },
            Outcome::Cancelled { iterations } => Finish {
                status: status::CANCELLED,
                iterations: *iterations,
                plan,
                answer: None,
                error: None,
                fail_reason: None,
            },
        }
    }
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

/// A tool call recorded `started` before it runs (a tool with effects), or
/// `awaiting_approval` with its approval request (CONTRACT §7).
#[derive(Debug, Clone)]
pub struct StartedCall {
    pub trace_id: Uuid,
    pub tool_call_id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
    pub effect: &'static str,
    pub idempotency_key: Option<String>,
    /// `started`, or `awaiting_approval` (a gated call: an `approvals` row is written too).
    pub state: &'static str,
    /// A gated call's request expires then.
    pub approval_expires_at: Option<DateTime<Utc>>,
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
    /// The task's spending so far.
    pub totals: Totals,
}

/// One step of a statement: its write and the rows of its fresh events.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub write: &'a StepWrite,
    pub events: &'a [EventRow<'a>],
}

/// Writes the steps in one statement. Returns the tasks whose step was written: a step
/// whose task is no longer running under its writer's lease writes nothing.
pub async fn write_many(pool: &PgPool, steps: &[Step<'_>]) -> sqlx::Result<HashSet<Uuid>> {
    if steps.is_empty() {
        return Ok(HashSet::new());
    }
    statement::execute(pool, steps).await
}

/// Writes one step with its `events`. Returns false (and writes nothing) when `owner` no
/// longer holds the running task.
pub async fn write(pool: &PgPool, step: &StepWrite, events: &[EventRow<'_>]) -> sqlx::Result<bool> {
    let written = write_many(
        pool,
        &[Step {
            write: step,
            events,
        }],
    )
    .await?;
    Ok(written.contains(&step.task_id))
}
