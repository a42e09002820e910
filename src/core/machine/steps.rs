//! The machine's internal steps: applying a parsed reply, closing a recursion (step
//! history, assistant history message, `last_recursion`, `RecursionCompleted`), failing
//! and finishing the task. The snapshot and compaction live in `fit.rs`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::stalls::ClosedRecursion;
use super::{Machine, OpenRecursion, PendingTools};
use crate::core::action::{Action, ParsedReply};
use crate::core::limits::{bound_depth, exceeds, trim_text};
use crate::core::outcome::{DomainEvent, FailReason, LlmCall, Next, Outcome};
use crate::core::plan;
use crate::core::prompt::PromptTemplate;
use crate::core::record::{Closed, RecursionRecord};
use crate::core::state::{
    ActionView, MemoryEntry, MemorySource, RecursionStatus, StepRecursion, StepStatus,
};
use crate::core::types::{ToolCallRequest, ToolCallResult};

impl Machine {
    /// Opens recursion `iteration + 1`, attributed to the step in progress (the first
    /// pending step is started when none runs). Events: `RecursionStarted`, then
    /// `StepUpdated` if a step was started.
    pub(super) fn start(&mut self, trace_id: Uuid, now: DateTime<Utc>) {
        self.iteration += 1;
        let iteration = self.iteration;
        let attributed = plan::attribute(&mut self.plan);
        let step_id = attributed.as_ref().map(|(id, _)| id.clone());
        self.open = Some(OpenRecursion {
            trace_id,
            iteration,
            step_id: step_id.clone(),
            started_at: now,
            tools: None,
        });
        self.events.push(DomainEvent::RecursionStarted {
            trace_id,
            iteration,
            step_id,
        });
        if let Some((step_id, true)) = attributed {
            self.step_event((trace_id, iteration), step_id, StepStatus::Running);
        }
    }

    /// The LLM call of the open recursion: the snapshot rendered into the template, in the
    /// seed message layout, compacted to fit the context budget (`ContextCompacted`).
    pub(super) fn llm_call(
        &mut self,
        trace_id: Uuid,
        now: DateTime<Utc>,
        template: &PromptTemplate,
    ) -> Next {
        match self.fitted_messages(trace_id, now, template) {
            Ok(messages) => Next::CallLlm(LlmCall {
                trace_id,
                iteration: self.iteration,
                messages,
            }),
            Err(error) => self.fail(FailReason::Internal, error, now),
        }
    }

    /// Applies a valid reply: step updates and memory first, then the action.
    pub(super) fn apply_reply(
        &mut self,
        open: OpenRecursion,
        parsed: ParsedReply,
        now: DateTime<Utc>,
    ) -> Next {
        for update in &parsed.step_updates {
            if plan::set_status(&mut self.plan, &update.step_id, update.status) {
                self.step_event(
                    (open.trace_id, open.iteration),
                    update.step_id.clone(),
                    update.status,
                );
            }
        }
        if let Some(memory) = parsed.short_term_memory_append {
            self.remember(open.trace_id, memory, MemorySource::Model);
        }
        let closed = Closed {
            observe: parsed.observe,
            thought: parsed.thought,
            abstract_: parsed.abstract_,
            action: Some(ActionView {
                action_type: parsed.action.action_type().to_owned(),
                output: parsed.action.output(),
            }),
            // Checkpointed while tools run: keep it readable through serde's depth limit.
            output: bound_depth(parsed.raw),
            result: None,
            status: RecursionStatus::Done,
            error_log: None,
            tool_call_results: None,
        };
        self.apply_action(open, parsed.action, closed, now)
    }

    /// The action-specific part of a valid reply.
    fn apply_action(
        &mut self,
        mut open: OpenRecursion,
        action: Action,
        mut closed: Closed,
        now: DateTime<Utc>,
    ) -> Next {
        match action {
            Action::CallTool(calls) => {
                open.tools = Some(PendingTools {
                    calls: calls.clone(),
                    observe: closed.observe,
                    thought: closed.thought,
                    abstract_: closed.abstract_,
                    raw: closed.output,
                });
                self.open = Some(open);
                return Next::RunTools(calls);
            }
            Action::RePlan { plan, .. } => {
                closed.result = serde_json::to_value(&plan).ok();
                plan::replace(&mut self.plan, plan);
                self.events.push(DomainEvent::PlanUpdated {
                    trace_id: open.trace_id,
                    iteration: open.iteration,
                    plan: self.plan.clone(),
                });
            }
            Action::Reflect { summary } => {
                closed.result = Some(Value::String(summary.clone()));
                self.remember(open.trace_id, summary.clone(), MemorySource::Reflect);
                self.last_reflect = Some(summary);
            }
            Action::Answer { answer } => {
                closed.result = Some(Value::String(answer.clone()));
                if let Some(step_id) = plan::in_progress(&self.plan).map(|s| s.step_id.clone()) {
                    plan::set_status(&mut self.plan, &step_id, StepStatus::Done);
                    self.step_event((open.trace_id, open.iteration), step_id, StepStatus::Done);
                }
                self.close(open, closed, now);
                let iterations = self.iteration;
                return self.finish(Outcome::Completed { answer, iterations });
            }
        }
        let closed = self.close(open, closed, now);
        self.after_recursion(closed, now)
    }

    /// Takes the open recursion if it is in the expected phase (`Some(true)` waiting for
    /// tool results, `Some(false)` for the reply, `None` either); otherwise the call is out
    /// of order and the task fails `Internal`. A finished task answers with its outcome
    /// again.
    pub(super) fn take_open(
        &mut self,
        awaiting_tools: Option<bool>,
        method: &str,
        now: DateTime<Utc>,
    ) -> Result<OpenRecursion, Next> {
        if let Some(outcome) = &self.outcome {
            return Err(Next::Finished(outcome.clone()));
        }
        self.updated_at = now;
        match self.open.take() {
            Some(open) if awaiting_tools.is_none_or(|tools| open.tools.is_some() == tools) => {
                Ok(open)
            }
            Some(open) => {
                let waiting = match open.tools {
                    Some(_) => "waiting for tool results",
                    None => "waiting for the LLM reply",
                };
                let error = format!(
                    "{method} called out of order: recursion {} is {waiting}",
                    open.iteration
                );
                self.open = Some(open);
                Err(self.fail(FailReason::Internal, error, now))
            }
            None => {
                let error = format!("{method} called out of order: no recursion is open");
                Err(self.fail(FailReason::Internal, error, now))
            }
        }
    }

    /// Ends a recursion: records it under its step, appends its history message, makes it
    /// the next `last_recursion` and queues `RecursionCompleted`. What the model wrote is
    /// cut at `max_reply_chars` and tool results at `max_tool_result_chars` where they are
    /// fed back; the record keeps the tool results whole. Returns what stall detection
    /// needs of it (see `stalls.rs`).
    pub(super) fn close(
        &mut self,
        open: OpenRecursion,
        closed: Closed,
        now: DateTime<Utc>,
    ) -> ClosedRecursion {
        let closed = closed.capped(&self.task.limits);
        if let Some(step_id) = &open.step_id {
            let recursion = StepRecursion {
                trace_id: open.trace_id,
                status: closed.status,
                result: closed.step_result(),
                error_log: closed.error_log.clone(),
            };
            plan::record(&mut self.plan, step_id, recursion);
        }
        let limits = &self.task.limits;
        let message = closed.history_message(open.iteration, open.trace_id, limits);
        let done = ClosedRecursion {
            trace_id: open.trace_id,
            iteration: open.iteration,
            signature: super::stalls::signature_of(&closed, limits.max_tool_result_chars),
        };
        self.last_recursion = Some(closed.last_recursion(open.iteration, open.trace_id, limits));
        self.history.push(message);
        let record = RecursionRecord {
            trace_id: open.trace_id,
            iteration: open.iteration,
            step_id: open.step_id,
            action_type: closed.action.map(|action| action.action_type),
            observe: closed.observe,
            thought: closed.thought,
            abstract_: closed.abstract_,
            output: closed.output,
            status: closed.status,
            error_log: closed.error_log,
            tool_call_results: closed.tool_call_results.unwrap_or_default(),
            started_at: open.started_at,
            finished_at: now,
        };
        self.events.push(DomainEvent::RecursionCompleted(record));
        done
    }

    /// Fails the task, closing the open recursion (if any) with `error` as its error_log.
    pub(super) fn fail(&mut self, reason: FailReason, error: String, now: DateTime<Utc>) -> Next {
        if let Some(open) = self.open.take() {
            self.close(open, Closed::failed(error.clone(), Value::Null), now);
        }
        self.finish(Outcome::Failed {
            reason,
            error,
            iterations: self.iteration,
            partial: self.last_reflect.clone(),
        })
    }

    /// Records the outcome; every later step answers with it.
    pub(super) fn finish(&mut self, outcome: Outcome) -> Next {
        self.outcome = Some(outcome.clone());
        Next::Finished(outcome)
    }

    /// Appends to short-term memory; a memo longer than `max_tool_result_chars`, or a
    /// model note longer than `max_reply_chars`, is cut with a marker.
    pub(super) fn remember(&mut self, trace_id: Uuid, memory: String, source: MemorySource) {
        let max = match source {
            MemorySource::TakeMemo => self.task.limits.max_tool_result_chars,
            MemorySource::Model | MemorySource::Reflect => self.task.limits.max_reply_chars,
        };
        let memory = match exceeds(&memory, max) {
            true => trim_text(&memory, max),
            false => memory,
        };
        self.memory.push(MemoryEntry {
            trace_id,
            memory,
            source,
        });
    }

    /// Queues `StepUpdated` on behalf of the recursion `(trace_id, iteration)`.
    pub(super) fn step_event(
        &mut self,
        (trace_id, iteration): (Uuid, u32),
        step_id: String,
        status: StepStatus,
    ) {
        self.events.push(DomainEvent::StepUpdated {
            trace_id,
            iteration,
            step_id,
            status,
        });
    }
}

/// The error_log of a CALL_TOOL recursion: each failed call with its error, and each call
/// that got no result at all; `None` when every call succeeded.
pub(super) fn tool_error_log(
    calls: &[ToolCallRequest],
    results: &[ToolCallResult],
) -> Option<String> {
    let failed = results.iter().filter(|r| !r.success).map(|r| {
        let error = r.error.as_deref().unwrap_or("no error message");
        format!("tool call {} ({}) failed: {error}", r.tool_call_id, r.name)
    });
    let missing = calls
        .iter()
        .filter(|call| !results.iter().any(|r| r.tool_call_id == call.id))
        .map(|call| format!("tool call {} ({}) returned no result", call.id, call.name));
    let problems: Vec<String> = failed.chain(missing).collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}
