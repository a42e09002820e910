//! Scenario tests of the machine: whole runs driven step by step, checking events, the
//! rendered state snapshot, the message layout and the outcomes. This file holds the shared
//! helpers; `runs` covers successful runs, `failures` budgets, bad replies and misuse.

use super::*;
use crate::core::state::StepStatus;
use chrono::TimeZone;
use serde_json::{Value, json};

mod budgets;
mod compaction;
mod failures;
mod outside_text;
mod runs;
mod stalls;

pub(super) fn at(second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, second)
        .single()
        .unwrap_or_default()
}

pub(super) fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

pub(super) fn task(max_iteration: u32) -> TaskInfo {
    TaskInfo {
        task_id: id(0xAA),
        agent_id: id(0xBB),
        objective: "What is 1+2?".into(),
        constraints: vec!["be brief".into()],
        max_iteration,
        created_at: at(0),
        limits: Limits::default(),
        conversation: Vec::new(),
        budget: None,
        stall: Default::default(),
    }
}

/// The bare placeholder, so the system message is exactly the snapshot JSON.
pub(super) fn template() -> PromptTemplate {
    PromptTemplate::new("{{current_state}}").unwrap()
}

pub(super) fn reply(action_type: &str, output: Value, extra: Value) -> LlmReply {
    let mut object = json!({
        "observe": format!("observe {action_type}"),
        "thought": "think",
        "action": {"action_type": action_type, "output": output},
        "abstract": format!("abstract {action_type}"),
    });
    if let (Some(object), Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
    LlmReply {
        content: object.to_string(),
        ..LlmReply::default()
    }
}

pub(super) fn plan_reply(ids: &[&str]) -> LlmReply {
    let plan: Vec<Value> = ids
        .iter()
        .map(|id| json!({"step_id": id, "description": format!("do {id}"), "status": "pending"}))
        .collect();
    reply("RE_PLAN", json!({ "plan": plan }), json!({}))
}

pub(super) fn call(n: u32) -> ToolCallRequest {
    ToolCallRequest {
        id: format!("call_{n}"),
        name: "calculate".into(),
        arguments: format!(r#"{{"expression":"{n}+1"}}"#),
    }
}

pub(super) fn tool_reply(calls: Vec<ToolCallRequest>) -> LlmReply {
    LlmReply {
        tool_calls: calls,
        ..reply(
            "CALL_TOOL",
            json!({}),
            json!({"short_term_memory_append": "asked"}),
        )
    }
}

pub(super) fn ok(call: &ToolCallRequest, result: Value, memo: Option<&str>) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: json!({}),
        success: true,
        result: Some(result),
        error: None,
        memo: memo.map(str::to_owned),
        duration_ms: 1,
    }
}

pub(super) fn failed(call: &ToolCallRequest, error: &str) -> ToolCallResult {
    ToolCallResult {
        success: false,
        result: None,
        error: Some(error.into()),
        memo: Some("not kept".into()),
        ..ok(call, Value::Null, None)
    }
}

pub(super) fn llm_call(next: Next) -> LlmCall {
    match next {
        Next::CallLlm(call) => call,
        other => panic!("expected CallLlm, got {other:?}"),
    }
}

/// The state snapshot rendered into the system message.
pub(super) fn state(call: &LlmCall) -> Value {
    serde_json::from_str(&call.messages[1].content.text()).unwrap()
}

pub(super) fn completed(event: &DomainEvent) -> &RecursionRecord {
    match event {
        DomainEvent::RecursionCompleted(record) => record,
        other => panic!("expected RecursionCompleted, got {other:?}"),
    }
}

pub(super) fn step_updated(
    trace: u128,
    iteration: u32,
    step_id: &str,
    status: StepStatus,
) -> DomainEvent {
    DomainEvent::StepUpdated {
        trace_id: id(trace),
        iteration,
        step_id: step_id.into(),
        status,
    }
}

/// Runs RE_PLAN [1, 2] and then a CALL_TOOL whose one call succeeds with a memo; returns the
/// machine with recursion 3 begun, and that call.
pub(super) fn planned_and_called() -> (Machine, LlmCall) {
    let mut m = Machine::new(task(10));
    llm_call(m.begin_recursion(id(1), at(1), &template()));
    assert_eq!(
        m.on_llm_reply(&plan_reply(&["1", "2"]), at(2)),
        Next::Continue
    );
    llm_call(m.begin_recursion(id(2), at(3), &template()));
    let calls = vec![call(1)];
    assert_eq!(
        m.on_llm_reply(&tool_reply(calls.clone()), at(4)),
        Next::RunTools(calls.clone())
    );
    let results = vec![ok(&calls[0], json!(3), Some("1+2 is 3"))];
    assert_eq!(m.on_tool_results(results, at(5)), Next::Continue);
    let third = llm_call(m.begin_recursion(id(3), at(6), &template()));
    (m, third)
}

/// A one-line description of an event (`Kind iteration step=id ...`); also checks that the
/// event carries the trace_id `id(iteration)`.
pub(super) fn describe(event: &DomainEvent) -> String {
    let (trace_id, text) = match event {
        DomainEvent::RecursionStarted {
            trace_id,
            iteration,
            step_id,
        } => {
            let step = step_id.as_deref().unwrap_or("-");
            (
                *trace_id,
                format!("RecursionStarted {iteration} step={step}"),
            )
        }
        DomainEvent::PlanUpdated {
            trace_id,
            iteration,
            plan,
        } => {
            let ids: Vec<&str> = plan.iter().map(|s| s.step_id.as_str()).collect();
            (
                *trace_id,
                format!("PlanUpdated {iteration} steps={}", ids.join(",")),
            )
        }
        DomainEvent::StepUpdated {
            trace_id,
            iteration,
            step_id,
            status,
        } => {
            let status = status.as_str();
            (
                *trace_id,
                format!("StepUpdated {iteration} step={step_id} {status}"),
            )
        }
        DomainEvent::RecursionCompleted(r) => {
            let step = r.step_id.as_deref().unwrap_or("-");
            let action = r.action_type.as_deref().unwrap_or("-");
            let text = format!("RecursionCompleted {} step={step} {action}", r.iteration);
            (r.trace_id, format!("{text} {}", r.status.as_str()))
        }
        DomainEvent::ContextCompacted {
            trace_id,
            iteration,
            folded_recursions,
            ..
        } => (
            *trace_id,
            format!("ContextCompacted {iteration} folded={folded_recursions}"),
        ),
        DomainEvent::BudgetWarning { iteration, reading } => {
            let limit = reading.limit;
            return format!("BudgetWarning {iteration} {limit}");
        }
        DomainEvent::BudgetExceeded {
            iteration,
            reading,
            action,
        } => {
            let (limit, action) = (reading.limit, action.as_str());
            return format!("BudgetExceeded {iteration} {limit} {action}");
        }
        DomainEvent::Stalled {
            trace_id,
            iteration,
            count,
            action,
        } => (
            *trace_id,
            format!("Stalled {iteration} count={count} {}", action.as_str()),
        ),
    };
    let iteration: u128 = text
        .split(' ')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert_eq!(trace_id, id(iteration), "trace_id of {text}");
    text
}
