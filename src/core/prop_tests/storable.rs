//! Properties of what outside text becomes: arbitrary Unicode (NUL and its JSON escape,
//! U+FFFF and other noncharacters, long combining runs, lone-surrogate escapes, stray
//! backslashes and quotes) in a model's reply, its tool calls and a tool's results never
//! panics the machine, and everything the machine keeps or shows (its recursion records,
//! its checkpoint, its plan, the snapshot the model sees next) is storable, with every
//! tool call of the task under an id of its own. The rule itself (`json_text`) keeps valid
//! JSON valid and means the same as replacing in the parsed value.

use std::collections::BTreeSet;

use chrono::{DateTime, TimeZone, Utc};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};
use uuid::Uuid;

use super::config;
use super::strategies::json_value;
use crate::core::inbound::{self, is_storable_record, is_storable_result};
use crate::core::limits::Limits;
use crate::core::machine::{DomainEvent, Machine, Next, TaskInfo};
use crate::core::prompt::PromptTemplate;
use crate::core::storable::{self, is_storable, is_storable_json, json_text};
use crate::core::types::{LlmReply, ToolCallRequest, ToolCallResult};

/// Pieces of text that PostgreSQL, JSON or Unicode treat specially.
const UNICODE: &[&str] = &[
    "\u{0}",
    "\\u0000",
    "\\\\u0000",
    "\\\\\\u0000",
    "\\",
    "\\\\",
    "\"",
    "\u{FFFF}",
    "\u{FFFE}",
    "\u{FFFD}",
    "\u{10FFFF}",
    "\\ud800",
    "\\udfff",
    "\\ud83d\\ude00",
    "\\uFFFF",
    "e\u{301}",
    "\u{202E}",
    "\u{FEFF}",
    "好",
    "💥",
];

/// Text made of those pieces, any characters and long runs of combining marks.
pub(super) fn unicode_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => select(UNICODE).prop_map(str::to_owned),
        2 => any::<char>().prop_map(String::from),
        1 => (1usize..3_000).prop_map(|n| format!("a{}", "\u{301}".repeat(n))),
        2 => "[a-z ]{0,8}",
    ];
    vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// A reply's content: a reply object serialized (NUL as `\u0000`), the same object with the
/// text pasted in raw (lone-surrogate escapes, stray quotes: often not JSON), or prose.
fn content() -> impl Strategy<Value = String> {
    let kinds = select(&["ANSWER", "REFLECT", "RE_PLAN", "CALL_TOOL"][..]);
    (kinds, unicode_text(), unicode_text(), 0..3).prop_map(|(kind, a, b, shape)| match shape {
        0 => json!({"observe": a, "thought": b, "abstract": a,
                    "action": {"action_type": kind, "output": {"answer": b, "summary": b,
                        "plan": [{"step_id": a, "description": b}]}},
                    "short_term_memory_append": b,
                    "step_updates": [{"step_id": a, "status": "done"}]})
        .to_string(),
        1 => format!(
            r#"{{"observe":"{a}","thought":"{b}","action":{{"action_type":"{kind}","output":{{"answer":"{b}","summary":"{a}"}}}}}}"#
        ),
        _ => format!("{a}{b}"),
    })
}

/// Tool calls with repeated, empty and NUL ids, and arguments that may hold anything.
fn tool_calls() -> impl Strategy<Value = Vec<ToolCallRequest>> {
    let id = prop_oneof![
        select(&["", " ", "a", "a", "call_1", "a_1_2", "\u{0}", "\u{FFFD}"][..])
            .prop_map(str::to_owned),
        unicode_text(),
    ];
    let arguments = prop_oneof![
        unicode_text().prop_map(|text| json!({"expression": text}).to_string()),
        unicode_text(),
    ];
    vec((id, unicode_text(), arguments), 0..4).prop_map(|calls| {
        calls
            .into_iter()
            .map(|(id, name, arguments)| ToolCallRequest {
                id,
                name,
                arguments,
            })
            .collect()
    })
}

/// JSON whose strings and keys hold arbitrary Unicode.
fn unicode_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        json_value(),
        (unicode_text(), unicode_text(), json_value())
            .prop_map(|(key, text, nested)| json!({ key: [text, nested] })),
    ]
}

fn at(second: u32) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + i64::from(second), 0)
        .single()
        .unwrap_or_default()
}

fn machine() -> Machine {
    Machine::new(TaskInfo {
        task_id: Uuid::from_u128(1),
        agent_id: Uuid::from_u128(2),
        objective: "objective".into(),
        constraints: Vec::new(),
        max_iteration: 8,
        created_at: at(0),
        limits: Limits::default(),
        conversation: Vec::new(),
        budget: None,
        stall: Default::default(),
    })
}

/// A tool's result for `call`, made storable where it enters, as the driver does.
fn result_for(call: &ToolCallRequest, value: Value, error: Option<String>) -> ToolCallResult {
    inbound::tool_result(ToolCallResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
        success: error.is_none(),
        result: Some(value),
        error,
        memo: None,
        duration_ms: 1,
    })
}

/// Everything the machine keeps or shows after a step is storable.
fn assert_kept_storable(machine: &Machine, events: &[DomainEvent]) {
    for event in events {
        if let DomainEvent::RecursionCompleted(record) = event {
            assert!(is_storable_record(record), "{record:?}");
        }
    }
    let checkpoint = serde_json::to_string(machine).unwrap();
    let parsed: Value = serde_json::from_str(&checkpoint).unwrap();
    assert!(
        is_storable(&checkpoint) && is_storable_json(&parsed),
        "{checkpoint}"
    );
    assert!(is_storable_json(
        &serde_json::to_value(machine.plan()).unwrap()
    ));
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn whatever_a_model_and_its_tools_send_the_machine_keeps_storable(
        recursions in vec((content(), tool_calls(), vec((unicode_json(), proptest::option::of(unicode_text())), 4)), 1..4),
    ) {
        let template = PromptTemplate::new("{{current_state}}").unwrap();
        let mut machine = machine();
        let mut ids = BTreeSet::new();
        for (index, (content, calls, results)) in recursions.into_iter().enumerate() {
            let second = 2 * index as u32;
            let call = match machine.begin_recursion(Uuid::now_v7(), at(second), &template) {
                Next::CallLlm(call) => call,
                Next::Finished(_) => break,
                other => panic!("unexpected {other:?}"),
            };
            // The snapshot the model is shown is storable as well.
            let state: Value = serde_json::from_str(&call.messages[1].content.text()).unwrap();
            prop_assert!(is_storable_json(&state));
            let reply = LlmReply { content, tool_calls: calls, ..LlmReply::default() };
            let mut next = machine.on_llm_reply(&reply, at(second + 1));
            if let Next::RunTools(calls) = &next {
                for call in calls {
                    prop_assert!(is_storable(&call.id) && is_storable(&call.name));
                    prop_assert!(ids.insert(call.id.clone()), "id {:?} used twice", call.id);
                    let arguments: Option<Value> = serde_json::from_str(&call.arguments).ok();
                    prop_assert!(arguments.as_ref().is_none_or(is_storable_json));
                }
                let fed = calls.iter().zip(results).map(|(c, (v, e))| result_for(c, v, e)).collect();
                next = machine.on_tool_results(fed, at(second + 1));
            }
            let events = machine.take_events();
            assert_kept_storable(&machine, &events);
            if matches!(next, Next::Finished(_)) {
                break;
            }
        }
    }

    #[test]
    fn json_text_means_replacing_in_the_parsed_value(value in unicode_json()) {
        let text = value.to_string();
        let replaced = json_text(&text);
        let parsed: Value = serde_json::from_str(&replaced).unwrap();
        prop_assert_eq!(parsed, storable::json_owned(value));
    }

    #[test]
    fn json_text_of_any_text_is_storable_and_stable(text in unicode_text()) {
        let once = json_text(&text).into_owned();
        prop_assert!(is_storable(&once));
        prop_assert_eq!(json_text(&once), once.as_str());
        if let Ok(value) = serde_json::from_str::<Value>(&once) {
            prop_assert!(is_storable_json(&value));
        }
    }

    #[test]
    fn a_tool_result_is_made_storable_and_a_storable_one_is_kept(
        value in unicode_json(),
        error in proptest::option::of(unicode_text()),
        name in unicode_text(),
    ) {
        let call = ToolCallRequest { id: "c".into(), name, arguments: "{}".into() };
        let raw = ToolCallResult {
            result: Some(value),
            error,
            ..result_for(&call, Value::Null, None)
        };
        let made = inbound::tool_result(raw.clone());
        prop_assert!(is_storable_result(&made));
        if is_storable_result(&raw) {
            prop_assert_eq!(&made, &raw);
        }
        prop_assert_eq!(inbound::tool_result(made.clone()), made);
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// A person's resolve (CONTRACT §14) with any Unicode in its reason, `by`, error and
    /// result is storable once made so, and keeps its outcome (`lifecycle::resolutions`).
    #[test]
    fn a_resolution_with_any_unicode_is_recorded_storable(
        reason in unicode_text(),
        by in unicode_text(),
        error in unicode_text(),
        result in unicode_json(),
        call_id in unicode_text(),
    ) {
        use crate::core::unknown::{Resolution, ResolveOutcome};
        for outcome in [ResolveOutcome::Succeeded, ResolveOutcome::Failed] {
            let resolution = Resolution {
                outcome,
                result: (outcome == ResolveOutcome::Succeeded).then(|| result.clone()),
                error: (outcome == ResolveOutcome::Failed).then(|| error.clone()),
                reason: reason.clone(),
                by: Some(by.clone()),
            };
            let kept = resolution.storable();
            prop_assert_eq!(kept.outcome, outcome);
            prop_assert!(is_storable(&kept.reason));
            prop_assert!(kept.by.as_deref().is_some_and(is_storable));
            prop_assert!(kept.error.as_deref().is_none_or(is_storable));
            prop_assert!(is_storable_json(&kept.payload()));
            let (given, _) = kept
                .result_for(&storable::text(&call_id), "charge", json!({}))
                .expect("a result");
            prop_assert!(given.error.as_deref().is_none_or(is_storable));
            prop_assert!(given.result.as_ref().is_none_or(is_storable_json));
        }
    }
}
