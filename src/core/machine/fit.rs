//! Fitting each LLM request into `limits.context_budget_tokens` (seed 003's COMPACTING):
//! building the state snapshot at a detail level, rendering the messages, and compacting
//! when the estimate is over budget.
//!
//! The algorithm, run for every request (see [`Machine::fitted_messages`]):
//! 1. render everything; if the estimate fits, send it as is;
//! 2. otherwise fold the oldest assistant messages, keeping the newest
//!    `keep_recent_recursions`, into `context.compacted_history`, then keep one fewer
//!    recursion at a time (down to none) until it fits;
//! 3. if it still does not fit, render the snapshot at the reduced detail levels of
//!    [`Detail::REDUCED`] in order (fewer and shorter step recursions, memory entries,
//!    compacted lines and conversation turns, shorter `last_recursion` texts and tool
//!    results, a shorter `context.objective`) until it fits or the floor is reached.
//!
//! Message `[0]` (the input, verbatim) and the template's own text are never cut, so a
//! request whose floor is still over budget is sent at the floor. A compaction queues one
//! `ContextCompacted`.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Machine;
use crate::core::compact::{self, Detail, FoldedRecursion};
use crate::core::limits::estimate_request_tokens;
use crate::core::outcome::DomainEvent;
use crate::core::prompt::{PromptTemplate, build_messages};
use crate::core::state::{
    Context, CurrentRecursion, GlobalState, Memory, RecursionStatus, StateSnapshot,
};
use crate::core::types::ChatMessage;

impl Machine {
    /// The messages of the open recursion's LLM call, compacted to fit the context budget
    /// (see the module doc). `Err` only when the snapshot cannot be serialized.
    pub(super) fn fitted_messages(
        &mut self,
        trace_id: Uuid,
        now: DateTime<Utc>,
        template: &PromptTemplate,
    ) -> Result<Vec<ChatMessage>, String> {
        let budget = self.task.limits.context_budget_tokens;
        let mut messages = self.render(trace_id, now, template, &Detail::FULL)?;
        let before = estimate_request_tokens(&messages);
        if before <= budget {
            return Ok(messages);
        }
        let mut after = before;
        let mut folded = 0usize;
        let keep_recent = usize::try_from(self.task.limits.keep_recent_recursions);
        let mut keep = keep_recent.unwrap_or(usize::MAX).min(self.history.len());
        loop {
            let newly = self.fold_to(keep);
            if newly > 0 {
                folded += newly;
                messages = self.render(trace_id, now, template, &Detail::FULL)?;
                after = estimate_request_tokens(&messages);
            }
            if after <= budget || keep == 0 {
                break;
            }
            keep -= 1;
        }
        for detail in &Detail::REDUCED {
            if after <= budget {
                break;
            }
            messages = self.render(trace_id, now, template, detail)?;
            after = estimate_request_tokens(&messages);
        }
        self.events.push(DomainEvent::ContextCompacted {
            trace_id,
            iteration: self.iteration,
            before_tokens: before,
            after_tokens: after,
            folded_recursions: u32::try_from(folded).unwrap_or(u32::MAX),
        });
        Ok(messages)
    }

    /// Folds the oldest assistant messages until at most `keep` remain; returns how many
    /// were folded.
    fn fold_to(&mut self, keep: usize) -> usize {
        let count = self.history.len().saturating_sub(keep);
        let folded = self
            .history
            .drain(..count)
            .map(|message| FoldedRecursion::from_history(&message));
        self.compacted.extend(folded);
        count
    }

    /// The seed message layout with the snapshot at `detail` rendered into the template.
    fn render(
        &self,
        trace_id: Uuid,
        now: DateTime<Utc>,
        template: &PromptTemplate,
        detail: &Detail,
    ) -> Result<Vec<ChatMessage>, String> {
        let snapshot = self.snapshot(trace_id, now, detail);
        // Compact: whitespace would cost tokens on every recursion and tells the model nothing.
        let state = serde_json::to_string(&snapshot)
            .map_err(|error| format!("cannot serialize the state snapshot: {error}"))?;
        let system = template.render(state);
        Ok(build_messages(&self.task.objective, system, &self.history))
    }

    /// The state snapshot for the current recursion (number `self.iteration`) at `detail`.
    /// Following seed 002, `global.iteration` counts the recursions executed before this
    /// one.
    pub(super) fn snapshot(
        &self,
        trace_id: Uuid,
        now: DateTime<Utc>,
        detail: &Detail,
    ) -> StateSnapshot<'_> {
        StateSnapshot {
            global: GlobalState {
                task_id: self.task.task_id,
                iteration: self.iteration.saturating_sub(1),
                max_iteration: self.task.max_iteration,
                remaining_iterations: self.task.max_iteration.saturating_sub(self.iteration),
                status: "running",
                created_at: self.task.created_at,
                updated_at: now,
                budget: self.budget.view(now, super::breach::ANSWER_NOW),
            },
            current_recursion: CurrentRecursion {
                trace_id,
                iteration_index: self.iteration,
                status: RecursionStatus::Running,
            },
            context: Context {
                objective: compact::objective(&self.task.objective, detail),
                constraints: compact::constraints(&self.task.constraints, detail),
                user_guidance: compact::constraints(&self.guidance, detail),
                stall_warning: self.stall.warning().map(Cow::Borrowed),
                conversation: compact::conversation(&self.task.conversation, detail),
                plan: compact::plan(&self.plan, detail),
                memory: Memory {
                    short_term: compact::memory(&self.memory, detail),
                    long_term_refs: &[],
                },
                compacted_history: compact::compacted_lines(&self.compacted, detail),
            },
            last_recursion: self
                .last_recursion
                .as_ref()
                .map(|last| compact::last_recursion(last, detail)),
        }
    }
}
