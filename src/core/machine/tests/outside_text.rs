//! What a model sends that PostgreSQL could not keep, or that would collide in the ledger:
//! NUL in a reply and in tool-call arguments, repeated and empty tool-call ids. The machine
//! holds, shows the model and records the same storable text; and a failure outside the
//! machine (a refused step) ends the task `internal`.

use super::*;
use crate::core::storable;
use serde_json::json;

/// A CALL_TOOL reply whose calls have these ids (same arguments each).
fn calls_with_ids(ids: &[&str]) -> LlmReply {
    let calls = ids
        .iter()
        .map(|id| ToolCallRequest {
            id: (*id).to_owned(),
            ..call(1)
        })
        .collect();
    tool_reply(calls)
}

fn run_tools(next: Next) -> Vec<ToolCallRequest> {
    match next {
        Next::RunTools(calls) => calls,
        other => panic!("expected RunTools, got {other:?}"),
    }
}

#[test]
fn nul_in_a_reply_and_its_arguments_is_held_shown_and_recorded_as_u_fffd() {
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    let reply = LlmReply {
        content: json!({"observe": "o\u{0}", "thought": "a\u{0}b",
            "action": {"action_type": "CALL_TOOL", "output": {}}})
        .to_string(),
        tool_calls: vec![ToolCallRequest {
            id: "c\u{0}".into(),
            name: "calculate".into(),
            arguments: json!({"expression": "1\u{0}"}).to_string(),
        }],
        ..LlmReply::default()
    };
    assert!(
        reply.content.contains("\\u0000"),
        "the escape, as a model sends it"
    );
    let calls = run_tools(m.on_llm_reply(&reply, at(2)));
    assert_eq!(calls[0].id, "c\u{FFFD}");
    assert_eq!(calls[0].arguments, r#"{"expression":"1\ufffd"}"#);
    let result = ok(&calls[0], json!("2"), None);
    assert_eq!(m.on_tool_results(vec![result], at(3)), Next::Continue);
    let events = m.take_events();
    let record = completed(events.last().unwrap());
    assert_eq!(
        (record.observe.as_str(), record.thought.as_str()),
        ("o\u{FFFD}", "a\u{FFFD}b")
    );
    assert!(crate::core::inbound::is_storable_record(record));

    // The next recursion shows the model what was recorded, and the checkpoint holds it.
    let next = llm_call(m.begin_recursion(id(2), at(4), &template()));
    let last = &state(&next)["last_recursion"];
    assert_eq!(last["thought"], "a\u{FFFD}b");
    assert_eq!(last["tool_call_results"][0]["tool_call_id"], "c\u{FFFD}");
    let history = next.messages[2].content.text();
    assert!(
        history.contains("c\u{FFFD}") && !history.contains("\\u0000"),
        "{history}"
    );
    let checkpoint = serde_json::to_string(&m).unwrap();
    assert!(!checkpoint.contains("\\u0000"), "{checkpoint}");
    assert!(storable::is_storable(&checkpoint));
}

#[test]
fn repeated_and_empty_tool_call_ids_become_unique_within_the_task() {
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    let calls = run_tools(m.on_llm_reply(&calls_with_ids(&["x", "x", ""]), at(2)));
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["x", "x_1_2", "call_1_3"]);
    let results = calls.iter().map(|c| ok(c, json!(1), None)).collect();
    assert_eq!(m.on_tool_results(results, at(3)), Next::Continue);

    // Resumed from its checkpoint, the task still knows the ids it used.
    let mut m: Machine = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    llm_call(m.begin_recursion(id(2), at(4), &template()));
    let calls = run_tools(m.on_llm_reply(&calls_with_ids(&["x", "y"]), at(5)));
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["x_2_1", "y"]);
}

#[test]
fn fail_internal_closes_the_open_recursion_and_ends_the_task() {
    let mut m = Machine::new(task(5));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(
        &reply("REFLECT", json!({"summary": "so far"}), json!({})),
        at(2),
    );
    m.begin_recursion(id(2), at(3), &template());
    m.take_events();
    let outcome = m.fail_internal("PostgreSQL refused to store recursion 1", at(4));
    let expected = Outcome::Failed {
        reason: FailReason::Internal,
        error: "PostgreSQL refused to store recursion 1".into(),
        iterations: 2,
        partial: Some("so far".into()),
    };
    assert_eq!(outcome, expected);
    assert_eq!(m.outcome(), Some(&expected));
    let events = m.take_events();
    assert_eq!(completed(&events[0]).status, RecursionStatus::Error);
}
