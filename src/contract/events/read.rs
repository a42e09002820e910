//! Reading events back, typed: what a subscriber (the gateway, the CLI, the bench) takes
//! from an event it received from the exchange or read from the `events` table. The
//! envelope is read without the payload ([`EventHead`]), so that an event of a type this
//! build does not know (published by a newer worker) is still relayed, ordered and
//! counted; the whole event is typed ([`Event::from_value`]) where its payload is shown.

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{Event, EventType};

/// The envelope of an event as a reader needs it first: whose it is, where it stands in the
/// task's stream, and its type by name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventHead {
    pub task_id: Uuid,
    /// 1, 2, 3, … per task, without gaps.
    pub seq: i64,
    /// The wire name (`task.started`, …), kept as sent: it may be one this build lacks.
    #[serde(rename = "type")]
    pub event_type: String,
}

impl EventHead {
    /// The head of a published body; `None` when the body is not an event.
    pub fn from_slice(body: &[u8]) -> Option<Self> {
        serde_json::from_slice(body).ok()
    }

    /// The head of an event's JSON (a published body, or a stored row's payload).
    pub fn from_value(event: &Value) -> Option<Self> {
        Self::deserialize(event).ok()
    }

    /// The type, when this build knows it.
    pub fn known_type(&self) -> Option<EventType> {
        EventType::parse(&self.event_type)
    }

    /// Whether the event ends its task (CONTRACT §3: exactly one does, and it is the last).
    pub fn is_terminal(&self) -> bool {
        self.known_type().is_some_and(|kind| kind.is_terminal())
    }
}

impl Event {
    /// The event of `event`'s JSON, payload and all; `None` when its type is one this build
    /// does not know or its payload does not read as that type's.
    pub fn from_value(event: &Value) -> Option<Self> {
        Self::deserialize(event).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::events::{EventData, TaskCompleted};
    use chrono::Utc;

    fn completed() -> Event {
        Event {
            event_id: Uuid::now_v7(),
            task_id: Uuid::now_v7(),
            agent_id: None,
            seq: 7,
            trace_id: None,
            iteration: None,
            ts: Utc::now(),
            body: EventData::TaskCompleted(TaskCompleted {
                answer: "4".into(),
                iterations: 2,
            }),
        }
    }

    #[test]
    fn an_event_reads_back_as_it_was_written() {
        let event = completed();
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(Event::from_value(&value), Some(event.clone()));
        let body = serde_json::to_vec(&event).unwrap();
        let head = EventHead::from_slice(&body).expect("a head");
        assert_eq!((head.task_id, head.seq), (event.task_id, 7));
        assert_eq!(head.known_type(), Some(EventType::TaskCompleted));
        assert!(head.is_terminal());
    }

    #[test]
    fn a_type_this_build_lacks_still_has_its_head() {
        let mut value = serde_json::to_value(completed()).unwrap();
        value["type"] = "task.teleported".into();
        assert_eq!(Event::from_value(&value), None);
        let head = EventHead::from_value(&value).expect("a head");
        assert_eq!(head.event_type, "task.teleported");
        assert_eq!(head.known_type(), None);
        assert!(!head.is_terminal());
        assert_eq!(EventHead::from_slice(b"[1]"), None);
    }
}
