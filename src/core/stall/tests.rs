//! Stall detection: the settings, the signature's canonical form, and every action of the
//! tracker, the off switch and polls whose results change.

use serde_json::{Value, json};

use super::*;
use crate::core::types::ToolCallResult;

fn call(id: &str, name: &str, arguments: Value, result: Value) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: id.into(),
        name: name.into(),
        arguments,
        success: true,
        result: Some(result),
        error: None,
        memo: None,
        duration_ms: id.len() as u64,
    }
}

fn tools(results: &[ToolCallResult]) -> ProgressSignature {
    ProgressSignature::of(&RecursionFacts {
        action_type: Some("CALL_TOOL"),
        action_output: Some(&json!({})),
        tool_results: Some(results),
        error_log: None,
    })
}

fn search(id: &str, result: &str) -> ProgressSignature {
    tools(&[call(id, "search", json!({"q": "rust"}), json!(result))])
}

fn settings(text: &str) -> StallSettings {
    StallSettings::from_json(&serde_json::from_str(text).unwrap()).expect("valid settings")
}

/// Feeds `signature` `times` times; the verdicts in order.
fn feed(
    tracker: &mut StallTracker,
    settings: &StallSettings,
    signature: &ProgressSignature,
    times: usize,
) -> Vec<StallVerdict> {
    (0..times)
        .map(|_| tracker.observe(settings, signature))
        .collect()
}

#[test]
fn settings_defaults_off_switch_and_refusals() {
    assert_eq!(
        StallSettings::default(),
        settings(r#"{"repeat": 3, "action": "nudge"}"#)
    );
    assert_eq!(
        StallSettings::from_json(&Value::Null).unwrap(),
        StallSettings::default()
    );
    assert_eq!(settings("{}"), StallSettings::default());
    assert!(settings(r#"{"repeat": 0}"#).is_off());
    let fail = settings(r#"{"action": "fail"}"#);
    assert_eq!((fail.repeat, fail.action), (3, StallAction::Fail));
    assert_eq!(
        serde_json::to_value(settings(r#"{"repeat": 5, "action": "pause"}"#)).unwrap(),
        json!({"repeat": 5, "action": "pause"})
    );
    let refused = |text: &str, expected: &str| {
        let error = StallSettings::from_json(&serde_json::from_str(text).unwrap()).unwrap_err();
        assert!(error.to_string().contains(expected), "{text}: {error}");
    };
    refused(
        r#"{"repeat": 3, "actoin": "fail"}"#,
        "unknown field `actoin`",
    );
    refused(r#"{"action": "retry"}"#, "unknown variant `retry`");
    refused(r#"{"repeat": 1}"#, "use 0 (off) or 2 or more");
    refused(r#"{"repeat": 1001}"#, "more than 1000");
    refused(r#"{"repeat": -1}"#, "invalid value");
    refused(r#"{"repeat": "3"}"#, "invalid type");
    refused(r#"[3, "nudge"]"#, "expected an object");
    refused(r#""nudge""#, "expected an object");
    // Plain serde validates too.
    assert!(serde_json::from_str::<StallSettings>(r#"{"repeat": 1}"#).is_err());
}

#[test]
fn arguments_are_canonical_and_call_ids_durations_and_order_do_not_count() {
    let a: Value = serde_json::from_str(r#"{"b": 1, "a": [{"y": 2, "x": 1}]}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"a":[{"x":1,"y":2}],"b":1}"#).unwrap();
    let one = tools(&[
        call("c1", "f", a.clone(), json!(1)),
        call("c2", "g", json!({}), json!(2)),
    ]);
    let two = tools(&[
        call("c9", "g", json!({}), json!(2)),
        call("xx", "f", b, json!(1)),
    ]);
    assert_eq!(one.hash, two.hash);
    let other_args = tools(&[
        call(
            "c1",
            "f",
            json!({"b": 2, "a": [{"y": 2, "x": 1}]}),
            json!(1),
        ),
        call("c2", "g", json!({}), json!(2)),
    ]);
    assert_ne!(one.hash, other_args.hash);
    let other_tool = tools(&[
        call("c1", "h", a, json!(1)),
        call("c2", "g", json!({}), json!(2)),
    ]);
    assert_ne!(one.hash, other_tool.hash);
    // A failed call differs from a successful one with the same arguments.
    let mut failed = call("c1", "f", json!({}), json!(null));
    (failed.success, failed.result, failed.error) = (false, None, Some("timeout".into()));
    assert_ne!(
        tools(&[failed.clone()]).hash,
        tools(&[call("c1", "f", json!({}), json!(null))]).hash
    );
    assert_eq!(tools(&[failed.clone()]).hash, tools(&[failed]).hash);
}

/// The signature of a recursion without tool calls.
fn other(action_type: Option<&str>, output: &Value, error_log: Option<&str>) -> ProgressSignature {
    ProgressSignature::of(&RecursionFacts {
        action_type,
        action_output: Some(output),
        tool_results: None,
        error_log,
    })
}

#[test]
fn other_actions_and_errors_have_signatures_too() {
    let step = |status: &str| json!({"step_id": "1", "description": "d", "status": status});
    let plan = other(
        Some("RE_PLAN"),
        &json!({"plan": [step("pending")], "notes": "x"}),
        None,
    );
    let reordered =
        json!({"notes": "y", "plan": [{"status": "pending", "description": "d", "step_id": "1"}]});
    assert_eq!(plan.hash, other(Some("RE_PLAN"), &reordered, None).hash);
    assert_ne!(
        plan.hash,
        other(Some("RE_PLAN"), &json!({"plan": [step("done")]}), None).hash
    );
    assert_eq!(plan.summary, "RE_PLAN");
    let summary = json!({"summary": "known: x"});
    let reflect = other(Some("REFLECT"), &summary, None);
    assert_ne!(reflect.hash, plan.hash);
    assert_eq!(reflect.hash, other(Some("REFLECT"), &summary, None).hash);
    assert_ne!(
        reflect.hash,
        other(Some("REFLECT"), &json!({"summary": "known: y"}), None).hash
    );
    let error = "reply rejected: no JSON object";
    let bad = other(None, &Value::Null, Some(error));
    assert_eq!(bad.hash, other(None, &Value::Null, Some(error)).hash);
    let empty = "reply rejected: the reply was empty";
    assert_ne!(bad.hash, other(None, &Value::Null, Some(empty)).hash);
    assert_eq!(bad.summary, "no usable reply");
}

#[test]
fn repeated_reflections_and_unusable_replies_stall_too() {
    let fail = settings(r#"{"action": "fail"}"#);
    let mut tracker = StallTracker::new();
    let reflect = other(Some("REFLECT"), &json!({"summary": "stuck"}), None);
    assert_eq!(
        feed(&mut tracker, &fail, &reflect, 3)[2],
        StallVerdict::Fail { count: 3 }
    );
    let mut tracker = StallTracker::new();
    let bad = other(None, &Value::Null, Some("reply rejected: no JSON object"));
    assert_eq!(
        feed(&mut tracker, &fail, &bad, 3)[2],
        StallVerdict::Fail { count: 3 }
    );
}

#[test]
fn the_summary_is_storable_and_bounded() {
    let name = format!("tool\0{}", "x".repeat(500));
    let signature = tools(&[call("1", &name, json!({}), json!(1))]);
    assert!(crate::core::storable::is_storable(&signature.summary));
    assert!(signature.summary.starts_with("CALL_TOOL tool\u{FFFD}x"));
    assert!(signature.summary.chars().count() < 300);
}

#[test]
fn nudge_warns_then_forces_an_answer_then_fails() {
    let nudge = StallSettings::default();
    let mut tracker = StallTracker::new();
    let same = search("a", "no results");
    let verdicts = feed(&mut tracker, &nudge, &same, 3);
    assert_eq!(
        verdicts[..2],
        [StallVerdict::Continue, StallVerdict::Continue]
    );
    let StallVerdict::Warn { count: 3, text } = &verdicts[2] else {
        panic!("expected a warning, got {:?}", verdicts[2]);
    };
    assert!(
        text.contains("last 3 recursions") && text.contains("CALL_TOOL search"),
        "{text}"
    );
    assert_eq!(tracker.warning(), Some(text.as_str()));
    assert_eq!(verdicts[2].event(), Some((3, StallAction::Nudge)));
    // The next three still repeat: the third of them forces an answer.
    let verdicts = feed(&mut tracker, &nudge, &same, 3);
    assert_eq!(
        verdicts[..2],
        [StallVerdict::Continue, StallVerdict::Continue]
    );
    assert_eq!(verdicts[2], StallVerdict::ForceAnswer { count: 6 });
    assert_eq!(verdicts[2].event(), Some((6, StallAction::Answer)));
    assert!(tracker.must_answer());
    assert_eq!(tracker.warning(), Some(STALL_ANSWER_NOW));
    // The last recursion did anything but ANSWER.
    assert_eq!(
        tracker.observe(&nudge, &search("b", "other")),
        StallVerdict::Fail { count: 7 }
    );
}

#[test]
fn a_model_that_obeys_the_warning_is_left_alone() {
    let nudge = StallSettings::default();
    let mut tracker = StallTracker::new();
    feed(&mut tracker, &nudge, &search("a", "none"), 3);
    assert!(tracker.warning().is_some());
    let different = tools(&[call(
        "c",
        "fetch",
        json!({"url": "https://x"}),
        json!("page"),
    )]);
    assert_eq!(tracker.observe(&nudge, &different), StallVerdict::Continue);
    assert_eq!(tracker.warning(), None);
    assert_eq!(tracker.count(), 1);
}

#[test]
fn answer_pause_and_fail_act_at_the_nth_repeat() {
    let same = search("a", "none");
    let mut tracker = StallTracker::new();
    let verdicts = feed(&mut tracker, &settings(r#"{"action": "answer"}"#), &same, 3);
    assert_eq!(verdicts[2], StallVerdict::ForceAnswer { count: 3 });
    let mut tracker = StallTracker::new();
    let verdicts = feed(
        &mut tracker,
        &settings(r#"{"repeat": 2, "action": "fail"}"#),
        &same,
        2,
    );
    assert_eq!(
        verdicts,
        [StallVerdict::Continue, StallVerdict::Fail { count: 2 }]
    );
    assert_eq!(verdicts[1].event(), Some((2, StallAction::Fail)));
    // Pause: after a resume the task gets `repeat` fresh recursions before pausing again.
    let pause = settings(r#"{"action": "pause"}"#);
    let mut tracker = StallTracker::new();
    let verdicts = feed(&mut tracker, &pause, &same, 6);
    assert_eq!(verdicts[2], StallVerdict::Pause { count: 3 });
    assert_eq!(verdicts[2].event(), Some((3, StallAction::Pause)));
    assert_eq!(
        verdicts[3..5],
        [StallVerdict::Continue, StallVerdict::Continue]
    );
    assert_eq!(verdicts[5], StallVerdict::Pause { count: 3 });
    assert_eq!(tracker.warning(), None);
}

#[test]
fn detection_off_never_acts() {
    let off = settings(r#"{"repeat": 0, "action": "fail"}"#);
    let mut tracker = StallTracker::new();
    let verdicts = feed(&mut tracker, &off, &search("a", "none"), 50);
    assert!(verdicts.iter().all(|v| *v == StallVerdict::Continue));
    assert_eq!(tracker, StallTracker::new());
}

#[test]
fn a_poll_whose_result_changes_never_stalls() {
    let fail = settings(r#"{"repeat": 2, "action": "fail"}"#);
    let mut tracker = StallTracker::new();
    for i in 0..30 {
        let poll = tools(&[call(
            "p",
            "job_status",
            json!({"id": 7}),
            json!({"progress": i}),
        )]);
        assert_eq!(
            tracker.observe(&fail, &poll),
            StallVerdict::Continue,
            "poll {i}"
        );
    }
}

#[test]
fn only_consecutive_repeats_count() {
    let fail = settings(r#"{"action": "fail"}"#);
    let (a, b) = (search("a", "1"), search("b", "2"));
    let mut tracker = StallTracker::new();
    for signature in [&a, &a, &b, &a, &a, &b, &b] {
        assert_eq!(tracker.observe(&fail, signature), StallVerdict::Continue);
    }
    assert_eq!(tracker.count(), 2);
}

#[test]
fn the_tracker_survives_a_checkpoint_mid_escalation() {
    let nudge = StallSettings::default();
    let same = search("a", "none");
    let mut tracker = StallTracker::new();
    feed(&mut tracker, &nudge, &same, 4);
    let json = serde_json::to_value(&tracker).unwrap();
    let mut restored: StallTracker = serde_json::from_value(json).unwrap();
    assert_eq!(restored, tracker);
    assert_eq!(restored.warning(), tracker.warning());
    assert_eq!(
        feed(&mut restored, &nudge, &same, 2)[1],
        StallVerdict::ForceAnswer { count: 6 }
    );
    // A checkpoint written before stall detection existed has no tracker fields.
    assert_eq!(
        serde_json::from_value::<StallTracker>(json!({})).unwrap(),
        StallTracker::new()
    );
}
