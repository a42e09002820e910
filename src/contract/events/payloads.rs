//! One payload type per event type of CONTRACT §3 (the `data` of an [`super::Event`]),
//! in the order of the contract's table. Re-exported by [`super`], so every name stays
//! `crate::contract::events::…`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::core::budget::{BreachAction, BudgetLimit};
use crate::core::machine::{FailReason, WaitReason};
use crate::core::state::{RecursionStatus, StepStatus};

/// `task.started`: a worker took the task up for the first time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskStarted {
    pub input: String,
    pub max_iteration: i32,
    pub model: String,
    pub agent_name: String,
    pub conversation_id: Option<Uuid>,
    /// The agent version the task is pinned to (CONTRACT v3 §11).
    pub agent_version: Option<i32>,
    /// The task this one reruns (CONTRACT v3 §13), when it is a rerun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<Uuid>,
}

/// Why a task was taken up again (`task.resumed`'s `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumeReason {
    /// Its worker died or let it go (shutdown, lost lease); another worker took it over.
    Recovered,
    /// A `resume` control message ended a `pause`.
    Resumed,
    /// A `resume` (with a larger budget) ended a wait for budget.
    Budget,
    /// Every gated tool call of the reply has a decision (CONTRACT §7).
    Approval,
    /// Every task it delegated to ended (CONTRACT §10).
    Child,
    /// Every held call of the reply was resolved by a person (CONTRACT §14).
    Resolved,
}

/// `task.resumed`: a task is taken up again from its last committed recursion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskResumed {
    /// Recursions committed before the resume.
    pub iteration: u32,
    pub reason: ResumeReason,
}

/// `recursion.started`: a recursion begins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecursionStarted {
    pub iteration: u32,
    /// The plan step it works on, if there is a plan.
    pub step_id: Option<String>,
}

/// `llm.retry`: an LLM attempt failed and will be retried after `delay_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LlmRetry {
    pub attempt: u32,
    pub delay_ms: u64,
    pub error: String,
    /// The HTTP status, when the provider answered.
    pub status: Option<u16>,
}

/// `llm.delta`: streamed content tokens (stream = true only), batched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LlmDelta {
    pub content: String,
    /// The attempt they belong to (a retried attempt streams again from the start).
    pub attempt: u32,
    /// True on the last `llm.delta` of a recursion that reached `llm.max_delta_bytes` or
    /// `llm.max_delta_events`: later tokens of that recursion are not sent as events (the
    /// reply itself is kept whole in `recursion.completed` and the trace). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

/// `recursion.completed`: a recursion ended, with the model's reply or the error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecursionCompleted {
    pub iteration: u32,
    pub step_id: Option<String>,
    /// CALL_TOOL, RE_PLAN, REFLECT or ANSWER; null when there was no usable reply.
    pub action_type: Option<String>,
    pub observe: String,
    pub thought: String,
    #[serde(rename = "abstract")]
    pub abstract_: String,
    pub status: RecursionStatus,
    pub error_log: Option<String>,
    pub duration_ms: i64,
}

/// A plan step as events show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanStepView {
    pub step_id: String,
    pub description: String,
    pub status: StepStatus,
}

/// `plan.updated`: RE_PLAN replaced the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanUpdated {
    pub plan: Vec<PlanStepView>,
}

/// `step.updated`: a plan step changed status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepUpdated {
    pub step_id: String,
    pub status: StepStatus,
}

/// `tool.started`: a tool call begins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolStarted {
    pub tool_call_id: String,
    pub name: String,
    /// The parsed arguments (the raw string when they were not JSON).
    pub arguments: Value,
}

/// `tool.completed`: `result` when it succeeded, `error` when it did not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCompleted {
    pub tool_call_id: String,
    pub name: String,
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// `context.compacted`: a request was over the context budget and was compacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextCompacted {
    pub before_tokens: u32,
    pub after_tokens: u32,
    pub folded_recursions: u32,
}

/// `budget.warning`: 80 % of a budget limit is used (published once per limit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetWarning {
    pub limit: BudgetLimit,
    pub used: f64,
    pub max: f64,
}

/// `budget.exceeded`: a budget limit is reached; `action` is what happens now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetExceeded {
    pub limit: BudgetLimit,
    pub used: f64,
    pub max: f64,
    pub action: BreachAction,
}

/// `task.waiting`: the task waits for someone; no worker holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskWaiting {
    pub reason: WaitReason,
    /// The calls waiting for a decision (reason `approval`); empty otherwise.
    #[serde(default)]
    pub tool_call_ids: Vec<String>,
}

/// `approval.requested`: a tool call needs a person's decision (CONTRACT §7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRequested {
    pub tool_call_id: String,
    pub name: String,
    /// The arguments as the model gave them (the raw string when they are not JSON).
    pub arguments: Value,
    /// read_only, idempotent or side_effect.
    pub effect: String,
    /// When the request expires and the agent's `on_approval_expiry` applies.
    pub expires_at: DateTime<Utc>,
}

/// `approval.decided`: a decision was taken about a gated call, or its request expired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalDecided {
    pub tool_call_id: String,
    pub decision: crate::core::approval::DecisionKind,
    /// Who decided (`agentd` for an expiry); null when the decider gave no name.
    pub by: Option<String>,
    /// Why (a rejection's reason, or the expiry's).
    pub reason: Option<String>,
    /// An edit's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Who decided as agentd knows it (CONTRACT v3 §15): the key that signed the control
    /// message, the gateway token's tenant and note, the CLI's OS user, `agentd` for an
    /// expiry; null when nothing verified it (`by` is then what the decider typed).
    #[serde(default)]
    pub verified_by: Option<String>,
}

/// `input.injected`: guidance from an `inject` reached the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InputInjected {
    pub text: String,
}

/// `task.stalled`: `count` recursions in a row had the same progress signature (CONTRACT
/// §14); `action` is what happens now (`nudge`, `answer`, `pause` or `fail`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskStalled {
    pub count: u32,
    pub action: crate::core::stall::StallAction,
}

/// `tool.unknown`: a side-effecting call's outcome is unknown after a crash and the agent
/// holds it for a person (`on_unknown` = `hold`, CONTRACT §14); the task waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolUnknown {
    pub tool_call_id: String,
    pub name: String,
    /// The parsed arguments (the raw string when they were not JSON).
    pub arguments: Value,
    /// `<task_id>:<tool_call_id>`: what the tool's side saw, to check whether it ran.
    pub idempotency_key: Option<String>,
}

/// `tool.resolved`: a person resolved a held call (the first resolution wins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolResolved {
    pub tool_call_id: String,
    pub outcome: crate::core::unknown::ResolveOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub reason: String,
    pub by: Option<String>,
    /// The `operator_actions` row.
    pub action_id: Uuid,
}

/// `task.completed`: the model answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskCompleted {
    pub answer: String,
    pub iterations: u32,
}

/// `task.failed`: the task ended without an answer (`reason` says why).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskFailed {
    pub reason: FailReason,
    pub error: String,
    pub iterations: u32,
    /// The best partial result, when there is one (the last REFLECT summary).
    pub partial: Option<String>,
    /// Reason `rerun_diverged` or `rerun_unrecorded` (CONTRACT v3 §13): `iteration`,
    /// `expected_key` and `got_key`, beside the other fields.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<crate::core::rerun::Divergence>,
}

/// `task.cancelled`: the task was cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskCancelled {
    pub iterations: u32,
}
