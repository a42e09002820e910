//! Stall detection after each recursion (CONTRACT §14): every recursion that ends without
//! ending the task is fed to the checkpointed [`crate::core::stall::StallTracker`], and its
//! verdict becomes `task.stalled` and the agent's action: a warning in the next snapshot
//! (`nudge`), one last recursion told to ANSWER (`answer`), a wait (`pause`, reason
//! `stalled`) or a failure (`fail`, reason `no_progress`, with the partial result).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Machine;
use crate::core::outcome::{DomainEvent, FailReason, Next, WaitReason};
use crate::core::record::Closed;
use crate::core::stall::{ProgressSignature, RecursionFacts, StallVerdict};
use crate::core::state::ToolResultView;
use crate::core::types::ToolCallResult;

/// A recursion just closed: which one, and its progress signature.
#[derive(Debug, Clone)]
pub(super) struct ClosedRecursion {
    pub trace_id: Uuid,
    pub iteration: u32,
    pub signature: ProgressSignature,
}

/// The progress signature of a closing recursion, its tool results cut at `max_chars`
/// (`max_tool_result_chars`: a difference past the cut is none to the model, and hashing
/// megabytes per recursion would cost for nothing).
pub(super) fn signature_of(closed: &Closed, max_chars: usize) -> ProgressSignature {
    let results: Option<Vec<ToolCallResult>> = closed.tool_call_results.as_ref().map(|all| {
        all.iter()
            .map(|r| {
                let view = ToolResultView::capped(r, max_chars);
                ToolCallResult {
                    tool_call_id: view.tool_call_id,
                    name: view.name,
                    arguments: view.arguments,
                    success: view.success,
                    result: view.result,
                    error: view.error,
                    memo: None,
                    duration_ms: 0,
                }
            })
            .collect()
    });
    ProgressSignature::of(&RecursionFacts {
        action_type: closed.action.as_ref().map(|a| a.action_type.as_str()),
        action_output: closed.action.as_ref().map(|a| &a.output),
        tool_results: results.as_deref(),
        error_log: closed.error_log.as_deref(),
    })
}

impl Machine {
    /// What follows a recursion that ended without ending the task: `Continue`, unless the
    /// stall tracker says the task waits or fails.
    pub(super) fn after_recursion(&mut self, closed: ClosedRecursion, now: DateTime<Utc>) -> Next {
        let verdict = self.stall.observe(&self.task.stall, &closed.signature);
        if let Some((count, action)) = verdict.event() {
            self.events.push(DomainEvent::Stalled {
                trace_id: closed.trace_id,
                iteration: closed.iteration,
                count,
                action,
            });
        }
        match verdict {
            StallVerdict::Continue
            | StallVerdict::Warn { .. }
            | StallVerdict::ForceAnswer { .. } => Next::Continue,
            StallVerdict::Pause { .. } => self.wait(WaitReason::Stalled, now),
            StallVerdict::Fail { count } => {
                let error = format!(
                    "no progress: {count} recursions in a row repeated the same action with \
                     the same result ({})",
                    closed.signature.summary
                );
                self.fail(FailReason::NoProgress, error, now)
            }
        }
    }

    /// What `context.stall_warning` shows in the next snapshot, if anything.
    pub fn stall_warning(&self) -> Option<&str> {
        self.stall.warning()
    }
}
