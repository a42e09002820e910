//! The task message of CONTRACT §2, as producers publish it to `agentd.tasks`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::core::budget::Budget;

/// One task: persistent JSON on the default exchange with routing key `agentd.tasks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskMessage {
    /// Generated when absent; a second message with the same id never runs the task twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Uuid>,
    /// A row of `agents`.
    pub agent_id: Uuid,
    /// The user's request; must not be blank.
    pub input: String,
    /// Groups tasks that are turns of one conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<Uuid>,
    /// Shown to the model as `context.constraints`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    /// Stream LLM tokens as `llm.delta` events.
    #[serde(default)]
    pub stream: bool,
    /// What the task may spend (CONTRACT §8); the agent's `budget` applies when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Run on this version of the agent (CONTRACT v3 §11); an unknown one rejects the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<i32>,
    /// Run on the version this channel of the agent serves (`stable`, `canary`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The tenant the task belongs to (CONTRACT v3 §15); its agent's when absent. A task
    /// whose tenant differs from its agent's is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// `high` or `normal` (the default): within a tenant held to `tenants.max_running`,
    /// high starts first (CONTRACT v3 §15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::core::fair_share::Priority>,
    /// Reproduce an ended task from its record (CONTRACT v3 §13): the task takes the
    /// source's agent, input and constraints (`agent_id` and `input` may then be left out,
    /// and must equal the source's when given) and the source's agent version unless
    /// `agent_version` or `channel` is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<crate::core::rerun::RerunSpec>,
}
