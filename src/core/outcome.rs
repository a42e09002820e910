//! The values that cross the boundary between the machine and its driver: the task it
//! runs, the next step it asks for, how the task ended, and the domain events it queues.
//! Re-exported from [`crate::core::machine`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::core::budget::{BreachAction, Budget, Reading};
use crate::core::limits::Limits;
use crate::core::record::RecursionRecord;
use crate::core::state::{ConversationTurn, PlanStep, StepStatus};
use crate::core::types::{ChatMessage, ToolCallRequest};

/// The task a machine runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    pub task_id: Uuid,
    pub agent_id: Uuid,
    /// The user's input, sent verbatim as message `[0]` and shown as `context.objective`.
    pub objective: String,
    /// Shown as `context.constraints`.
    pub constraints: Vec<String>,
    /// At most this many recursions run.
    pub max_iteration: u32,
    pub created_at: DateTime<Utc>,
    /// Request size limits; the defaults when absent (checkpoints written before them).
    #[serde(default)]
    pub limits: Limits,
    /// The earlier turns of the task's conversation, oldest first, shown compactly as
    /// `context.conversation` (message `[0]` stays this turn's own input).
    #[serde(default)]
    pub conversation: Vec<ConversationTurn>,
    /// What the task may spend (CONTRACT §8), if anything limits it.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Stall detection (`agents.stall`, CONTRACT §14); the default for older checkpoints.
    #[serde(default)]
    pub stall: crate::core::stall::StallSettings,
}

/// One LLM call to make: the messages in the seed layout.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCall {
    pub trace_id: Uuid,
    /// 1-based number of the recursion.
    pub iteration: u32,
    pub messages: Vec<ChatMessage>,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Call the LLM, then feed the reply to `on_llm_reply` (or the failure to
    /// `on_llm_failure`).
    CallLlm(LlmCall),
    /// Run these tool calls, then feed their results, in this order, to `on_tool_results`.
    RunTools(Vec<ToolCallRequest>),
    /// The recursion ended; call `begin_recursion` again.
    Continue,
    /// The task waits for someone (`task.waiting`): commit the machine, release the task
    /// and acknowledge its message; a `resume` (or the awaited decision) brings it back.
    Wait(WaitReason),
    /// The task is over.
    Finished(Outcome),
}

/// Why a task waits (`task.waiting` reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// A `pause` control message.
    Paused,
    /// A budget limit with `on_breach` = `pause`: until a `resume` with a larger budget.
    Budget,
    /// Gated tool calls wait for a person's decision (CONTRACT §7).
    Approval,
    /// Another turn of the task's conversation runs (CONTRACT §10).
    Conversation,
    /// Tasks it delegated to run (CONTRACT §10).
    Child,
    /// A stall with `agents.stall.action` = `pause` (CONTRACT §14): until a `resume`.
    Stalled,
    /// A side-effecting call's outcome is unknown and the agent's `on_unknown` is `hold`
    /// (CONTRACT §14): until a person resolves it.
    UnknownOutcome,
    /// Its tenant runs `tenants.max_running` tasks already, or others of its tasks wait
    /// ahead of it (CONTRACT v3 §15): until a slot frees and its turn comes.
    TenantLimit,
}

impl WaitReason {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::Budget => "budget",
            Self::Approval => "approval",
            Self::Conversation => "conversation",
            Self::Child => "child",
            Self::Stalled => "stalled",
            Self::UnknownOutcome => "unknown_outcome",
            Self::TenantLimit => "tenant_limit",
        }
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// The model gave an ANSWER.
    Completed { answer: String, iterations: u32 },
    /// The task failed.
    Failed {
        reason: FailReason,
        error: String,
        iterations: u32,
        /// The best partial result so far: the last REFLECT summary, if any.
        partial: Option<String>,
    },
    /// The task was cancelled.
    Cancelled { iterations: u32 },
}

/// Why a task failed (`task.failed` event's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// `max_iteration` recursions ran without an ANSWER.
    MaxIteration,
    /// The LLM failed fatally or retries ran out.
    LlmError,
    /// The task was rejected before it ran (set by the driver).
    Rejected,
    /// A bug: the machine was driven out of order.
    Internal,
    /// The broker dead-lettered the task's message after `worker.max_deliveries`
    /// deliveries (set by the driver).
    DeliveryLimit,
    /// A budget limit was reached (`on_breach` = `fail`, or `answer` without an ANSWER).
    Budget,
    /// An approval request expired and the agent's `on_approval_expiry` is `fail`.
    ApprovalExpired,
    /// The model repeated itself without progress (stall detection, CONTRACT §14).
    NoProgress,
    /// A rerun's request differs from its source's at some recursion (CONTRACT v3 §13).
    RerunDiverged,
    /// A rerun's request is its source's, but the source kept no response to answer it
    /// with (`llm.record` was `hash` or `off` there).
    RerunUnrecorded,
}

impl FailReason {
    /// The wire name: `max_iteration`, `llm_error`, `rejected` or `internal`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::MaxIteration => "max_iteration",
            Self::LlmError => "llm_error",
            Self::Rejected => "rejected",
            Self::Internal => "internal",
            Self::DeliveryLimit => "delivery_limit",
            Self::Budget => "budget",
            Self::ApprovalExpired => "approval_expired",
            Self::NoProgress => "no_progress",
            Self::RerunDiverged => "rerun_diverged",
            Self::RerunUnrecorded => "rerun_unrecorded",
        }
    }

    /// Whether the failure is a rerun's parting from its source (its error is the
    /// divergence as JSON: `core::rerun::Divergence`).
    pub fn is_rerun_divergence(&self) -> bool {
        matches!(self, Self::RerunDiverged | Self::RerunUnrecorded)
    }
}

/// Something that happened inside the machine, for the event stream and the trace.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "events are few and drained at once; boxing would only complicate the driver"
)]
pub enum DomainEvent {
    /// A recursion began (`recursion.started`).
    RecursionStarted {
        trace_id: Uuid,
        iteration: u32,
        step_id: Option<String>,
    },
    /// RE_PLAN replaced the plan (`plan.updated`).
    PlanUpdated {
        trace_id: Uuid,
        iteration: u32,
        plan: Vec<PlanStep>,
    },
    /// A plan step changed status (`step.updated`).
    StepUpdated {
        trace_id: Uuid,
        iteration: u32,
        step_id: String,
        status: StepStatus,
    },
    /// A recursion ended (`recursion.completed`, and its `recursions` row).
    RecursionCompleted(RecursionRecord),
    /// 80 % of a budget limit is used (`budget.warning`), before recursion `iteration`.
    BudgetWarning { iteration: u32, reading: Reading },
    /// A budget limit is reached (`budget.exceeded`) before recursion `iteration`.
    BudgetExceeded {
        iteration: u32,
        reading: Reading,
        action: BreachAction,
    },
    /// `count` recursions in a row had the same progress signature and the agent's stall
    /// settings say `action` now (`task.stalled`, CONTRACT §14).
    Stalled {
        trace_id: Uuid,
        iteration: u32,
        count: u32,
        action: crate::core::stall::StallAction,
    },
    /// The request of recursion `iteration` was over `context_budget_tokens` and was
    /// compacted (`context.compacted`): `folded_recursions` earlier recursions were folded
    /// into `context.compacted_history` and, if that was not enough, the snapshot was
    /// trimmed. Token counts are estimates of the whole request before and after.
    ContextCompacted {
        trace_id: Uuid,
        iteration: u32,
        before_tokens: u32,
        after_tokens: u32,
        folded_recursions: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_reasons_have_contract_names() {
        for reason in [
            FailReason::MaxIteration,
            FailReason::LlmError,
            FailReason::Rejected,
            FailReason::Internal,
            FailReason::DeliveryLimit,
            FailReason::Budget,
            FailReason::ApprovalExpired,
            FailReason::NoProgress,
        ] {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
    }

    #[test]
    fn outcome_round_trips() {
        let outcome = Outcome::Failed {
            reason: FailReason::MaxIteration,
            error: "e".into(),
            iterations: 3,
            partial: Some("p".into()),
        };
        let text = serde_json::to_string(&outcome).unwrap();
        assert_eq!(serde_json::from_str::<Outcome>(&text).unwrap(), outcome);
    }
}
