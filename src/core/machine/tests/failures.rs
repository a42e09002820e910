//! Failure paths: max_iteration, unusable replies, failed tools, LLM failure, misuse, cancel.

use super::*;
use serde_json::{Value, json};

#[test]
fn max_iteration_3_fails_after_exactly_3_recursions() {
    let mut m = Machine::new(task(3));
    let mut llm_calls = 0;
    let outcome = loop {
        match m.begin_recursion(Uuid::now_v7(), at(1), &template()) {
            Next::CallLlm(_) => llm_calls += 1,
            Next::Finished(outcome) => break outcome,
            other => panic!("unexpected {other:?}"),
        }
        let summary = format!("summary {llm_calls}");
        let next = m.on_llm_reply(
            &reply("REFLECT", json!({"summary": summary}), json!({})),
            at(2),
        );
        assert_eq!(next, Next::Continue);
    };
    assert_eq!(llm_calls, 3);
    let Outcome::Failed {
        reason,
        iterations,
        partial,
        error,
    } = outcome
    else {
        panic!("expected Failed, got {outcome:?}")
    };
    assert_eq!((reason, iterations), (FailReason::MaxIteration, 3));
    assert_eq!(partial.as_deref(), Some("summary 3"));
    assert!(error.contains("max_iteration (3)"), "{error}");
    assert_eq!(m.memory()[2].source, MemorySource::Reflect);
}

#[test]
fn garbage_reply_is_fed_back_and_the_task_recovers() {
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    let garbage = LlmReply {
        content: "I am not sure what to do.".into(),
        ..LlmReply::default()
    };
    assert_eq!(m.on_llm_reply(&garbage, at(2)), Next::Continue);
    let events = m.take_events();
    let record = completed(&events[1]);
    assert_eq!(
        (record.status, record.action_type.clone()),
        (RecursionStatus::Error, None)
    );
    assert_eq!(record.output, json!({"raw": "I am not sure what to do."}));
    let error_log = record.error_log.clone().unwrap_or_default();
    assert!(error_log.contains("no JSON object"), "{error_log}");

    let second = llm_call(m.begin_recursion(id(2), at(3), &template()));
    let last = &state(&second)["last_recursion"];
    assert_eq!(
        (&last["status"], &last["action"]),
        (&json!("error"), &Value::Null)
    );
    assert_eq!(last["error_log"], error_log.as_str());
    let history: Value = serde_json::from_str(&second.messages[2].content.text()).unwrap();
    let expected =
        json!({"iteration": 1, "trace_id": id(1), "status": "error", "error_log": error_log});
    assert_eq!(history, expected);

    let answer = reply("ANSWER", json!({"answer": "3"}), json!({}));
    let outcome = Outcome::Completed {
        answer: "3".into(),
        iterations: 2,
    };
    assert_eq!(m.on_llm_reply(&answer, at(4)), Next::Finished(outcome));
}

#[test]
fn a_failed_tool_makes_the_recursion_error_and_is_shown_next_time() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    let calls = vec![call(1), call(2)];
    m.on_llm_reply(&tool_reply(calls.clone()), at(2));
    let results = vec![
        ok(&calls[0], json!(2), None),
        failed(&calls[1], "division by zero"),
    ];
    assert_eq!(m.on_tool_results(results, at(3)), Next::Continue);
    let events = m.take_events();
    let record = completed(&events[1]);
    assert_eq!(record.status, RecursionStatus::Error);
    let expected = "tool call call_2 (calculate) failed: division by zero";
    assert_eq!(record.error_log.as_deref(), Some(expected));
    assert!(m.memory().iter().all(|e| e.memory != "not kept"));

    let next = llm_call(m.begin_recursion(id(2), at(4), &template()));
    let last = &state(&next)["last_recursion"];
    assert_eq!(
        (&last["status"], &last["error_log"]),
        (&json!("error"), &json!(expected))
    );
    assert_eq!(last["tool_call_results"][1]["error"], "division by zero");
    assert_eq!(last["tool_call_results"][1]["success"], false);
}

#[test]
fn missing_tool_results_are_named_in_the_error_log() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(&tool_reply(vec![call(1)]), at(2));
    m.on_tool_results(vec![], at(3));
    let events = m.take_events();
    let log = completed(&events[1]).error_log.clone();
    assert_eq!(
        log.as_deref(),
        Some("tool call call_1 (calculate) returned no result")
    );
}

#[test]
fn out_of_order_calls_fail_internal_without_panicking() {
    let mut m = Machine::new(task(10));
    let Next::Finished(Outcome::Failed { reason, error, .. }) = m.on_tool_results(vec![], at(1))
    else {
        panic!("expected Failed")
    };
    assert_eq!(reason, FailReason::Internal);
    assert!(error.contains("no recursion is open"), "{error}");

    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(&tool_reply(vec![call(1)]), at(2));
    m.take_events();
    let next = m.on_llm_reply(&reply("ANSWER", json!({"answer": "a"}), json!({})), at(3));
    let Next::Finished(Outcome::Failed { reason, error, .. }) = next.clone() else {
        panic!("expected Failed, got {next:?}")
    };
    assert_eq!(reason, FailReason::Internal);
    assert!(error.contains("waiting for tool results"), "{error}");
    assert_eq!(
        completed(&m.take_events()[0]).status,
        RecursionStatus::Error
    );
    assert_eq!(
        m.on_tool_results(vec![], at(4)),
        next,
        "the outcome is final"
    );

    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    let twice = m.begin_recursion(id(2), at(2), &template());
    assert!(matches!(
        twice,
        Next::Finished(Outcome::Failed {
            reason: FailReason::Internal,
            ..
        })
    ));
    assert_eq!(m.on_llm_failure("late", at(3)), twice);
}

#[test]
fn llm_failure_closes_the_recursion_and_fails_the_task() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(
        &reply("REFLECT", json!({"summary": "half done"}), json!({})),
        at(2),
    );
    m.begin_recursion(id(2), at(3), &template());
    m.take_events();
    let next = m.on_llm_failure("http_401: invalid api key", at(4));
    let expected = Outcome::Failed {
        reason: FailReason::LlmError,
        error: "http_401: invalid api key".into(),
        iterations: 2,
        partial: Some("half done".into()),
    };
    assert_eq!(next, Next::Finished(expected));
    let events = m.take_events();
    let record = completed(&events[0]);
    assert_eq!(
        (record.iteration, record.status),
        (2, RecursionStatus::Error)
    );
    assert_eq!(
        record.error_log.as_deref(),
        Some("http_401: invalid api key")
    );
}

#[test]
fn cancel_closes_the_open_recursion_and_keeps_a_final_outcome() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.take_events();
    assert_eq!(m.cancel(), Outcome::Cancelled { iterations: 1 });
    let events = m.take_events();
    assert_eq!(
        completed(&events[0]).error_log.as_deref(),
        Some("task cancelled")
    );
    assert_eq!(m.outcome(), Some(&Outcome::Cancelled { iterations: 1 }));

    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(&reply("ANSWER", json!({"answer": "a"}), json!({})), at(2));
    assert!(matches!(m.cancel(), Outcome::Completed { .. }));
}

#[test]
fn a_rerun_that_parts_from_its_source_fails_with_the_divergence_as_its_error() {
    use crate::core::rerun::Divergence;
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    let divergence = Divergence {
        iteration: 1,
        expected_key: Some("a".repeat(64)),
        got_key: "b".repeat(64),
    };
    let next = m.on_rerun_parted(FailReason::RerunDiverged, &divergence, at(2));
    let Next::Finished(Outcome::Failed {
        reason,
        error,
        iterations,
        ..
    }) = next
    else {
        panic!("expected Failed, got {next:?}")
    };
    assert_eq!((reason, iterations), (FailReason::RerunDiverged, 1));
    assert_eq!(Divergence::from_error_text(&error), Some(divergence));
    assert_eq!(reason.as_str(), "rerun_diverged");
    assert!(reason.is_rerun_divergence());
    assert!(FailReason::RerunUnrecorded.is_rerun_divergence());
    // The open recursion ends `error`, with the same text as its error_log.
    let events = m.take_events();
    let record = completed(events.last().expect("events"));
    assert_eq!(record.status, RecursionStatus::Error);
    assert_eq!(record.error_log.as_deref(), Some(error.as_str()));
}
