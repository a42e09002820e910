//! Context compaction and trimming: the budget holds over long runs with big tool results,
//! folded recursions show up in `context.compacted_history`, oversized tool results and
//! replies are cut with a marker, and old checkpoints still load.

use super::*;
use crate::core::limits::estimate_request_tokens;
use serde_json::{Value, json};

fn shipped_template() -> PromptTemplate {
    let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/system.md"));
    PromptTemplate::new(text).unwrap()
}

fn limited(max_iteration: u32, limits: Limits) -> Machine {
    Machine::new(TaskInfo {
        limits,
        ..task(max_iteration)
    })
}

/// A CALL_TOOL reply with long observe / thought and a memory note.
fn chatty_tool_reply(n: u32) -> (LlmReply, Vec<ToolCallRequest>) {
    let calls: Vec<ToolCallRequest> = (0..3).map(|i| call(n * 10 + i)).collect();
    let filler = "The page lists many results; 中文内容也很长。".repeat(40);
    let content = json!({
        "observe": format!("observe {n}: {filler}"),
        "thought": format!("thought {n}: {filler}"),
        "action": {"action_type": "CALL_TOOL", "output": {}},
        "abstract": format!("fetched batch {n}"),
        "short_term_memory_append": format!("note {n}: {}", "m".repeat(600)),
    });
    let reply = LlmReply {
        content: content.to_string(),
        tool_calls: calls.clone(),
        ..LlmReply::default()
    };
    (reply, calls)
}

fn big_results(calls: &[ToolCallRequest], n: u32) -> Vec<ToolCallResult> {
    calls
        .iter()
        .map(|c| {
            let mut result = ok(
                c,
                json!({"page": n, "body": "lorem ipsum 数据 ".repeat(2_500)}),
                None,
            );
            // As the driver returns them: with the call's own arguments.
            result.arguments = serde_json::from_str(&c.arguments).unwrap_or_default();
            result
        })
        .collect()
}

#[test]
fn thirty_recursions_with_big_tool_results_never_exceed_the_budget() {
    // The default budget is met by folding; the smaller one also needs reduced detail.
    for budget in [Limits::default().context_budget_tokens, 9_000] {
        let limits = Limits {
            context_budget_tokens: budget,
            ..Limits::default()
        };
        let (compactions, m) = run_thirty(limits);
        assert!(
            compactions >= 20,
            "budget {budget}: {compactions} compactions"
        );
        assert_eq!(m.compacted_history().len() + m.history().len(), 30);
    }
}

/// Drives 30 CALL_TOOL recursions with big results under `limits`, checking every request
/// against the budget; returns the number of compactions and the machine.
fn run_thirty(limits: Limits) -> (usize, Machine) {
    let template = shipped_template();
    let budget = limits.context_budget_tokens;
    let mut m = limited(30, limits);
    let mut compactions = 0;
    for n in 1..=30u32 {
        let request = llm_call(m.begin_recursion(id(u128::from(n)), at(1), &template));
        let size = estimate_request_tokens(&request.messages);
        assert!(size <= budget, "recursion {n}: {size} > {budget}");
        let (reply, calls) = chatty_tool_reply(n);
        assert_eq!(m.on_llm_reply(&reply, at(2)), Next::RunTools(calls.clone()));
        let results = big_results(&calls, n);
        assert_eq!(m.on_tool_results(results, at(3)), Next::Continue);
        for event in m.take_events() {
            if let DomainEvent::ContextCompacted {
                before_tokens,
                after_tokens,
                iteration,
                ..
            } = event
            {
                assert_eq!(iteration, n);
                assert!(before_tokens > budget && after_tokens == size);
                compactions += 1;
            }
        }
    }
    let next = m.begin_recursion(id(31), at(4), &template);
    let Next::Finished(Outcome::Failed { reason, .. }) = next else {
        panic!("expected max_iteration, got {next:?}")
    };
    assert_eq!(reason, FailReason::MaxIteration);
    (compactions, m)
}

#[test]
fn compaction_folds_all_but_the_newest_recursions_into_the_snapshot() {
    let limits = Limits {
        context_budget_tokens: 5_000,
        keep_recent_recursions: 2,
        ..Limits::default()
    };
    let mut m = limited(30, limits);
    let (folded, request) = loop {
        let n = m.iteration() + 1;
        let request = llm_call(m.begin_recursion(id(u128::from(n)), at(1), &template()));
        let events = m.take_events();
        if let Some(DomainEvent::ContextCompacted {
            folded_recursions,
            after_tokens,
            ..
        }) = events.last()
        {
            assert!(*after_tokens <= 5_000);
            break (*folded_recursions, request);
        }
        assert!(n < 10, "no compaction after {n} recursions");
        let calls = vec![call(n)];
        m.on_llm_reply(&tool_reply(calls.clone()), at(2));
        let results = vec![ok(&calls[0], json!("r".repeat(4_000)), None)];
        m.on_tool_results(results, at(3));
    };
    assert_eq!(m.history().len(), 2, "the two newest stay verbatim");
    assert_eq!(request.messages.len(), 4);
    assert_eq!(m.compacted_history().len(), folded as usize);
    let newest_kept: Value = serde_json::from_str(&request.messages[2].content.text()).unwrap();
    assert_eq!(newest_kept["iteration"], folded + 1);
    let s = state(&request);
    let lines = s["context"]["compacted_history"].as_array().cloned();
    let lines = lines.unwrap_or_default();
    assert_eq!(lines.len(), folded as usize);
    assert_eq!(lines[0], "#1 CALL_TOOL done: abstract CALL_TOOL");
    assert_eq!(s["global"]["iteration"], request.iteration - 1);
    assert_eq!(s["last_recursion"]["iteration"], request.iteration - 1);
}

#[test]
fn an_impossible_budget_sends_the_floor_and_says_so() {
    let limits = Limits {
        context_budget_tokens: 10,
        ..Limits::default()
    };
    let mut m = limited(5, limits);
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    m.on_llm_reply(&plan_reply(&["1", "2"]), at(2));
    m.take_events();
    let call = llm_call(m.begin_recursion(id(2), at(3), &template()));
    let events = m.take_events();
    let Some(DomainEvent::ContextCompacted {
        before_tokens,
        after_tokens,
        folded_recursions,
        ..
    }) = events.last()
    else {
        panic!("expected ContextCompacted, got {events:?}")
    };
    assert_eq!(*folded_recursions, 1);
    assert!(after_tokens < before_tokens && *after_tokens > 10);
    assert_eq!(call.messages.len(), 2, "user and system only");
    assert_eq!(call.messages[0].content, "What is 1+2?");
    assert_eq!(state(&call)["context"]["plan"][1]["step_id"], "2");
}

#[test]
fn oversized_tool_results_and_replies_are_cut_where_fed_back() {
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    let calls = vec![call(1)];
    m.on_llm_reply(&tool_reply(calls.clone()), at(2));
    let huge = json!("z".repeat(20_000));
    m.on_tool_results(vec![ok(&calls[0], huge.clone(), None)], at(3));
    let events = m.take_events();
    let record = completed(events.last().unwrap_or(&events[0]));
    assert_eq!(record.tool_call_results[0].result, Some(huge), "kept whole");
    let marker = "…[truncated: 8000 of 20000 chars shown]";
    assert!(m.history()[0].contains(marker));
    assert!(m.history()[0].len() < 9_000);
    let second = llm_call(m.begin_recursion(id(2), at(4), &template()));
    let shown = &state(&second)["last_recursion"]["tool_call_results"][0]["result"];
    assert!(shown.as_str().unwrap_or_default().ends_with(marker));

    let garbage = LlmReply {
        content: "no json ".repeat(3_000),
        ..LlmReply::default()
    };
    m.on_llm_reply(&garbage, at(5));
    let events = m.take_events();
    let record = completed(events.last().unwrap_or(&events[0]));
    let raw = record.output["raw"].as_str().unwrap_or_default();
    assert!(
        raw.ends_with("…[truncated: 16000 of 24000 chars shown]"),
        "{}",
        raw.len()
    );
}

#[test]
fn recursion_errors_close_the_recursion_and_the_loop_goes_on() {
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    let next = m.on_recursion_error("recursion timed out after 30s", at(2));
    assert_eq!(next, Next::Continue);
    let events = m.take_events();
    let record = completed(&events[1]);
    assert_eq!(record.status, RecursionStatus::Error);
    assert_eq!(
        record.error_log.as_deref(),
        Some("recursion timed out after 30s")
    );

    llm_call(m.begin_recursion(id(2), at(3), &template()));
    let calls = vec![call(1)];
    m.on_llm_reply(&tool_reply(calls), at(4));
    assert_eq!(
        m.on_recursion_error("tool batch timed out", at(5)),
        Next::Continue
    );
    let events = m.take_events();
    let record = completed(events.last().unwrap_or(&events[0]));
    assert_eq!(record.action_type.as_deref(), Some("CALL_TOOL"));
    assert_eq!(record.observe, "observe CALL_TOOL");
    let third = llm_call(m.begin_recursion(id(3), at(6), &template()));
    let last = &state(&third)["last_recursion"];
    assert_eq!(last["error_log"], "tool batch timed out");
    assert_eq!(last["status"], "error");

    m.on_llm_reply(&reply("ANSWER", json!({"answer": "3"}), json!({})), at(7));
    let finished = m.on_recursion_error("late", at(8));
    assert!(matches!(
        finished,
        Next::Finished(Outcome::Completed { .. })
    ));
    let mut idle = Machine::new(task(5));
    let misuse = idle.on_recursion_error("nothing open", at(1));
    assert!(matches!(
        misuse,
        Next::Finished(Outcome::Failed {
            reason: FailReason::Internal,
            ..
        })
    ));
}

#[test]
fn conversation_turns_are_shown_compactly_and_the_input_stays_first() {
    let turn = |n: u128, answer: Option<&str>| ConversationTurn {
        task_id: id(n),
        input: format!("earlier question {n}"),
        answer: answer.map(str::to_owned),
        status: if answer.is_some() {
            "completed"
        } else {
            "failed"
        }
        .into(),
    };
    let mut m = Machine::new(TaskInfo {
        conversation: vec![turn(1, Some("4")), turn(2, None)],
        ..task(5)
    });
    let first = llm_call(m.begin_recursion(id(1), at(1), &template()));
    assert_eq!(first.messages[0].content, "What is 1+2?");
    let conversation = &state(&first)["context"]["conversation"];
    assert_eq!(
        conversation[0],
        json!({"task_id": id(1), "input": "earlier question 1", "answer": "4",
               "status": "completed"})
    );
    assert_eq!(conversation[1]["answer"], Value::Null);
    assert_eq!(conversation[1]["status"], "failed");
}

#[test]
fn checkpoints_without_the_new_fields_still_load() {
    let mut m = Machine::new(task(5));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    m.on_llm_reply(&plan_reply(&["1"]), at(2));
    let mut old = serde_json::to_value(&m).unwrap();
    if let Some(object) = old.as_object_mut() {
        object.remove("compacted");
    }
    if let Some(task) = old.get_mut("task").and_then(Value::as_object_mut) {
        task.remove("limits");
        task.remove("conversation");
    }
    let restored: Machine = serde_json::from_value(old).unwrap();
    assert_eq!(restored.task().limits, Limits::default());
    assert!(restored.task().conversation.is_empty());
    assert!(restored.compacted_history().is_empty());
    assert_eq!(restored.history(), m.history());
}
