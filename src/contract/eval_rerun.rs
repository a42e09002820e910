//! The task message an evaluation run publishes for each selected task (CONTRACT v3 §13): a
//! task message (§2) with `task_id` = the rerun's deterministic id, the source's agent,
//! input and tenant, the version or channel under evaluation, and the field `rerun =
//! {"source_task_id", "llm", "tools"}` that makes it a rerun of its source, which takes the
//! source's constraints (so the message names none) and no conversation.

use serde::Serialize;
use uuid::Uuid;

use crate::core::eval::Mode;

/// The `rerun` field of a task message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerunField {
    pub source_task_id: Uuid,
    pub llm: Mode,
    pub tools: Mode,
}

/// A rerun's task message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerunMessage {
    pub task_id: Uuid,
    /// The source's (a rerun takes them; naming them keeps the message readable).
    pub agent_id: Uuid,
    pub input: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    pub tenant_id: String,
    pub rerun: RerunField,
}

impl RerunMessage {
    /// The message's JSON body.
    pub fn to_body(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn a_rerun_is_a_task_message_with_its_rerun_field() {
        let (task_id, agent_id, source) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let message = RerunMessage {
            task_id,
            agent_id,
            input: "what is 6*7?".into(),
            agent_version: Some(2),
            channel: None,
            tenant_id: "acme".into(),
            rerun: RerunField {
                source_task_id: source,
                llm: Mode::Recorded,
                tools: Mode::Live,
            },
        };
        let body: Value = serde_json::from_slice(&message.to_body().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "task_id": task_id, "agent_id": agent_id, "input": "what is 6*7?",
                "agent_version": 2, "tenant_id": "acme",
                "rerun": {"source_task_id": source, "llm": "recorded", "tools": "live"}
            })
        );
        let parsed =
            crate::contract::intake::parse_task(&message.to_body().unwrap(), None, 1 << 20)
                .expect("a valid task message");
        assert_eq!(parsed.task_id, task_id);
        assert_eq!(parsed.agent_id, agent_id);
    }
}
