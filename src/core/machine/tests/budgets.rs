//! Budgets (CONTRACT §8) in the machine: warnings and breaches before an LLM call, the last
//! recursion an `answer` breach allows, `fail`, `pause` and a replaced budget, the tool-call
//! limit, `global.budget` in the snapshot, and the wall clock across a wait.

use super::*;
use crate::core::budget::{BreachAction, Budget, BudgetLimit};

fn budgeted(budget: Budget) -> Machine {
    Machine::new(TaskInfo {
        budget: Some(budget),
        ..task(10)
    })
}

fn tokens(max: u64, on_breach: BreachAction) -> Budget {
    Budget {
        max_tokens: Some(max),
        on_breach,
        ..Budget::default()
    }
}

fn reflect() -> LlmReply {
    reply("REFLECT", json!({"summary": "so far: 4"}), json!({}))
}

fn answer() -> LlmReply {
    reply("ANSWER", json!({"answer": "4"}), json!({}))
}

/// One recursion that spends `used` tokens and REFLECTs.
fn spend(m: &mut Machine, n: u128, used: u64) -> LlmCall {
    let call = llm_call(m.begin_recursion(id(n), at(n as u32), &template()));
    m.on_llm_usage(used, 0, None);
    assert_eq!(m.on_llm_reply(&reflect(), at(n as u32)), Next::Continue);
    call
}

fn budget_events(m: &mut Machine) -> Vec<String> {
    m.take_events()
        .iter()
        .map(describe)
        .filter(|line| line.starts_with("Budget"))
        .collect()
}

#[test]
fn the_snapshot_shows_the_budget_with_what_is_used() {
    let mut m = budgeted(Budget {
        max_tokens: Some(1000),
        max_tool_calls: Some(3),
        ..Budget::default()
    });
    spend(&mut m, 1, 120);
    let call = llm_call(m.begin_recursion(id(2), at(2), &template()));
    let budget = &state(&call)["global"]["budget"];
    assert_eq!(budget["used"], json!({"tokens": 120, "tool_calls": 0}));
    assert_eq!(budget["max"], json!({"tokens": 1000, "tool_calls": 3}));
    assert!(budget.get("exceeded").is_none());
    let unlimited = llm_call(Machine::new(task(3)).begin_recursion(id(1), at(1), &template()));
    assert!(state(&unlimited)["global"].get("budget").is_none());
}

#[test]
fn a_warning_at_eighty_percent_then_an_answer_breach_allows_one_last_recursion() {
    let mut m = budgeted(tokens(100, BreachAction::Answer));
    spend(&mut m, 1, 50);
    assert!(budget_events(&mut m).is_empty());
    // Checked before each call: 80 of 100 is seen before recursion 3.
    spend(&mut m, 2, 30);
    assert!(budget_events(&mut m).is_empty());
    spend(&mut m, 3, 15);
    assert_eq!(budget_events(&mut m), ["BudgetWarning 3 tokens"]);
    // 95 + 10 = 105 of 100: the next check breaches.
    spend(&mut m, 4, 10);
    assert!(budget_events(&mut m).is_empty(), "warned once");
    let last = llm_call(m.begin_recursion(id(5), at(5), &template()));
    assert_eq!(budget_events(&mut m), ["BudgetExceeded 5 tokens answer"]);
    let budget = &state(&last)["global"]["budget"];
    assert_eq!(budget["exceeded"], true);
    assert_eq!(budget["limit"], "tokens");
    assert!(budget["instruction"].as_str().unwrap().contains("ANSWER"));
    assert_eq!(budget["used"]["tokens"], 105);
    match m.on_llm_reply(&answer(), at(5)) {
        Next::Finished(Outcome::Completed { answer, iterations }) => {
            assert_eq!((answer.as_str(), iterations), ("4", 5));
        }
        other => panic!("expected the answer, got {other:?}"),
    }
}

#[test]
fn the_last_recursion_must_answer_or_the_task_fails_with_its_partial() {
    let mut m = budgeted(tokens(10, BreachAction::Answer));
    spend(&mut m, 1, 10);
    llm_call(m.begin_recursion(id(2), at(2), &template()));
    match m.on_llm_reply(&tool_reply(vec![call(1)]), at(2)) {
        Next::Finished(Outcome::Failed {
            reason,
            partial,
            error,
            ..
        }) => {
            assert_eq!(reason, FailReason::Budget);
            assert_eq!(partial.as_deref(), Some("so far: 4"));
            assert!(error.contains("CALL_TOOL"), "{error}");
        }
        other => panic!("no tool may run after the breach: {other:?}"),
    }
    // An unusable last reply fails too, at the next check.
    let mut m = budgeted(tokens(10, BreachAction::Answer));
    spend(&mut m, 1, 10);
    llm_call(m.begin_recursion(id(2), at(2), &template()));
    let garbage = LlmReply {
        content: "not json".into(),
        ..LlmReply::default()
    };
    assert_eq!(m.on_llm_reply(&garbage, at(2)), Next::Continue);
    assert!(matches!(
        m.begin_recursion(id(3), at(3), &template()),
        Next::Finished(Outcome::Failed {
            reason: FailReason::Budget,
            ..
        })
    ));
}

#[test]
fn a_fail_breach_starts_no_llm_call() {
    let mut m = budgeted(tokens(10, BreachAction::Fail));
    spend(&mut m, 1, 12);
    match m.begin_recursion(id(2), at(2), &template()) {
        Next::Finished(Outcome::Failed {
            reason, iterations, ..
        }) => assert_eq!((reason, iterations), (FailReason::Budget, 1)),
        other => panic!("expected the failure, got {other:?}"),
    }
    assert_eq!(m.iteration(), 1, "no recursion was started");
    assert_eq!(budget_events(&mut m), ["BudgetExceeded 2 tokens fail"]);
}

#[test]
fn a_pause_breach_waits_until_a_larger_budget_and_survives_a_checkpoint() {
    let mut m = budgeted(tokens(10, BreachAction::Pause));
    spend(&mut m, 1, 12);
    assert_eq!(
        m.begin_recursion(id(2), at(2), &template()),
        Next::Wait(WaitReason::Budget)
    );
    assert_eq!(budget_events(&mut m), ["BudgetExceeded 2 tokens pause"]);
    let mut m: Machine = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    // Resumed with the same budget: it waits again, without a second announcement.
    assert_eq!(
        m.begin_recursion(id(2), at(3), &template()),
        Next::Wait(WaitReason::Budget)
    );
    assert!(budget_events(&mut m).is_empty());
    m.replace_budget(tokens(100, BreachAction::Pause));
    let call = llm_call(m.begin_recursion(id(2), at(4), &template()));
    assert_eq!(call.iteration, 2);
    assert_eq!(state(&call)["global"]["budget"]["max"]["tokens"], 100);
}

#[test]
fn tool_calls_past_the_limit_are_not_counted_as_run() {
    let mut m = budgeted(Budget {
        max_tool_calls: Some(3),
        ..Budget::default()
    });
    let calls = vec![call(1), call(2)];
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    assert_eq!(m.tool_calls_left(), Some(3));
    m.on_llm_reply(&tool_reply(calls.clone()), at(1));
    let results = calls.iter().map(|c| ok(c, json!(1), None)).collect();
    m.on_tool_results(results, at(1));
    assert_eq!(m.tool_calls_left(), Some(1));
    let calls = vec![call(3), call(4)];
    llm_call(m.begin_recursion(id(2), at(2), &template()));
    m.on_llm_reply(&tool_reply(calls.clone()), at(2));
    // The driver ran one and gave the other an error result.
    let results = vec![ok(&calls[0], json!(1), None), failed(&calls[1], "budget")];
    m.on_tool_results(results, at(2));
    assert_eq!(m.tool_calls_left(), Some(0));
    assert_eq!(m.budget().spent.tool_calls, 3);
    // The answer-breach recursion follows.
    llm_call(m.begin_recursion(id(3), at(3), &template()));
    assert_eq!(
        budget_events(&mut m),
        ["BudgetExceeded 3 tool_calls answer"]
    );
}

#[test]
fn wall_time_excludes_waiting_and_a_pause_waits_between_recursions() {
    let mut m = budgeted(Budget {
        max_wall_secs: Some(10),
        on_breach: BreachAction::Fail,
        ..Budget::default()
    });
    spend(&mut m, 1, 0);
    assert_eq!(
        m.wait(WaitReason::Paused, at(4)),
        Next::Wait(WaitReason::Paused)
    );
    // It ran from 1 s to 4 s; it runs again at 40 s: 3 s were used, not 39.
    let call = llm_call(m.begin_recursion(id(2), at(40), &template()));
    assert_eq!(state(&call)["global"]["budget"]["used"]["wall_secs"], 3.0);
    m.on_llm_reply(&reflect(), at(40));
    let outcome = m.begin_recursion(id(3), at(47), &template());
    assert!(
        matches!(
            outcome,
            Next::Finished(Outcome::Failed {
                reason: FailReason::Budget,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(budget_events(&mut m), ["BudgetExceeded 3 wall_secs fail"]);
    assert_eq!(m.budget().wall_ms(at(47)), 10_000);
    assert!(BudgetLimit::ALL.contains(&BudgetLimit::WallSecs));
}
