//! Control messages of CONTRACT §2: persistent JSON on the `agentd.control` fanout exchange,
//! with the AMQP `type` property naming the message.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `cancel`: the task ends `cancelled` within a second wherever it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Cancel {
    pub task_id: Uuid,
}

/// A control message with its type.
///
/// `JsonSchema` is derived only so that the AsyncAPI document lists every variant with the
/// schema of its body: in that (externally tagged) schema the tag is the AMQP `type`
/// ([`ControlMessage::kind`]) and never part of the JSON, which is the body alone.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
pub enum ControlMessage {
    #[schemars(rename = "cancel")]
    Cancel(Cancel),
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
        }
    }

    /// The task the message is about.
    pub fn task_id(&self) -> Uuid {
        match self {
            Self::Cancel(cancel) => cancel.task_id,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        let body = match self {
            Self::Cancel(cancel) => serde_json::to_vec(cancel),
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
    }
}
