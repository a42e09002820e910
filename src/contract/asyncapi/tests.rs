//! The document against the committed copy, the configuration and the wire: every event
//! type's sample, serialized by serde, validates against its own message's schema only,
//! and broken messages do not.

use std::path::Path;

use chrono::Utc;
use jsonschema::{Draft, Registry, Validator};
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::contract::events::*;
use crate::contract::{ControlMessage, EventData, control};
use crate::core::machine::FailReason;
use crate::core::state::{RecursionStatus, StepStatus};

const DOC: &str = "urn:agentd:asyncapi";

/// A validator for the schema at `pointer` (e.g. `/components/messages/task/payload`).
fn validator(doc: &Value, pointer: &str) -> Validator {
    let registry = Registry::new()
        .add(DOC, Draft::Draft202012.create_resource(doc.clone()))
        .and_then(|registry| registry.prepare())
        .expect("registry");
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(true)
        .with_registry(&registry)
        .build(&json!({"$ref": format!("{DOC}#{pointer}")}))
        .expect("validator")
}

fn event_payload(doc: &Value, kind: &str) -> Validator {
    validator(doc, &format!("/components/messages/{kind}/payload"))
}

/// One payload of each type, through an exhaustive match.
fn sample(kind: EventType) -> EventData {
    let id = || Some("s1".to_owned());
    match kind {
        EventType::TaskStarted => EventData::TaskStarted(TaskStarted {
            input: "What is 2 + 2?".into(),
            max_iteration: 30,
            model: "gpt".into(),
            agent_name: "calc".into(),
            conversation_id: Some(Uuid::now_v7()),
            agent_version: Some(1),
            rerun_of: Some(Uuid::now_v7()),
        }),
        EventType::TaskResumed => EventData::TaskResumed(TaskResumed {
            iteration: 2,
            reason: ResumeReason::Recovered,
        }),
        EventType::RecursionStarted => EventData::RecursionStarted(RecursionStarted {
            iteration: 1,
            step_id: None,
        }),
        EventType::LlmRetry => EventData::LlmRetry(LlmRetry {
            attempt: 1,
            delay_ms: 1000,
            error: "HTTP 503".into(),
            status: Some(503),
        }),
        EventType::LlmDelta => EventData::LlmDelta(LlmDelta {
            content: "Th".into(),
            attempt: 1,
            truncated: None,
        }),
        EventType::RecursionCompleted => EventData::RecursionCompleted(RecursionCompleted {
            iteration: 1,
            step_id: id(),
            action_type: Some("ANSWER".into()),
            observe: "o".into(),
            thought: "t".into(),
            abstract_: "a".into(),
            status: RecursionStatus::Done,
            error_log: None,
            duration_ms: 12,
        }),
        EventType::PlanUpdated => EventData::PlanUpdated(PlanUpdated {
            plan: vec![PlanStepView {
                step_id: "s1".into(),
                description: "add".into(),
                status: StepStatus::Pending,
            }],
        }),
        EventType::StepUpdated => EventData::StepUpdated(StepUpdated {
            step_id: "s1".into(),
            status: StepStatus::Done,
        }),
        EventType::ToolStarted => EventData::ToolStarted(ToolStarted {
            tool_call_id: "call_1".into(),
            name: "calculate".into(),
            arguments: json!({"expression": "2+2"}),
        }),
        EventType::ToolCompleted => EventData::ToolCompleted(ToolCompleted {
            tool_call_id: "call_1".into(),
            name: "calculate".into(),
            success: true,
            result: Some(json!(4)),
            error: None,
            duration_ms: 1,
        }),
        EventType::ContextCompacted => EventData::ContextCompacted(ContextCompacted {
            before_tokens: 30_000,
            after_tokens: 9_000,
            folded_recursions: 5,
        }),
        EventType::BudgetWarning => EventData::BudgetWarning(BudgetWarning {
            limit: crate::core::budget::BudgetLimit::Tokens,
            used: 8_000.0,
            max: 10_000.0,
        }),
        EventType::BudgetExceeded => EventData::BudgetExceeded(BudgetExceeded {
            limit: crate::core::budget::BudgetLimit::CostUsd,
            used: 0.51,
            max: 0.5,
            action: crate::core::budget::BreachAction::Answer,
        }),
        EventType::TaskWaiting => EventData::TaskWaiting(TaskWaiting {
            reason: crate::core::machine::WaitReason::Paused,
            tool_call_ids: Vec::new(),
        }),
        EventType::ApprovalRequested => EventData::ApprovalRequested(ApprovalRequested {
            tool_call_id: "call_1".into(),
            name: "mail__send".into(),
            arguments: serde_json::json!({"to": "ana@example.com"}),
            effect: "side_effect".into(),
            expires_at: chrono::Utc::now(),
        }),
        EventType::ApprovalDecided => EventData::ApprovalDecided(ApprovalDecided {
            tool_call_id: "call_1".into(),
            decision: crate::core::approval::DecisionKind::Reject,
            by: Some("ana".into()),
            reason: Some("wrong address".into()),
            arguments: None,
            verified_by: Some("ops-key".into()),
        }),
        EventType::InputInjected => EventData::InputInjected(InputInjected {
            text: "prefer metric units".into(),
        }),
        EventType::TaskStalled => EventData::TaskStalled(crate::contract::events::TaskStalled {
            count: 3,
            action: crate::core::stall::StallAction::Nudge,
        }),
        EventType::ToolUnknown => EventData::ToolUnknown(crate::contract::events::ToolUnknown {
            tool_call_id: "call_0".into(),
            name: "t__charge".into(),
            arguments: json!({"amount": 5}),
            idempotency_key: Some("k:call_0".into()),
        }),
        EventType::ToolResolved => EventData::ToolResolved(crate::contract::events::ToolResolved {
            tool_call_id: "call_0".into(),
            outcome: crate::core::unknown::ResolveOutcome::Succeeded,
            result: Some(json!({"charged": 5})),
            error: None,
            reason: "the statement shows it".into(),
            by: Some("ann".into()),
            action_id: Uuid::now_v7(),
        }),
        EventType::TaskCompleted => EventData::TaskCompleted(TaskCompleted {
            answer: "4".into(),
            iterations: 2,
        }),
        EventType::TaskFailed => EventData::TaskFailed(TaskFailed {
            reason: FailReason::MaxIteration,
            error: "reached max_iteration".into(),
            iterations: 30,
            partial: None,
            divergence: None,
        }),
        EventType::TaskCancelled => EventData::TaskCancelled(TaskCancelled { iterations: 0 }),
    }
}

fn event(body: EventData) -> Value {
    let event = Event {
        event_id: Uuid::now_v7(),
        task_id: Uuid::now_v7(),
        agent_id: Some(Uuid::now_v7()),
        seq: 1,
        trace_id: None,
        iteration: Some(1),
        ts: Utc::now(),
        body,
    };
    serde_json::to_value(event).expect("event JSON")
}

#[test]
fn the_committed_copy_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/asyncapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = to_pretty_json().expect("document");
    let first_difference = committed
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .map_or_else(
            || "its length".to_owned(),
            |line| format!("line {}", line + 1),
        );
    assert!(
        committed == generated,
        "docs/asyncapi.json is not the generated document (first difference: {first_difference}); \
         regenerate it with `cargo run -- asyncapi > docs/asyncapi.json`"
    );
}

#[test]
fn every_event_type_and_control_type_has_its_message() {
    let doc = document().expect("document");
    let events: Vec<&str> = doc["operations"]["receiveEvents"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["$ref"].as_str()?.rsplit('/').next())
        .collect();
    let all: Vec<&str> = EventType::ALL.iter().map(EventType::as_str).collect();
    assert_eq!(events, all);
    for kind in all {
        let message = &doc["components"]["messages"][kind];
        assert_eq!(message["bindings"]["amqp"]["messageType"], kind);
        assert_eq!(message["payload"]["properties"]["type"]["const"], kind);
    }
    let controls = doc["channels"]["control"]["messages"]
        .as_object()
        .expect("control messages");
    assert_eq!(
        controls.keys().collect::<Vec<_>>(),
        ["approval", "cancel", "inject", "pause", "resolve", "resume"]
    );
    for kind in controls.keys() {
        // The worker knows the type: a bad body is invalid, not of an unknown type.
        assert!(matches!(
            ControlMessage::parse(Some(kind), b"[]"),
            Err(control::ControlError::Invalid { .. })
        ));
    }
}

#[test]
fn every_reference_resolves() {
    fn walk<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::Object(object) => {
                if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
                    found.push(reference);
                }
                object.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let doc = document().expect("document");
    let mut references = Vec::new();
    walk(&doc, &mut references);
    assert!(references.len() > 40);
    for reference in references {
        let pointer = reference.strip_prefix('#').expect("a local reference");
        assert!(
            doc.pointer(pointer).is_some(),
            "{reference} does not resolve"
        );
    }
}

#[test]
fn channel_names_are_the_configured_defaults() {
    let settings = crate::config::Settings::load_from(Path::new("config/default.toml"), None)
        .expect("config/default.toml");
    assert_eq!(settings.amqp.tasks_queue, TASKS_QUEUE);
    assert_eq!(settings.amqp.control_exchange, CONTROL_EXCHANGE);
    assert_eq!(settings.amqp.events_exchange, EVENTS_EXCHANGE);
}

#[test]
fn each_event_validates_against_its_own_message_only() {
    let doc = document().expect("document");
    let any_event = validator(&doc, "/components/schemas/Event");
    for kind in EventType::ALL {
        let body = sample(kind);
        assert_eq!(body.event_type(), kind);
        let event = event(body);
        let own = event_payload(&doc, kind.as_str());
        if let Err(error) = own.validate(&event) {
            panic!("{}: {error} in {event:#}", kind.as_str());
        }
        assert!(any_event.is_valid(&event), "{}", kind.as_str());
        for other in EventType::ALL.into_iter().filter(|other| *other != kind) {
            assert!(!event_payload(&doc, other.as_str()).is_valid(&event));
        }
    }
}

#[test]
fn broken_events_do_not_validate() {
    let doc = document().expect("document");
    let completed = event_payload(&doc, "task.completed");
    let good = event(sample(EventType::TaskCompleted));
    assert!(completed.is_valid(&good));
    let broken = |edit: fn(&mut Value)| {
        let mut event = good.clone();
        edit(&mut event);
        event
    };
    for bad in [
        broken(|e| drop(e["data"].as_object_mut().map(|d| d.remove("answer")))),
        broken(|e| e["data"]["iterations"] = json!("two")),
        broken(|e| e["data"]["iterations"] = json!(-1)),
        broken(|e| drop(e.as_object_mut().map(|e| e.remove("seq")))),
        broken(|e| e["event_id"] = json!("not-a-uuid")),
        broken(|e| e["ts"] = json!("yesterday")),
        broken(|e| e["type"] = json!("task.done")),
    ] {
        assert!(!completed.is_valid(&bad), "{bad:#}");
    }
    let failed = event_payload(&doc, "task.failed");
    let mut reason = event(sample(EventType::TaskFailed));
    reason["data"]["reason"] = json!("bored");
    assert!(!failed.is_valid(&reason));
    let mut unknown = good.clone();
    unknown["type"] = json!("task.exploded");
    assert!(!validator(&doc, "/components/schemas/Event").is_valid(&unknown));
}

#[test]
fn task_messages_as_submitted_validate() {
    let doc = document().expect("document");
    let task = validator(&doc, "/components/messages/task/payload");
    // What `agentd submit` and `POST /v1/tasks` publish: every field set.
    let full = TaskMessage {
        task_id: Some(Uuid::now_v7()),
        agent_id: Uuid::now_v7(),
        input: "What is 17 * 23 + 4?".into(),
        conversation_id: Some(Uuid::now_v7()),
        constraints: vec!["be brief".into()],
        stream: true,
        budget: Some(crate::core::budget::Budget {
            max_tokens: Some(10_000),
            max_cost_usd: Some(0.5),
            on_breach: crate::core::budget::BreachAction::Pause,
            ..Default::default()
        }),
        agent_version: Some(2),
        channel: None,
        tenant_id: Some("acme".into()),
        priority: Some(crate::core::fair_share::Priority::High),
        rerun: None,
    };
    let minimal = TaskMessage {
        task_id: None,
        agent_version: None,
        conversation_id: None,
        constraints: Vec::new(),
        stream: false,
        budget: None,
        tenant_id: None,
        priority: None,
        ..full.clone()
    };
    for message in [&full, &minimal] {
        let json = serde_json::to_value(message).expect("task JSON");
        if let Err(error) = task.validate(&json) {
            panic!("{error} in {json:#}");
        }
    }
    let agent = Uuid::now_v7();
    assert!(task.is_valid(&json!({"agent_id": agent, "input": "hi"})));
    for bad in [
        json!({"input": "hi"}),
        json!({"agent_id": agent, "input": 4}),
        json!({"agent_id": "someone", "input": "hi"}),
        json!({"agent_id": agent, "input": "hi", "constraints": "be brief"}),
        json!({"agent_id": agent, "input": "hi", "stream": "yes"}),
    ] {
        assert!(!task.is_valid(&bad), "{bad}");
    }
    let cancel = validator(&doc, "/components/messages/cancel/payload");
    assert!(cancel.is_valid(&json!({"task_id": agent})));
    assert!(!cancel.is_valid(&json!({"task": agent})));
}
