//! The recursion loop of seed 000 as a steppable, I/O-free machine. The driver asks
//! [`Machine::begin_recursion`] for the next LLM call, feeds back the reply
//! ([`Machine::on_llm_reply`]) and, for CALL_TOOL, the tool results
//! ([`Machine::on_tool_results`]); each step answers with what to do [`Next`]. The machine
//! enforces `max_iteration`, owns the plan, step statuses and short-term memory, builds the
//! state snapshot and the message layout, and queues [`DomainEvent`]s for the driver.
//!
//! Every request is fitted into the task's context budget (`machine/fit.rs`): the oldest
//! assistant messages are folded into `context.compacted_history` and, if needed, the
//! snapshot is rendered shorter (`ContextCompacted`).
//!
//! It is `Serialize + Deserialize` so the driver can checkpoint it and resume a task;
//! fields added later are `#[serde(default)]` so older checkpoints still load.
//! Queued events are not part of a checkpoint: drain them with [`Machine::take_events`]
//! after every step.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::core::action::parse_reply;
use crate::core::compact::FoldedRecursion;
use crate::core::inbound;
use crate::core::prompt::PromptTemplate;
use crate::core::record::Closed;
use crate::core::stall::StallTracker;
use crate::core::state::{
    ActionView, LastRecursion, MemoryEntry, MemorySource, PlanStep, RecursionStatus,
};
use crate::core::types::{LlmReply, ToolCallRequest, ToolCallResult};

pub use crate::core::budget::{BreachAction, Budget, BudgetTrack};
pub use crate::core::limits::Limits;
pub use crate::core::outcome::{
    DomainEvent, FailReason, LlmCall, Next, Outcome, TaskInfo, WaitReason,
};
pub use crate::core::record::RecursionRecord;
pub use crate::core::state::ConversationTurn;

/// The state of one task's recursion loop.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    task: TaskInfo,
    /// Recursions started so far (the current one included).
    iteration: u32,
    plan: Vec<PlanStep>,
    memory: Vec<MemoryEntry>,
    /// One compact assistant message per finished recursion not folded yet.
    history: Vec<String>,
    /// The recursions folded out of `history` to fit the context budget, oldest first.
    #[serde(default)]
    compacted: Vec<FoldedRecursion>,
    last_recursion: Option<LastRecursion>,
    open: Option<OpenRecursion>,
    /// The latest REFLECT summary: the partial result if the task fails.
    last_reflect: Option<String>,
    outcome: Option<Outcome>,
    updated_at: DateTime<Utc>,
    /// The budget, what was spent and what was announced (CONTRACT §8).
    #[serde(default)]
    budget: BudgetTrack,
    /// Guidance injected while the task runs, oldest first (`context.user_guidance`).
    #[serde(default)]
    guidance: Vec<String>,
    /// Every tool-call id the task's replies used, so that each call keeps one of its own
    /// (see [`crate::core::inbound`]).
    #[serde(default)]
    tool_call_ids: BTreeSet<String>,
    /// Identical recursions in a row (stall detection, CONTRACT §14): checkpointed, so a
    /// resumed task decides as the one before the crash would have.
    #[serde(default)]
    stall: StallTracker,
    #[serde(skip)]
    events: Vec<DomainEvent>,
}

/// The recursion under way.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenRecursion {
    trace_id: Uuid,
    iteration: u32,
    step_id: Option<String>,
    started_at: DateTime<Utc>,
    /// Set when the reply was CALL_TOOL: the recursion waits for the tool results.
    tools: Option<PendingTools>,
}

/// A CALL_TOOL reply waiting for its tool results.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PendingTools {
    calls: Vec<ToolCallRequest>,
    observe: String,
    thought: String,
    abstract_: String,
    raw: Value,
}

impl Machine {
    /// A machine for a new task; nothing has run yet.
    pub fn new(task: TaskInfo) -> Self {
        Self {
            budget: BudgetTrack::new(task.budget.clone()),
            guidance: Vec::new(),
            tool_call_ids: BTreeSet::new(),
            stall: StallTracker::new(),
            updated_at: task.created_at,
            task,
            iteration: 0,
            plan: Vec::new(),
            memory: Vec::new(),
            history: Vec::new(),
            compacted: Vec::new(),
            last_recursion: None,
            open: None,
            last_reflect: None,
            outcome: None,
            events: Vec::new(),
        }
    }

    /// INPUT and the max_iteration check of seed 000. Fails with `MaxIteration` once
    /// `max_iteration` recursions have run; otherwise starts recursion `iteration + 1` with
    /// `trace_id`, attributes it to the step in progress (starting the first pending step if
    /// none runs) and returns the LLM call with the freshly rendered state snapshot.
    /// Events: `RecursionStarted`, then `StepUpdated` if a step was started.
    pub fn begin_recursion(
        &mut self,
        trace_id: Uuid,
        now: DateTime<Utc>,
        template: &PromptTemplate,
    ) -> Next {
        if let Some(outcome) = &self.outcome {
            return Next::Finished(outcome.clone());
        }
        if let Some(open) = &self.open {
            let error = format!(
                "begin_recursion called while recursion {} is still open",
                open.iteration
            );
            return self.fail(FailReason::Internal, error, now);
        }
        self.updated_at = now;
        if self.iteration >= self.task.max_iteration {
            let error = format!(
                "reached max_iteration ({}) without an ANSWER",
                self.task.max_iteration
            );
            return self.fail(FailReason::MaxIteration, error, now);
        }
        self.budget.run_from(now);
        if let Some(next) = self.check_budget(now) {
            return next;
        }
        self.start(trace_id, now);
        self.llm_call(trace_id, now, template)
    }

    /// Feeds the LLM reply of the current recursion.
    ///
    /// The reply is first made fit to keep ([`inbound::reply`]): its text storable, its
    /// tool calls' ids unique within the task. An unusable reply ends the recursion `error` with the [`ReplyError`] text as its
    /// error_log (seen by the model next time), and the loop goes on: `Continue`. Otherwise
    /// the reply's `step_updates` are applied (`StepUpdated` per real change) and its
    /// `short_term_memory_append` is remembered, then:
    /// - CALL_TOOL: `RunTools(calls)`, the recursion stays open for [`Self::on_tool_results`];
    /// - RE_PLAN: the plan is replaced (`PlanUpdated`), `Continue`;
    /// - REFLECT: the summary goes to memory (it is also the partial result), `Continue`;
    /// - ANSWER: the step in progress is marked done, `Finished(Completed)`.
    ///
    /// Every recursion that ends is recorded under its step, appended to the history and
    /// reported by `RecursionCompleted`.
    ///
    /// [`ReplyError`]: crate::core::reply_error::ReplyError
    pub fn on_llm_reply(&mut self, reply: &LlmReply, now: DateTime<Utc>) -> Next {
        let open = match self.take_open(Some(false), "on_llm_reply", now) {
            Ok(open) => open,
            Err(next) => return next,
        };
        let reply = inbound::reply(reply, open.iteration, &mut self.tool_call_ids);
        match parse_reply(&reply) {
            Ok(parsed) if self.budget.final_recursion.is_some() && !parsed.action.is_answer() => {
                // The one recursion a breach allows is for an ANSWER only.
                let error = format!(
                    "the budget is used up and the last recursion it allowed replied {} instead of ANSWER",
                    parsed.action.action_type()
                );
                self.open = Some(open);
                self.fail(FailReason::Budget, error, now)
            }
            Ok(parsed) if self.stall.must_answer() && !parsed.action.is_answer() => {
                // The one recursion a stall allows is for an ANSWER only (CONTRACT §14).
                let error = format!(
                    "no progress: the model kept repeating itself and, told to ANSWER, replied {}",
                    parsed.action.action_type()
                );
                self.open = Some(open);
                self.fail(FailReason::NoProgress, error, now)
            }
            Ok(parsed) => self.apply_reply(open, parsed, now),
            Err(error) => {
                let output = serde_json::json!({ "raw": reply.content });
                let closed = self.close(open, Closed::failed(error.to_string(), output), now);
                self.after_recursion(closed, now)
            }
        }
    }

    /// Feeds the results of the current recursion's tool calls, in call order. Memos of
    /// successful calls go to short-term memory; the recursion is `done` if every call
    /// succeeded, else `error` with an error_log naming each failed call.
    pub fn on_tool_results(&mut self, results: Vec<ToolCallResult>, now: DateTime<Utc>) -> Next {
        let mut open = match self.take_open(Some(true), "on_tool_results", now) {
            Ok(open) => open,
            Err(next) => return next,
        };
        let Some(pending) = open.tools.take() else {
            self.open = Some(open);
            return self.fail(FailReason::Internal, "no tool calls pending".into(), now);
        };
        // Calls past the budget's tool-call limit were not run (the driver ran the first
        // `tool_calls_left` ones).
        let ran = results.len() as u64;
        let ran = self
            .budget
            .tool_calls_left()
            .map_or(ran, |left| ran.min(left));
        self.budget.add_tool_calls(ran);
        for memo in results
            .iter()
            .filter(|r| r.success)
            .filter_map(|r| r.memo.as_ref())
        {
            if !memo.trim().is_empty() {
                self.remember(open.trace_id, memo.clone(), MemorySource::TakeMemo);
            }
        }
        let error_log = steps::tool_error_log(&pending.calls, &results);
        let closed = Closed {
            observe: pending.observe,
            thought: pending.thought,
            abstract_: pending.abstract_,
            action: Some(ActionView {
                action_type: "CALL_TOOL".into(),
                output: Value::Object(Default::default()),
            }),
            output: pending.raw,
            result: None,
            status: match error_log {
                None => RecursionStatus::Done,
                Some(_) => RecursionStatus::Error,
            },
            error_log,
            tool_call_results: Some(results),
        };
        let closed = self.close(open, closed, now);
        self.after_recursion(closed, now)
    }

    /// A non-fatal failure of the open recursion (the driver's per-recursion timeout, a
    /// tool batch that timed out...): the recursion ends `error` with `error_log` (the model
    /// sees it next time; a pending CALL_TOOL keeps its observe, thought and abstract) and
    /// the loop goes on: `Continue`. Accepted whether the recursion waits for its reply or
    /// for tool results.
    pub fn on_recursion_error(&mut self, error_log: &str, now: DateTime<Utc>) -> Next {
        let mut open = match self.take_open(None, "on_recursion_error", now) {
            Ok(open) => open,
            Err(next) => return next,
        };
        let mut closed = Closed::failed(error_log.to_owned(), Value::Null);
        if let Some(pending) = open.tools.take() {
            closed.observe = pending.observe;
            closed.thought = pending.thought;
            closed.abstract_ = pending.abstract_;
            closed.output = pending.raw;
            closed.action = Some(ActionView {
                action_type: "CALL_TOOL".into(),
                output: Value::Object(Default::default()),
            });
        }
        let closed = self.close(open, closed, now);
        self.after_recursion(closed, now)
    }

    /// A fatal LLM failure (retries exhausted or not retryable): the current recursion ends
    /// `error` with `error` as its error_log and the task fails with `LlmError`.
    pub fn on_llm_failure(&mut self, error: &str, now: DateTime<Utc>) -> Next {
        let open = match self.take_open(Some(false), "on_llm_failure", now) {
            Ok(open) => open,
            Err(next) => return next,
        };
        self.close(open, Closed::failed(error.to_owned(), Value::Null), now);
        self.fail(FailReason::LlmError, error.to_owned(), now)
    }

    /// A rerun's LLM call that its source's record cannot answer (CONTRACT v3 §13): the
    /// open recursion ends `error` and the task fails with `reason` (`rerun_diverged` or
    /// `rerun_unrecorded`), the divergence as its error (JSON, read back for `task.failed`).
    pub fn on_rerun_parted(
        &mut self,
        reason: FailReason,
        divergence: &crate::core::rerun::Divergence,
        now: DateTime<Utc>,
    ) -> Next {
        self.fail(reason, divergence.error_text(), now)
    }

    /// Ends the task `failed`, reason `internal`, for a cause outside the machine (its
    /// driver could not store a step): an open recursion is closed `error` with `error`.
    /// Returns the outcome (with the latest REFLECT summary as its partial result).
    pub fn fail_internal(&mut self, error: &str, now: DateTime<Utc>) -> Outcome {
        if let Some(open) = self.open.take() {
            self.close(open, Closed::failed(error.to_owned(), Value::Null), now);
        }
        let outcome = Outcome::Failed {
            reason: FailReason::Internal,
            error: error.to_owned(),
            iterations: self.iteration,
            partial: self.last_reflect.clone(),
        };
        self.outcome = Some(outcome.clone());
        outcome
    }

    /// Cancels the task. An open recursion is closed as `error` ("task cancelled"), which
    /// queues its `RecursionCompleted`. A task that already finished keeps its outcome.
    pub fn cancel(&mut self) -> Outcome {
        if let Some(outcome) = &self.outcome {
            return outcome.clone();
        }
        if let Some(open) = self.open.take() {
            let output = Value::Null;
            self.close(
                open,
                Closed::failed("task cancelled".into(), output),
                self.updated_at,
            );
        }
        let outcome = Outcome::Cancelled {
            iterations: self.iteration,
        };
        self.outcome = Some(outcome.clone());
        outcome
    }

    /// What to do after restoring a checkpoint: the outcome if the task finished; the LLM
    /// call of the open recursion again (same trace_id, snapshot rendered anew) if it was
    /// waiting for a reply; its tool calls if it was waiting for tool results; `Continue`
    /// (call `begin_recursion`) between recursions. Queues no events, except
    /// `ContextCompacted` when the re-rendered request had to be compacted.
    pub fn resume(&mut self, now: DateTime<Utc>, template: &PromptTemplate) -> Next {
        if let Some(outcome) = &self.outcome {
            return Next::Finished(outcome.clone());
        }
        match &self.open {
            None => Next::Continue,
            Some(OpenRecursion {
                tools: Some(pending),
                ..
            }) => Next::RunTools(pending.calls.clone()),
            Some(open) => {
                let trace_id = open.trace_id;
                self.llm_call(trace_id, now, template)
            }
        }
    }

    /// Drains the domain events produced since the last call, in order.
    pub fn take_events(&mut self) -> Vec<DomainEvent> {
        std::mem::take(&mut self.events)
    }

    /// Recursions started so far (the current one included).
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// The trace_id of the recursion under way, if one is open.
    pub fn current_trace_id(&self) -> Option<Uuid> {
        self.open.as_ref().map(|open| open.trace_id)
    }

    /// The task this machine runs.
    pub fn task(&self) -> &TaskInfo {
        &self.task
    }

    /// The current plan.
    pub fn plan(&self) -> &[PlanStep] {
        &self.plan
    }

    /// The short-term memory, oldest first.
    pub fn memory(&self) -> &[MemoryEntry] {
        &self.memory
    }

    /// The assistant history messages, one per finished recursion not folded yet.
    pub fn history(&self) -> &[String] {
        &self.history
    }

    /// The recursions folded out of the history to fit the context budget, oldest first.
    pub fn compacted_history(&self) -> &[FoldedRecursion] {
        &self.compacted
    }

    /// The outcome, once the task has finished.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// The budget and what the task has spent.
    pub fn budget(&self) -> &BudgetTrack {
        &self.budget
    }

    /// Adds guidance from a person (`inject`): every later snapshot shows it under
    /// `context.user_guidance`. A text longer than `max_reply_chars` is cut with a marker.
    pub fn add_guidance(&mut self, text: &str) {
        let limit = self.task.limits.max_reply_chars;
        self.guidance
            .push(crate::core::limits::trim_text(text, limit));
    }

    /// The guidance injected so far, oldest first.
    pub fn guidance(&self) -> &[String] {
        &self.guidance
    }

    /// Counts one LLM attempt's tokens and cost (`None`: no price for the model).
    pub fn on_llm_usage(&mut self, prompt_tokens: u64, completion_tokens: u64, cost: Option<f64>) {
        self.budget.add_llm(prompt_tokens, completion_tokens, cost);
    }

    /// Counts a delegated child's tokens and cost toward this task's budget (not its own
    /// spending: the child's row holds it).
    pub fn on_delegated_usage(&mut self, tokens: u64, cost_usd: f64) {
        self.budget.add_delegated(tokens, cost_usd);
    }

    /// The budget a delegated child gets: what is left of this one.
    pub fn budget_for_child(&self, now: DateTime<Utc>) -> Option<Budget> {
        self.budget.left_for_child(now)
    }

    /// How many more tool calls the budget allows (`None`: no limit). The driver runs at
    /// most that many of a reply's calls and gives the others an error result.
    pub fn tool_calls_left(&self) -> Option<u64> {
        self.budget.tool_calls_left()
    }
}

/// Per-recursion bookkeeping shared by the public steps.
mod steps;

/// The state snapshot and fitting requests into the context budget.
mod fit;

/// The budget check before each LLM call.
mod breach;

/// Stall detection after each recursion.
mod stalls;

/// Rebuilding a machine from recorded recursions (fork).
mod rebuild;
pub use rebuild::PastRecursion;

#[cfg(test)]
mod tests;
