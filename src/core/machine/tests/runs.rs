//! Successful runs: events, snapshot, message layout, plan steps, checkpointing.

use super::*;
use crate::core::types::Role;
use serde_json::{Value, json};

#[test]
fn plan_call_tool_answer_run_emits_the_exact_events_in_order() {
    let mut m = Machine::new(task(10));
    let first = llm_call(m.begin_recursion(id(1), at(1), &template()));
    assert_eq!((first.trace_id, first.iteration), (id(1), 1));
    let mut log = m.take_events();
    assert_eq!(
        m.on_llm_reply(&plan_reply(&["1", "2"]), at(2)),
        Next::Continue
    );
    log.extend(m.take_events());
    llm_call(m.begin_recursion(id(2), at(3), &template()));
    log.extend(m.take_events());
    let calls = vec![call(1)];
    let next = m.on_llm_reply(&tool_reply(calls.clone()), at(4));
    assert_eq!(next, Next::RunTools(calls.clone()));
    assert_eq!(m.take_events(), vec![], "a CALL_TOOL recursion stays open");
    m.on_tool_results(vec![ok(&calls[0], json!(3), None)], at(5));
    llm_call(m.begin_recursion(id(3), at(6), &template()));
    let next = m.on_llm_reply(&reply("ANSWER", json!({"answer": "3"}), json!({})), at(7));
    let outcome = Outcome::Completed {
        answer: "3".into(),
        iterations: 3,
    };
    assert_eq!(next, Next::Finished(outcome.clone()));
    log.extend(m.take_events());

    let expected = [
        "RecursionStarted 1 step=-",
        "PlanUpdated 1 steps=1,2",
        "RecursionCompleted 1 step=- RE_PLAN done",
        "RecursionStarted 2 step=1",
        "StepUpdated 2 step=1 running",
        "RecursionCompleted 2 step=1 CALL_TOOL done",
        "RecursionStarted 3 step=1",
        "StepUpdated 3 step=1 done",
        "RecursionCompleted 3 step=1 ANSWER done",
    ];
    assert_eq!(log.iter().map(describe).collect::<Vec<_>>(), expected);
    let record = completed(&log[5]);
    assert_eq!((record.started_at, record.finished_at), (at(3), at(5)));
    assert_eq!(record.tool_call_results.len(), 1);
    assert_eq!(record.abstract_, "abstract CALL_TOOL");
    assert_eq!(m.plan()[0].recursions.len(), 2);
    assert_eq!(m.plan()[1].status, StepStatus::Pending);
    let again = m.begin_recursion(id(4), at(8), &template());
    assert_eq!(
        again,
        Next::Finished(outcome),
        "a finished task stays finished"
    );
}

#[test]
fn snapshot_carries_task_budget_plan_memory_and_last_tool_results() {
    let (m, third) = planned_and_called();
    let s = state(&third);
    assert_eq!(s["global"]["task_id"], id(0xAA).to_string());
    assert_eq!(s["global"]["iteration"], 2);
    assert_eq!(s["global"]["max_iteration"], 10);
    assert_eq!(s["global"]["remaining_iterations"], 7);
    assert_eq!(s["global"]["status"], "running");
    assert_eq!(s["global"]["created_at"], "2025-01-02T03:04:00Z");
    assert_eq!(s["global"]["updated_at"], "2025-01-02T03:04:06Z");
    assert_eq!(s["current_recursion"]["trace_id"], id(3).to_string());
    assert_eq!(s["current_recursion"]["iteration_index"], 3);
    assert_eq!(s["context"]["objective"], "What is 1+2?");
    assert_eq!(s["context"]["constraints"], json!(["be brief"]));
    let step = &s["context"]["plan"][0];
    assert_eq!(
        (&step["step_id"], &step["status"]),
        (&json!("1"), &json!("running"))
    );
    assert_eq!(step["recursions"][0]["trace_id"], id(2).to_string());
    assert_eq!(step["recursions"][0]["result"], "abstract CALL_TOOL");
    let memory = &s["context"]["memory"]["short_term"];
    assert_eq!(memory[0]["memory"], "asked");
    assert_eq!(memory[0]["source"], "model");
    assert_eq!(memory[1]["memory"], "1+2 is 3");
    assert_eq!(memory[1]["source"], "take_memo");
    assert_eq!(memory[1]["trace_id"], id(2).to_string());
    let last = &s["last_recursion"];
    assert_eq!(last["trace_id"], id(2).to_string());
    assert_eq!(last["iteration"], 2);
    assert_eq!(
        last["action"],
        json!({"action_type": "CALL_TOOL", "output": {}})
    );
    assert_eq!(last["status"], "done");
    assert_eq!(last["error_log"], Value::Null);
    let result = &last["tool_call_results"][0];
    assert_eq!(
        (&result["tool_call_id"], &result["name"]),
        (&json!("call_1"), &json!("calculate"))
    );
    assert_eq!(
        (&result["success"], &result["result"]),
        (&json!(true), &json!(3))
    );
    assert_eq!(m.memory().len(), 2);
}

#[test]
fn first_snapshot_has_no_last_recursion() {
    let mut m = Machine::new(task(1));
    let s = state(&llm_call(m.begin_recursion(id(1), at(1), &template())));
    assert_eq!(s["last_recursion"], Value::Null);
    assert_eq!(s["global"]["iteration"], 0);
    assert_eq!(s["global"]["remaining_iterations"], 0);
    assert_eq!(s["context"]["plan"], json!([]));
}

#[test]
fn messages_at_iteration_3_are_user_system_and_one_assistant_per_recursion() {
    let (_, third) = planned_and_called();
    let roles: Vec<Role> = third.messages.iter().map(|m| m.role).collect();
    let expected = vec![Role::User, Role::System, Role::Assistant, Role::Assistant];
    assert_eq!(roles, expected);
    assert_eq!(third.messages[0].content, "What is 1+2?");
    let first: Value = serde_json::from_str(&third.messages[2].content.text()).unwrap();
    assert_eq!(first["iteration"], 1);
    assert_eq!(first["trace_id"], id(1).to_string());
    assert_eq!(
        (&first["status"], &first["action_type"]),
        (&json!("done"), &json!("RE_PLAN"))
    );
    assert_eq!(first["abstract"], "abstract RE_PLAN");
    assert_eq!(first["result"][1]["step_id"], "2");
    let second: Value = serde_json::from_str(&third.messages[3].content.text()).unwrap();
    assert_eq!(second["result"][0]["result"], 3);
    assert_eq!(second["result"][0]["name"], "calculate");
    assert!(
        !third.messages[3].content.text().contains('\n'),
        "history is compact JSON"
    );
}

#[test]
fn step_updates_and_answer_drive_step_statuses() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(&plan_reply(&["1", "2", "3"]), at(1));
    m.begin_recursion(id(2), at(1), &template());
    assert_eq!(m.plan()[0].status, StepStatus::Running);
    m.take_events();
    let updates = json!({"step_updates": [{"step_id": "1", "status": "done"},
        {"step_id": "2", "status": "running"}, {"step_id": "2", "status": "running"},
        {"step_id": "9", "status": "done"}]});
    m.on_llm_reply(&reply("REFLECT", json!({"summary": "s"}), updates), at(2));
    let events = m.take_events();
    assert_eq!(events[0], step_updated(2, 2, "1", StepStatus::Done));
    assert_eq!(events[1], step_updated(2, 2, "2", StepStatus::Running));
    assert_eq!(
        events.len(),
        3,
        "no event for no-op or unknown updates: {events:?}"
    );

    m.begin_recursion(id(3), at(3), &template());
    let events = m.take_events();
    assert_eq!(events.len(), 1, "step 2 was already running: {events:?}");
    let failure = json!({"step_updates": [{"step_id": "2", "status": "error"}]});
    m.on_llm_reply(&reply("REFLECT", json!({"summary": "s"}), failure), at(4));
    assert_eq!(
        m.take_events()[0],
        step_updated(3, 3, "2", StepStatus::Error)
    );

    m.begin_recursion(id(4), at(5), &template());
    assert_eq!(
        m.take_events()[1],
        step_updated(4, 4, "3", StepStatus::Running)
    );
    m.on_llm_reply(&reply("ANSWER", json!({"answer": "a"}), json!({})), at(6));
    assert_eq!(
        m.take_events()[0],
        step_updated(4, 4, "3", StepStatus::Done)
    );
    let statuses: Vec<StepStatus> = m.plan().iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        vec![StepStatus::Done, StepStatus::Error, StepStatus::Done]
    );
    assert_eq!(m.plan()[1].recursions.len(), 1);
}

#[test]
fn re_plan_replaces_the_plan_and_the_next_recursion_starts_its_first_step() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(&plan_reply(&["1", "2"]), at(1));
    m.begin_recursion(id(2), at(2), &template());
    m.take_events();
    m.on_llm_reply(&plan_reply(&["a", "b", "c"]), at(3));
    let events = m.take_events();
    let DomainEvent::PlanUpdated { plan, .. } = &events[0] else {
        panic!("expected PlanUpdated, got {:?}", events[0])
    };
    let ids: Vec<&str> = plan.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, vec!["a", "b", "c"]);
    assert_eq!(m.plan().len(), 3);
    m.begin_recursion(id(3), at(4), &template());
    assert_eq!(
        m.take_events()[1],
        step_updated(3, 3, "a", StepStatus::Running)
    );
}

#[test]
fn tool_calls_without_content_are_run() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    let bare = LlmReply {
        tool_calls: vec![call(7)],
        ..LlmReply::default()
    };
    assert_eq!(m.on_llm_reply(&bare, at(2)), Next::RunTools(vec![call(7)]));
}

#[test]
fn machine_round_trips_through_serde_mid_task() {
    let mut m = Machine::new(task(10));
    m.begin_recursion(id(1), at(1), &template());
    m.on_llm_reply(&plan_reply(&["1", "2"]), at(2));
    m.begin_recursion(id(2), at(3), &template());
    let calls = vec![call(1)];
    m.on_llm_reply(&tool_reply(calls.clone()), at(4));
    m.take_events();

    let checkpoint = serde_json::to_string(&m).unwrap();
    let mut restored: Machine = serde_json::from_str(&checkpoint).unwrap();
    assert_eq!(restored.iteration(), 2);
    assert_eq!(restored.plan(), m.plan());
    assert_eq!(restored.task(), m.task());
    for machine in [&mut m, &mut restored] {
        let results = vec![ok(&calls[0], json!(2), Some("memo"))];
        assert_eq!(machine.on_tool_results(results, at(5)), Next::Continue);
    }
    let original = m.begin_recursion(id(3), at(6), &template());
    assert_eq!(
        restored.begin_recursion(id(3), at(6), &template()),
        original
    );
    assert_eq!(restored.take_events(), m.take_events());
}

#[test]
fn the_shipped_prompt_renders_a_parseable_snapshot() {
    let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/system.md"));
    let template = PromptTemplate::new(text).unwrap();
    let mut m = Machine::new(task(10));
    let first = llm_call(m.begin_recursion(id(1), at(1), &template));
    let system = first.messages[1].content.to_string();
    let start = system.rfind("```json\n").map(|i| i + 8).unwrap_or_default();
    let end = system.rfind("\n```").unwrap_or_default();
    let s: Value = serde_json::from_str(&system[start..end]).unwrap();
    assert_eq!(s["global"]["task_id"], id(0xAA).to_string());
    assert_eq!(
        first
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .count(),
        1
    );
}

#[test]
fn resume_repeats_the_pending_step_after_a_checkpoint() {
    let mut m = Machine::new(task(10));
    assert_eq!(m.resume(at(1), &template()), Next::Continue);
    assert_eq!(m.current_trace_id(), None);
    let first = llm_call(m.begin_recursion(id(1), at(1), &template()));
    assert_eq!(m.current_trace_id(), Some(id(1)));
    let mut restored: Machine = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
    assert_eq!(restored.resume(at(1), &template()), Next::CallLlm(first));
    let calls = vec![call(1)];
    restored.on_llm_reply(&tool_reply(calls.clone()), at(2));
    assert_eq!(restored.resume(at(3), &template()), Next::RunTools(calls));
    restored.take_events();
    restored.cancel();
    let outcome = Outcome::Cancelled { iterations: 1 };
    assert_eq!(restored.resume(at(4), &template()), Next::Finished(outcome));
    assert!(
        restored.take_events().len() == 1,
        "only cancel's RecursionCompleted"
    );
}
