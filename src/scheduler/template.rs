//! A schedule's task template (`schedules.task_template`, CONTRACT v3 §14): what each
//! fire's task message carries besides `task_id`, `agent_id` and `input`, checked when the
//! schedule is made so that its fires are not rejected one by one later; and a refused
//! field of a schedule request ([`FieldError`]), which the template's checks and `spec`'s
//! both give.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::core::budget::{Budget, Price};
use crate::core::storable;

/// A refused field: `"{field}: {problem}"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// The field as the gateway's JSON names it (`cron`, `timezone`, `task_template.budget`).
    pub field: &'static str,
    pub problem: String,
}

impl FieldError {
    /// A refusal of `field`.
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}

/// The fields of a task message (CONTRACT §2, §8, §11, §15) a schedule may set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskTemplate {
    /// Shown to the model as `context.constraints`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    /// Stream LLM tokens as `llm.delta` events.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// What each task may spend; the agent's budget applies when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The agent version each task is pinned to (§11), passed on in the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<i32>,
    /// The agent channel each task takes its version from (§11), passed on in the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// `high` or `normal` (§15), passed on in the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

/// Longest accepted channel name.
const MAX_CHANNEL: usize = 100;

impl TaskTemplate {
    /// Reads a template from JSON (a request's `task_template`), naming the field that is
    /// wrong.
    pub fn from_json(value: Value) -> Result<Self, FieldError> {
        serde_json::from_value(value)
            .map_err(|err| FieldError::new("task_template", err.to_string()))
    }

    /// Reads a stored template; one that cannot be read (written by hand) is logged and
    /// the fire goes on with none, rather than the schedule stopping.
    pub fn from_stored(schedule_id: Uuid, value: &Value) -> Self {
        Self::from_json(value.clone()).unwrap_or_else(|err| {
            tracing::warn!(%schedule_id, error = %err, "unreadable task_template ignored");
            Self::default()
        })
    }

    /// Checks the fields and makes the constraints storable; `price` is that of the
    /// agent's model (`None`: it has none), for a cost limit.
    pub fn checked(mut self, price: Option<&Price>, model: &str) -> Result<Self, FieldError> {
        if self.constraints.iter().any(|c| c.trim().is_empty()) {
            return Err(FieldError::new(
                "task_template.constraints",
                "must not contain blank strings",
            ));
        }
        self.constraints = self.constraints.into_iter().map(storable::owned).collect();
        if let Some(budget) = &self.budget {
            budget
                .validate(price, model)
                .map_err(|err| FieldError::new("task_template.budget", err.to_string()))?;
        }
        if self.agent_version.is_some_and(|v| v < 1) {
            return Err(FieldError::new(
                "task_template.agent_version",
                "must be at least 1",
            ));
        }
        if let Some(channel) = &self.channel {
            let valid = !channel.trim().is_empty() && channel.chars().count() <= MAX_CHANNEL;
            if !valid {
                return Err(FieldError::new(
                    "task_template.channel",
                    format!("must be 1 to {MAX_CHANNEL} characters"),
                ));
            }
            self.channel = Some(storable::owned(channel.clone()));
        }
        if let Some(priority) = &self.priority {
            crate::core::fair_share::Priority::parse(priority)
                .map_err(|problem| FieldError::new("task_template.priority", problem))?;
        }
        Ok(self)
    }

    /// The template as `schedules.task_template` stores it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }

    /// The task message of one fire: the template with the task's ids and input.
    pub fn message(&self, task_id: Uuid, agent_id: Uuid, input: &str) -> Value {
        let mut message = self.to_json();
        if let Value::Object(fields) = &mut message {
            fields.insert("task_id".into(), json!(task_id));
            fields.insert("agent_id".into(), json!(agent_id));
            fields.insert("input".into(), json!(input));
        }
        message
    }

    /// The budget as `tasks.budget` stores it.
    pub fn budget_json(&self) -> Option<Value> {
        self.budget
            .as_ref()
            .and_then(|b| serde_json::to_value(b).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fire_s_message_is_a_task_message_the_worker_reads() {
        let template = TaskTemplate::from_json(json!({
            "constraints": ["be brief"], "stream": true,
            "budget": {"max_tokens": 1000, "on_breach": "fail"}
        }))
        .expect("a template");
        let (task, agent) = (Uuid::now_v7(), Uuid::now_v7());
        let body = serde_json::to_vec(&template.message(task, agent, "nightly report")).unwrap();
        let message: crate::contract::TaskMessage = serde_json::from_slice(&body).unwrap();
        assert_eq!(message.task_id, Some(task));
        assert_eq!(message.agent_id, agent);
        assert_eq!(message.input, "nightly report");
        assert_eq!(message.constraints, ["be brief"]);
        assert!(message.stream);
        assert_eq!(message.budget.and_then(|b| b.max_tokens), Some(1000));
    }

    #[test]
    fn bad_fields_are_named() {
        let problem = |value: Value| {
            TaskTemplate::from_json(value)
                .and_then(|t| t.checked(None, "m"))
                .unwrap_err()
                .to_string()
        };
        assert!(problem(json!({"colour": 1})).starts_with("task_template: unknown field"));
        assert!(problem(json!({"constraints": [" "]})).starts_with("task_template.constraints"));
        let cost = problem(json!({"budget": {"max_cost_usd": 1.0}}));
        assert!(cost.starts_with("task_template.budget"), "{cost}");
        assert!(problem(json!({"agent_version": 0})).starts_with("task_template.agent_version"));
        assert!(problem(json!({"priority": "urgent"})).starts_with("task_template.priority"));
    }

    #[test]
    fn nul_in_a_constraint_becomes_the_replacement_character() {
        let template = TaskTemplate::from_json(json!({"constraints": ["a\u{0}b"]}))
            .and_then(|t| t.checked(None, "m"))
            .unwrap();
        assert_eq!(template.constraints, ["a\u{FFFD}b"]);
    }
}
