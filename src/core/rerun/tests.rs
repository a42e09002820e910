//! The rerun decisions: answers while the keys match, the first difference, what the
//! source did not record, and tool calls served, run or refused.

use serde_json::json;

use super::*;

fn answers() -> RecordedAnswers {
    let mut answers = RecordedAnswers::new();
    answers.insert(
        1,
        RecordedAttempt {
            request_key: Some("k1".into()),
            response: Some(json!({"choices": [{"message": {"content": "one"}}]})),
        },
    );
    answers.insert(
        2,
        RecordedAttempt {
            request_key: Some("k2".into()),
            response: None,
        },
    );
    answers.insert(
        3,
        RecordedAttempt {
            request_key: None,
            response: None,
        },
    );
    answers
}

#[test]
fn a_matching_key_is_answered_from_the_record() {
    let answers = answers();
    let expected = json!({"choices": [{"message": {"content": "one"}}]});
    assert_eq!(replay_llm(&answers, 1, "k1"), LlmReplay::Answer(&expected));
}

#[test]
fn a_different_key_diverges_with_both_keys() {
    let answers = answers();
    let divergence = Divergence {
        iteration: 1,
        expected_key: Some("k1".into()),
        got_key: "other".into(),
    };
    assert_eq!(
        replay_llm(&answers, 1, "other"),
        LlmReplay::Diverged(divergence.clone())
    );
    // The error text reads back as the same fields.
    let text = divergence.error_text();
    assert_eq!(Divergence::from_error_text(&text), Some(divergence));
    let value: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(value["iteration"], 1);
    assert_eq!(value["expected_key"], "k1");
    assert_eq!(value["got_key"], "other");
}

#[test]
fn a_recursion_the_source_never_reached_diverges_without_an_expected_key() {
    let answers = answers();
    assert_eq!(
        replay_llm(&answers, 4, "k4"),
        LlmReplay::Diverged(Divergence {
            iteration: 4,
            expected_key: None,
            got_key: "k4".into(),
        })
    );
}

#[test]
fn a_hash_only_record_is_unrecorded_when_the_key_matches_and_diverged_when_not() {
    let answers = answers();
    assert!(matches!(
        replay_llm(&answers, 2, "k2"),
        LlmReplay::Unrecorded(Divergence { iteration: 2, .. })
    ));
    assert!(matches!(
        replay_llm(&answers, 2, "x"),
        LlmReplay::Diverged(Divergence { iteration: 2, .. })
    ));
}

#[test]
fn a_source_recorded_off_is_unrecorded() {
    let answers = answers();
    assert_eq!(
        replay_llm(&answers, 3, "k3"),
        LlmReplay::Unrecorded(Divergence {
            iteration: 3,
            expected_key: None,
            got_key: "k3".into(),
        })
    );
}

fn recorded(iteration: u32, name: &str, arguments: Value, result: &str) -> RecordedToolCall {
    RecordedToolCall {
        iteration,
        name: name.into(),
        arguments,
        success: true,
        result: Some(json!(result)),
        error: None,
        duration_ms: 5,
    }
}

#[test]
fn the_same_call_gets_the_sources_result_once_each() {
    let mut tools = RecordedTools::new(vec![
        recorded(1, "charge", json!({"a": 1, "b": 2}), "first"),
        recorded(1, "charge", json!({"a": 1, "b": 2}), "second"),
    ]);
    let args = json!({"b": 2, "a": 1});
    let call = (1, "charge", &args);
    let mode = RerunMode::Recorded;
    for expected in ["first", "second"] {
        match tools.decide(mode, call, ToolEffect::SideEffect) {
            ToolReplay::Recorded(source) => assert_eq!(source.result, Some(json!(expected))),
            other => panic!("{other:?}"),
        }
    }
    // A third equal call has no source call left: a side effect is refused.
    assert!(matches!(
        tools.decide(mode, call, ToolEffect::SideEffect),
        ToolReplay::Refused(error) if error.contains("charge") && error.contains("tools = live")
    ));
}

#[test]
fn another_iteration_name_or_arguments_do_not_match() {
    let source = vec![recorded(1, "charge", json!({"a": 1}), "done")];
    let mode = RerunMode::Recorded;
    for (iteration, name, args) in [
        (2, "charge", json!({"a": 1})),
        (1, "refund", json!({"a": 1})),
        (1, "charge", json!({"a": 2})),
    ] {
        let mut tools = RecordedTools::new(source.clone());
        let decided = tools.decide(mode, (iteration, name, &args), ToolEffect::SideEffect);
        assert!(matches!(decided, ToolReplay::Refused(_)), "{decided:?}");
    }
}

#[test]
fn unmatched_calls_without_side_effects_run() {
    let mut tools = RecordedTools::default();
    let args = json!({});
    let mode = RerunMode::Recorded;
    assert_eq!(
        tools.decide(mode, (1, "lookup", &args), ToolEffect::ReadOnly),
        ToolReplay::Run
    );
    assert_eq!(
        tools.decide(mode, (1, "upsert", &args), ToolEffect::Idempotent),
        ToolReplay::Run
    );
}

#[test]
fn live_tools_and_take_memo_always_run() {
    let args = json!({"a": 1});
    let mut tools = RecordedTools::new(vec![recorded(1, "charge", args.clone(), "x")]);
    assert_eq!(
        tools.decide(
            RerunMode::Live,
            (1, "charge", &args),
            ToolEffect::SideEffect
        ),
        ToolReplay::Run
    );
    let memo = json!({"note": "n"});
    let mut tools = RecordedTools::new(vec![recorded(1, "take_memo", memo.clone(), "x")]);
    assert_eq!(
        tools.decide(
            RerunMode::Recorded,
            (1, "take_memo", &memo),
            ToolEffect::ReadOnly
        ),
        ToolReplay::Run
    );
}

#[test]
fn modes_parse_by_wire_name_only() {
    assert_eq!(RerunMode::parse("recorded", "llm"), Ok(RerunMode::Recorded));
    assert_eq!(RerunMode::parse("live", "tools"), Ok(RerunMode::Live));
    let error = RerunMode::parse("Live", "tools").unwrap_err();
    assert!(error.contains("rerun.tools"), "{error}");
    assert_eq!(RerunMode::default().as_str(), "recorded");
}
