//! Progress events of CONTRACT §3: the envelope every event shares and one payload type per
//! event type. An event is one persistent JSON message on the `agentd.events` fanout
//! exchange (AMQP `type` = [`EventType::as_str`], `message_id` = `event_id`, header
//! `task_id`) and one row of the `events` table whose `payload` is the same JSON. Written
//! here (the worker) and read back here (`read.rs`: the gateway, the CLI, the bench).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod payloads;
mod read;
pub use payloads::*;
pub use read::EventHead;

/// One progress event as published and stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// Unique per event, also the AMQP `message_id`; a redelivered event keeps it.
    pub event_id: Uuid,
    pub task_id: Uuid,
    /// Null for a task cancelled before any worker read its message (agent unknown yet).
    pub agent_id: Option<Uuid>,
    /// 1, 2, 3, … per task, without gaps: a subscriber can see what it missed.
    pub seq: i64,
    /// The recursion the event belongs to, if any.
    pub trace_id: Option<Uuid>,
    /// The recursion's number (1, 2, …), if the event belongs to one.
    pub iteration: Option<u32>,
    /// When the event happened (RFC 3339, UTC).
    pub ts: DateTime<Utc>,
    /// `type` and `data`.
    #[serde(flatten)]
    pub body: EventData,
}

impl Event {
    /// The event's type.
    pub fn event_type(&self) -> EventType {
        self.body.event_type()
    }
}

/// Every event type, by its wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    TaskStarted,
    TaskResumed,
    RecursionStarted,
    LlmRetry,
    LlmDelta,
    RecursionCompleted,
    PlanUpdated,
    StepUpdated,
    ToolStarted,
    ToolCompleted,
    ContextCompacted,
    BudgetWarning,
    BudgetExceeded,
    TaskWaiting,
    ApprovalRequested,
    ApprovalDecided,
    InputInjected,
    TaskStalled,
    ToolUnknown,
    ToolResolved,
    TaskCompleted,
    TaskFailed,
    TaskCancelled,
}

impl EventType {
    /// Every type, in the order of CONTRACT §3.
    pub const ALL: [EventType; 23] = [
        Self::TaskStarted,
        Self::TaskResumed,
        Self::RecursionStarted,
        Self::LlmRetry,
        Self::LlmDelta,
        Self::RecursionCompleted,
        Self::PlanUpdated,
        Self::StepUpdated,
        Self::ToolStarted,
        Self::ToolCompleted,
        Self::ContextCompacted,
        Self::BudgetWarning,
        Self::BudgetExceeded,
        Self::TaskWaiting,
        Self::ApprovalRequested,
        Self::ApprovalDecided,
        Self::InputInjected,
        Self::TaskStalled,
        Self::ToolUnknown,
        Self::ToolResolved,
        Self::TaskCompleted,
        Self::TaskFailed,
        Self::TaskCancelled,
    ];

    /// The wire name (`task.started`, …).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::TaskStarted => "task.started",
            Self::TaskResumed => "task.resumed",
            Self::RecursionStarted => "recursion.started",
            Self::LlmRetry => "llm.retry",
            Self::LlmDelta => "llm.delta",
            Self::RecursionCompleted => "recursion.completed",
            Self::PlanUpdated => "plan.updated",
            Self::StepUpdated => "step.updated",
            Self::ToolStarted => "tool.started",
            Self::ToolCompleted => "tool.completed",
            Self::ContextCompacted => "context.compacted",
            Self::BudgetWarning => "budget.warning",
            Self::BudgetExceeded => "budget.exceeded",
            Self::TaskWaiting => "task.waiting",
            Self::ApprovalRequested => "approval.requested",
            Self::ApprovalDecided => "approval.decided",
            Self::InputInjected => "input.injected",
            Self::TaskStalled => "task.stalled",
            Self::ToolUnknown => "tool.unknown",
            Self::ToolResolved => "tool.resolved",
            Self::TaskCompleted => "task.completed",
            Self::TaskFailed => "task.failed",
            Self::TaskCancelled => "task.cancelled",
        }
    }

    /// The type named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Whether events of this type end their task: exactly one does, and it is the last.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::TaskCompleted | Self::TaskFailed | Self::TaskCancelled
        )
    }
}

/// `type` and `data` of an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "data")]
pub enum EventData {
    #[serde(rename = "task.started")]
    TaskStarted(TaskStarted),
    #[serde(rename = "task.resumed")]
    TaskResumed(TaskResumed),
    #[serde(rename = "recursion.started")]
    RecursionStarted(RecursionStarted),
    #[serde(rename = "llm.retry")]
    LlmRetry(LlmRetry),
    #[serde(rename = "llm.delta")]
    LlmDelta(LlmDelta),
    #[serde(rename = "recursion.completed")]
    RecursionCompleted(RecursionCompleted),
    #[serde(rename = "plan.updated")]
    PlanUpdated(PlanUpdated),
    #[serde(rename = "step.updated")]
    StepUpdated(StepUpdated),
    #[serde(rename = "tool.started")]
    ToolStarted(ToolStarted),
    #[serde(rename = "tool.completed")]
    ToolCompleted(ToolCompleted),
    #[serde(rename = "context.compacted")]
    ContextCompacted(ContextCompacted),
    #[serde(rename = "budget.warning")]
    BudgetWarning(BudgetWarning),
    #[serde(rename = "budget.exceeded")]
    BudgetExceeded(BudgetExceeded),
    #[serde(rename = "task.waiting")]
    TaskWaiting(TaskWaiting),
    #[serde(rename = "approval.requested")]
    ApprovalRequested(ApprovalRequested),
    #[serde(rename = "approval.decided")]
    ApprovalDecided(ApprovalDecided),
    #[serde(rename = "input.injected")]
    InputInjected(InputInjected),
    #[serde(rename = "task.stalled")]
    TaskStalled(TaskStalled),
    #[serde(rename = "tool.unknown")]
    ToolUnknown(ToolUnknown),
    #[serde(rename = "tool.resolved")]
    ToolResolved(ToolResolved),
    #[serde(rename = "task.completed")]
    TaskCompleted(TaskCompleted),
    #[serde(rename = "task.failed")]
    TaskFailed(TaskFailed),
    #[serde(rename = "task.cancelled")]
    TaskCancelled(TaskCancelled),
}

impl EventData {
    /// The type of this payload.
    pub fn event_type(&self) -> EventType {
        match self {
            Self::TaskStarted(_) => EventType::TaskStarted,
            Self::TaskResumed(_) => EventType::TaskResumed,
            Self::RecursionStarted(_) => EventType::RecursionStarted,
            Self::LlmRetry(_) => EventType::LlmRetry,
            Self::LlmDelta(_) => EventType::LlmDelta,
            Self::RecursionCompleted(_) => EventType::RecursionCompleted,
            Self::PlanUpdated(_) => EventType::PlanUpdated,
            Self::StepUpdated(_) => EventType::StepUpdated,
            Self::ToolStarted(_) => EventType::ToolStarted,
            Self::ToolCompleted(_) => EventType::ToolCompleted,
            Self::ContextCompacted(_) => EventType::ContextCompacted,
            Self::BudgetWarning(_) => EventType::BudgetWarning,
            Self::BudgetExceeded(_) => EventType::BudgetExceeded,
            Self::TaskWaiting(_) => EventType::TaskWaiting,
            Self::ApprovalRequested(_) => EventType::ApprovalRequested,
            Self::ApprovalDecided(_) => EventType::ApprovalDecided,
            Self::InputInjected(_) => EventType::InputInjected,
            Self::TaskStalled(_) => EventType::TaskStalled,
            Self::ToolUnknown(_) => EventType::ToolUnknown,
            Self::ToolResolved(_) => EventType::ToolResolved,
            Self::TaskCompleted(_) => EventType::TaskCompleted,
            Self::TaskFailed(_) => EventType::TaskFailed,
            Self::TaskCancelled(_) => EventType::TaskCancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_carries_type_and_data() {
        let event = Event {
            event_id: Uuid::nil(),
            task_id: Uuid::nil(),
            agent_id: None,
            seq: 3,
            trace_id: None,
            iteration: Some(2),
            ts: Utc::now(),
            body: EventData::TaskCancelled(TaskCancelled { iterations: 2 }),
        };
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(value["type"], "task.cancelled");
        assert_eq!(value["data"]["iterations"], 2);
        assert_eq!(value["seq"], 3);
        let back: Event = serde_json::from_value(value).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn every_type_has_its_wire_name_and_round_trips() {
        for kind in EventType::ALL {
            assert_eq!(EventType::parse(kind.as_str()), Some(kind));
        }
        let terminal: Vec<_> = EventType::ALL
            .into_iter()
            .filter(EventType::is_terminal)
            .map(|t| t.as_str())
            .collect();
        assert_eq!(
            terminal,
            ["task.completed", "task.failed", "task.cancelled"]
        );
    }
}
