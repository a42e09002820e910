//! Control messages of CONTRACT §2: persistent JSON on the `agentd.control` fanout exchange,
//! with the AMQP `type` property naming the message.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::core::approval::{Decision, DecisionKind};
use crate::core::budget::Budget;

/// `cancel`: the task ends `cancelled` within a second wherever it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Cancel {
    pub task_id: Uuid,
}

/// `pause`: the task stops before its next LLM call and waits (reason `paused`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Pause {
    pub task_id: Uuid,
}

/// `resume`: a task waiting for a pause or a budget continues; `budget` replaces its budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resume {
    pub task_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// `inject`: guidance for a running or waiting task, shown to the model from its next
/// recursion on as `context.user_guidance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Inject {
    pub task_id: Uuid,
    pub text: String,
}

impl Inject {
    /// Why the guidance cannot be sent: blank, or longer than `max_bytes` (UTF-8 bytes,
    /// `control.max_inject_bytes`: guidance stays in every later prompt of the task).
    pub fn refusal(text: &str, max_bytes: usize) -> Option<String> {
        if text.trim().is_empty() {
            return Some("text must not be blank".into());
        }
        (text.len() > max_bytes).then(|| {
            format!(
                "the text has {} bytes, more than control.max_inject_bytes ({max_bytes})",
                text.len()
            )
        })
    }
}

/// `approval`: a person's decision about a gated tool call (CONTRACT §7). The first
/// decision for a call wins; later ones change nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    pub task_id: Uuid,
    pub tool_call_id: String,
    /// approve, edit, reject or respond.
    pub decision: DecisionKind,
    /// `edit`: the arguments the call runs with (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// `reject`: why (the model sees it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `respond`: the result the model gets instead of running the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Approval {
    /// The decision as the core reads it.
    pub fn decision(&self) -> Decision {
        Decision {
            kind: self.decision,
            arguments: self.arguments.clone(),
            result: self.result.clone(),
            reason: self.reason.clone(),
            by: self.by.clone(),
        }
    }
}

/// `resolve`: a person's decision about a call whose outcome is unknown, held for them
/// (CONTRACT §14). The first resolution of a call wins; later ones change nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resolve {
    pub task_id: Uuid,
    pub tool_call_id: String,
    /// succeeded, failed, retry or skip.
    pub outcome: crate::core::unknown::ResolveOutcome,
    /// `succeeded`: the result the call had (the model gets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// `failed`: the call's error (the model gets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why (required).
    pub reason: String,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Resolve {
    /// The resolution as the core reads it.
    pub fn resolution(&self) -> crate::core::unknown::Resolution {
        crate::core::unknown::Resolution {
            outcome: self.outcome,
            result: self.result.clone(),
            error: self.error.clone(),
            reason: self.reason.clone(),
            by: self.by.clone(),
        }
    }
}

/// A control message with its type.
///
/// `JsonSchema` is derived only so that the AsyncAPI document lists every variant with the
/// schema of its body: in that (externally tagged) schema the tag is the AMQP `type`
/// ([`ControlMessage::kind`]) and never part of the JSON, which is the body alone.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
pub enum ControlMessage {
    #[schemars(rename = "cancel")]
    Cancel(Cancel),
    #[schemars(rename = "pause")]
    Pause(Pause),
    #[schemars(rename = "resume")]
    Resume(Resume),
    #[schemars(rename = "inject")]
    Inject(Inject),
    #[schemars(rename = "approval")]
    Approval(Approval),
    #[schemars(rename = "resolve")]
    Resolve(Resolve),
}

/// Why a control message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("control message without a type property")]
    MissingType,
    #[error("unknown control message type {0:?}")]
    UnknownType(String),
    #[error("invalid {kind} message: {reason}")]
    Invalid { kind: &'static str, reason: String },
}

impl ControlMessage {
    /// The AMQP `type` of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Cancel(_) => "cancel",
            Self::Pause(_) => "pause",
            Self::Resume(_) => "resume",
            Self::Inject(_) => "inject",
            Self::Approval(_) => "approval",
            Self::Resolve(_) => "resolve",
        }
    }

    /// The task the message is about.
    pub fn task_id(&self) -> Uuid {
        match self {
            Self::Cancel(cancel) => cancel.task_id,
            Self::Pause(pause) => pause.task_id,
            Self::Resume(resume) => resume.task_id,
            Self::Inject(inject) => inject.task_id,
            Self::Approval(approval) => approval.task_id,
            Self::Resolve(resolve) => resolve.task_id,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        let body = match self {
            Self::Cancel(cancel) => serde_json::to_vec(cancel),
            Self::Pause(pause) => serde_json::to_vec(pause),
            Self::Resume(resume) => serde_json::to_vec(resume),
            Self::Inject(inject) => serde_json::to_vec(inject),
            Self::Approval(approval) => serde_json::to_vec(approval),
            Self::Resolve(resolve) => serde_json::to_vec(resolve),
        };
        body.unwrap_or_default()
    }

    /// Reads a message from its AMQP `type` and body.
    pub fn parse(kind: Option<&str>, body: &[u8]) -> Result<Self, ControlError> {
        fn read<T: for<'de> Deserialize<'de>>(
            kind: &'static str,
            body: &[u8],
        ) -> Result<T, ControlError> {
            serde_json::from_slice(body).map_err(|err| ControlError::Invalid {
                kind,
                reason: err.to_string(),
            })
        }
        match kind {
            None => Err(ControlError::MissingType),
            Some("cancel") => read("cancel", body).map(Self::Cancel),
            Some("pause") => read("pause", body).map(Self::Pause),
            Some("inject") => {
                let mut inject: Inject = read("inject", body)?;
                // Guidance is stored (pending_guidance, input.injected): NUL cannot be.
                inject.text = crate::core::storable::owned(inject.text);
                if inject.text.trim().is_empty() {
                    return Err(ControlError::Invalid {
                        kind: "inject",
                        reason: "text must not be blank".into(),
                    });
                }
                Ok(Self::Inject(inject))
            }
            Some("resume") => {
                let resume: Resume = read("resume", body)?;
                if let Some(budget) = &resume.budget {
                    let any_price = crate::core::budget::Price {
                        input_per_mtok: 0.0,
                        output_per_mtok: 0.0,
                    };
                    budget
                        .validate(Some(&any_price), "")
                        .map_err(|err| ControlError::Invalid {
                            kind: "resume",
                            reason: err.to_string(),
                        })?;
                }
                Ok(Self::Resume(resume))
            }
            Some("approval") => {
                let approval: Approval = read("approval", body)?;
                approval
                    .decision()
                    .validate()
                    .map_err(|reason| ControlError::Invalid {
                        kind: "approval",
                        reason,
                    })?;
                Ok(Self::Approval(approval))
            }
            Some("resolve") => {
                let resolve: Resolve = read("resolve", body)?;
                resolve
                    .resolution()
                    .validate()
                    .map_err(|reason| ControlError::Invalid {
                        kind: "resolve",
                        reason,
                    })?;
                Ok(Self::Resolve(resolve))
            }
            Some(other) => Err(ControlError::UnknownType(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_type_and_body() {
        let cancel = ControlMessage::Cancel(Cancel {
            task_id: Uuid::now_v7(),
        });
        let parsed = ControlMessage::parse(Some(cancel.kind()), &cancel.body());
        assert_eq!(parsed, Ok(cancel));
        assert_eq!(
            ControlMessage::parse(Some("explode"), b"{}"),
            Err(ControlError::UnknownType("explode".into()))
        );
        assert!(matches!(
            ControlMessage::parse(Some("cancel"), b"{\"task\": 1}"),
            Err(ControlError::Invalid { .. })
        ));
        assert_eq!(
            ControlMessage::parse(None, b"{}"),
            Err(ControlError::MissingType)
        );
        let resume = ControlMessage::Resume(Resume {
            task_id: Uuid::now_v7(),
            budget: Some(Budget {
                max_tokens: Some(500),
                ..Budget::default()
            }),
        });
        assert_eq!(
            ControlMessage::parse(Some("resume"), &resume.body()),
            Ok(resume)
        );
        let pause = ControlMessage::Pause(Pause {
            task_id: Uuid::now_v7(),
        });
        assert_eq!(
            ControlMessage::parse(Some("pause"), &pause.body()),
            Ok(pause)
        );
        assert!(matches!(
            ControlMessage::parse(
                Some("resume"),
                br#"{"task_id":"0195f3a0-0000-7000-8000-000000000001","budget":{"max_tokens":0}}"#
            ),
            Err(ControlError::Invalid { .. })
        ));
        let approval = ControlMessage::Approval(Approval {
            task_id: Uuid::now_v7(),
            tool_call_id: "call_1".into(),
            decision: DecisionKind::Edit,
            arguments: Some(serde_json::json!({"to": "b"})),
            reason: None,
            result: None,
            by: Some("ana".into()),
        });
        assert_eq!(
            ControlMessage::parse(Some("approval"), &approval.body()),
            Ok(approval)
        );
        // An edit without arguments, and a decision kind no person sends, are refused.
        for body in [
            r#"{"task_id":"0195f3a0-0000-7000-8000-000000000001","tool_call_id":"c","decision":"edit"}"#,
            r#"{"task_id":"0195f3a0-0000-7000-8000-000000000001","tool_call_id":"c","decision":"expired"}"#,
            r#"{"task_id":"0195f3a0-0000-7000-8000-000000000001","tool_call_id":"c","decision":"maybe"}"#,
        ] {
            assert!(matches!(
                ControlMessage::parse(Some("approval"), body.as_bytes()),
                Err(ControlError::Invalid { .. })
            ));
        }
    }

    #[test]
    fn guidance_is_refused_blank_or_over_the_cap() {
        assert_eq!(Inject::refusal("go on", 5), None);
        assert!(Inject::refusal(" \n", 5).is_some_and(|r| r.contains("blank")));
        let over = Inject::refusal("é too", 5).expect("6 bytes");
        assert!(
            over.contains("6 bytes") && over.contains("max_inject_bytes"),
            "{over}"
        );
    }

    #[test]
    fn injected_guidance_is_made_storable() {
        let body = br#"{"task_id":"0195f3a0-0000-7000-8000-000000000001","text":"go\u0000on"}"#;
        let Ok(ControlMessage::Inject(inject)) = ControlMessage::parse(Some("inject"), body) else {
            panic!("an inject");
        };
        assert_eq!(inject.text, "go\u{FFFD}on");
    }
}
