//! Stall detection wired into the machine (CONTRACT §14): each action, the snapshot's
//! `context.stall_warning`, `Stalled` events, the checkpoint, and polls that never stall.

use super::*;
use crate::core::stall::{STALL_ANSWER_NOW, StallAction, StallSettings};

fn machine(stall: &str) -> Machine {
    Machine::new(TaskInfo {
        stall: StallSettings::from_json(&serde_json::from_str(stall).unwrap()).unwrap(),
        ..task(20)
    })
}

/// Runs recursion `n` as a `calculate` call of `2+2` answered `result`; what follows it.
fn same_call(m: &mut Machine, n: u32, result: Value) -> Next {
    llm_call(m.begin_recursion(id(n.into()), at(n), &template()));
    let request = ToolCallRequest {
        id: "call_x".into(),
        name: "calculate".into(),
        arguments: r#"{"expression":"2+2"}"#.into(),
    };
    let calls = match m.on_llm_reply(&tool_reply(vec![request]), at(n)) {
        Next::RunTools(calls) => calls,
        other => panic!("expected RunTools, got {other:?}"),
    };
    let mut result = ok(&calls[0], result, None);
    result.arguments = json!({"expression": "2+2"});
    m.on_tool_results(vec![result], at(n))
}

fn stalls(m: &mut Machine) -> Vec<(u32, u32, StallAction)> {
    m.take_events()
        .into_iter()
        .filter_map(|event| match event {
            DomainEvent::Stalled {
                iteration,
                count,
                action,
                ..
            } => Some((iteration, count, action)),
            _ => None,
        })
        .collect()
}

fn answer() -> LlmReply {
    reply("ANSWER", json!({"answer": "4"}), json!({}))
}

#[test]
fn answer_forces_one_last_recursion_then_fails_no_progress_with_the_partial() {
    let mut m = machine(r#"{"repeat": 3, "action": "answer"}"#);
    // A reflection first: its summary is the partial result.
    llm_call(m.begin_recursion(id(100), at(0), &template()));
    let reflect = reply("REFLECT", json!({"summary": "2+2 is 4"}), json!({}));
    assert_eq!(m.on_llm_reply(&reflect, at(0)), Next::Continue);
    for n in 1..=3 {
        assert_eq!(same_call(&mut m, n, json!(4)), Next::Continue);
    }
    // The reflection was recursion 1: the third repeat is recursion 4.
    assert_eq!(stalls(&mut m), [(4, 3, StallAction::Answer)]);
    let last = llm_call(m.begin_recursion(id(4), at(4), &template()));
    assert_eq!(state(&last)["context"]["stall_warning"], STALL_ANSWER_NOW);
    let calls = vec![ToolCallRequest {
        id: "call_y".into(),
        name: "calculate".into(),
        arguments: "{}".into(),
    }];
    match m.on_llm_reply(&tool_reply(calls), at(5)) {
        Next::Finished(Outcome::Failed {
            reason: FailReason::NoProgress,
            partial,
            iterations,
            ..
        }) => {
            assert_eq!(partial.as_deref(), Some("2+2 is 4"));
            assert_eq!(iterations, 5);
        }
        other => panic!("expected a no_progress failure, got {other:?}"),
    }
}

#[test]
fn an_answer_on_the_last_recursion_completes() {
    let mut m = machine(r#"{"action": "answer"}"#);
    for n in 1..=3 {
        same_call(&mut m, n, json!(4));
    }
    llm_call(m.begin_recursion(id(4), at(4), &template()));
    assert!(matches!(
        m.on_llm_reply(&answer(), at(4)),
        Next::Finished(Outcome::Completed { .. })
    ));
}

#[test]
fn nudge_warns_in_the_snapshot_and_a_model_that_listens_completes() {
    let mut m = machine("{}");
    for n in 1..=3 {
        assert_eq!(same_call(&mut m, n, json!(4)), Next::Continue);
    }
    assert_eq!(stalls(&mut m), [(3, 3, StallAction::Nudge)]);
    let fourth = llm_call(m.begin_recursion(id(4), at(4), &template()));
    let warning = state(&fourth)["context"]["stall_warning"].clone();
    assert!(
        warning.as_str().unwrap().contains("last 3 recursions"),
        "{warning}"
    );
    assert!(matches!(
        m.on_llm_reply(&answer(), at(4)),
        Next::Finished(Outcome::Completed { .. })
    ));
}

#[test]
fn nudge_ignored_escalates_to_answer_then_fails() {
    let mut m = machine("{}");
    for n in 1..=6 {
        assert_eq!(same_call(&mut m, n, json!(4)), Next::Continue);
    }
    assert_eq!(
        stalls(&mut m),
        [(3, 3, StallAction::Nudge), (6, 6, StallAction::Answer)]
    );
    // A reply that cannot be used on the last recursion fails the task too.
    llm_call(m.begin_recursion(id(7), at(7), &template()));
    let garbage = LlmReply {
        content: "not json".into(),
        ..LlmReply::default()
    };
    assert!(matches!(
        m.on_llm_reply(&garbage, at(7)),
        Next::Finished(Outcome::Failed {
            reason: FailReason::NoProgress,
            ..
        })
    ));
    assert_eq!(stalls(&mut m), [(7, 7, StallAction::Fail)]);
}

#[test]
fn pause_waits_stalled_and_fail_ends_at_once() {
    let mut m = machine(r#"{"action": "pause"}"#);
    same_call(&mut m, 1, json!(4));
    same_call(&mut m, 2, json!(4));
    assert_eq!(
        same_call(&mut m, 3, json!(4)),
        Next::Wait(WaitReason::Stalled)
    );
    assert_eq!(WaitReason::Stalled.as_str(), "stalled");
    // Resumed: `repeat` fresh recursions before the next pause.
    assert_eq!(same_call(&mut m, 4, json!(4)), Next::Continue);
    let mut m = machine(r#"{"repeat": 2, "action": "fail"}"#);
    same_call(&mut m, 1, json!(4));
    match same_call(&mut m, 2, json!(4)) {
        Next::Finished(Outcome::Failed { reason, error, .. }) => {
            assert_eq!(reason.as_str(), "no_progress");
            assert!(error.contains("CALL_TOOL calculate"), "{error}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_poll_whose_result_changes_and_detection_off_never_stall() {
    let mut m = machine(r#"{"repeat": 2, "action": "fail"}"#);
    for n in 1..=10 {
        assert_eq!(same_call(&mut m, n, json!({"done": n})), Next::Continue);
    }
    assert!(stalls(&mut m).is_empty());
    let mut m = machine(r#"{"repeat": 0, "action": "fail"}"#);
    for n in 1..=10 {
        assert_eq!(same_call(&mut m, n, json!(4)), Next::Continue);
    }
    assert!(stalls(&mut m).is_empty());
}

#[test]
fn a_resumed_checkpoint_decides_as_the_original_would() {
    let mut m = machine(r#"{"action": "fail"}"#);
    same_call(&mut m, 1, json!(4));
    same_call(&mut m, 2, json!(4));
    let checkpoint = serde_json::to_string(&m).unwrap();
    let mut resumed: Machine = serde_json::from_str(&checkpoint).unwrap();
    assert!(matches!(
        same_call(&mut resumed, 3, json!(4)),
        Next::Finished(Outcome::Failed {
            reason: FailReason::NoProgress,
            ..
        })
    ));
    // A checkpoint written before stall detection loads with the default settings.
    let mut old: Value = serde_json::from_str(&checkpoint).unwrap();
    old.as_object_mut().unwrap().remove("stall");
    old["task"].as_object_mut().unwrap().remove("stall");
    let old: Machine = serde_json::from_value(old).unwrap();
    assert_eq!(old.task().stall, StallSettings::default());
}
