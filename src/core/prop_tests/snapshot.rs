//! Properties of the state-snapshot renderer (`Machine::fitted_messages` and `render`,
//! driven through `begin_recursion`): arbitrary replies and tool results, fed through a
//! machine over several recursions, always render a request whose system message is the
//! snapshot as valid JSON, and huge or deep inputs are cut to the task's limits in linear
//! time.

use chrono::{DateTime, TimeZone, Utc};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use super::strategies::{json_value, llm_reply, tool_results};
use super::{SLOW, config, within};
use crate::core::limits::Limits;
use crate::core::machine::{LlmCall, Machine, Next, TaskInfo};
use crate::core::prompt::PromptTemplate;
use crate::core::types::{LlmReply, ToolCallRequest, ToolCallResult};

fn at(second: u32) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + i64::from(second), 0)
        .single()
        .unwrap_or_default()
}

fn task(objective: String, limits: Limits) -> TaskInfo {
    TaskInfo {
        task_id: Uuid::from_u128(1),
        agent_id: Uuid::from_u128(2),
        objective,
        constraints: vec!["be brief".into()],
        max_iteration: 8,
        created_at: at(0),
        limits,
        conversation: Vec::new(),
        budget: None,
        stall: Default::default(),
    }
}

/// The bare placeholder, so the system message is exactly the snapshot JSON.
fn template() -> PromptTemplate {
    PromptTemplate::new("{{current_state}}").unwrap()
}

fn limits() -> impl Strategy<Value = Limits> {
    (1u32..30_000, 0u32..6, 0usize..3_000, 0usize..5_000).prop_map(
        |(budget, keep, tool_chars, reply_chars)| Limits {
            context_budget_tokens: budget,
            keep_recent_recursions: keep,
            max_tool_result_chars: tool_chars,
            max_reply_chars: reply_chars,
        },
    )
}

/// One recursion's inputs: the model's reply, then (if it called tools) their results.
type Recursion = (LlmReply, Vec<ToolCallResult>);

/// Drives `machine` through `recursions`, checking every request it renders; returns the
/// requests.
fn drive(machine: &mut Machine, recursions: Vec<Recursion>) -> Vec<LlmCall> {
    let mut calls = Vec::new();
    for (i, (reply, results)) in (0u32..).zip(recursions) {
        let call =
            match machine.begin_recursion(Uuid::from_u128(100 + u128::from(i)), at(i), &template())
            {
                Next::CallLlm(call) => call,
                Next::Finished(_) => break,
                other => panic!("begin_recursion answered {other:?}"),
            };
        check_request(&call);
        check_checkpoint(machine);
        calls.push(call);
        match machine.on_llm_reply(&reply, at(i)) {
            Next::RunTools(_) => {
                check_checkpoint(machine);
                let next = machine.on_tool_results(results, at(i));
                assert_eq!(next, Next::Continue);
            }
            Next::Continue => {}
            Next::Finished(_) => break,
            Next::CallLlm(_) => panic!("on_llm_reply asked for an LLM call"),
            Next::Wait(reason) => panic!("on_llm_reply asked to wait ({reason:?})"),
        }
        machine.take_events();
        check_checkpoint(machine);
    }
    calls
}

/// The machine's checkpoint reads back through serde_json's default recursion limit, as
/// the driver reads it from the database.
fn check_checkpoint(machine: &Machine) {
    let text = serde_json::to_string(machine).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value::<Machine>(value).unwrap();
}

/// The seed layout, with the snapshot as valid JSON in the system message.
fn check_request(call: &LlmCall) {
    assert!(call.messages.len() >= 2);
    let state: Value = serde_json::from_str(&call.messages[1].content.text()).unwrap();
    for key in ["global", "current_recursion", "context", "last_recursion"] {
        assert!(state.get(key).is_some(), "no {key} in {state}");
    }
}

/// The characters of a request, all messages together.
fn request_chars(call: &LlmCall) -> usize {
    call.messages
        .iter()
        .map(|m| m.content.text().chars().count())
        .sum()
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn arbitrary_recursions_always_render_a_valid_snapshot(
        objective in ".{0,200}",
        limits in limits(),
        recursions in vec((llm_reply(), tool_results()), 1..6),
    ) {
        let mut machine = Machine::new(task(objective, limits));
        drive(&mut machine, recursions);
    }

    #[test]
    fn arbitrary_tool_results_are_cut_to_the_limits(
        values in vec((json_value(), 1usize..400), 1..4),
        tool_chars in 0usize..500,
    ) {
        let limits = Limits { max_tool_result_chars: tool_chars, ..Limits::default() };
        let calls: Vec<ToolCallRequest> = (0..values.len()).map(tool_call).collect();
        // Each result repeats an arbitrary value, so most are far longer than the limit.
        let results: Vec<ToolCallResult> = calls
            .iter()
            .zip(values)
            .map(|(call, (value, copies))| success(call, Value::Array(vec![value; copies])))
            .collect();
        let count = results.len();
        let mut machine = Machine::new(task("go".into(), limits));
        let requests = drive(&mut machine, vec![(calling(calls), results), (answer(), vec![])]);
        let last = &requests[requests.len() - 1];
        // Each result is shown twice (history message, last_recursion) as at most
        // `tool_chars` chars of JSON text plus the marker, each char escaped to at most two,
        // beside the view's other fields.
        let bound = 2_000 + count * 2 * (2 * (tool_chars + 60) + 200);
        prop_assert!(request_chars(last) < bound, "{} >= {bound}", request_chars(last));
    }
}

fn tool_call(n: usize) -> ToolCallRequest {
    ToolCallRequest {
        id: format!("call_{n}"),
        name: "fetch".into(),
        arguments: "{}".into(),
    }
}

fn success(call: &ToolCallRequest, result: Value) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: json!({}),
        success: true,
        result: Some(result),
        error: None,
        memo: None,
        duration_ms: 1,
    }
}

fn calling(tool_calls: Vec<ToolCallRequest>) -> LlmReply {
    LlmReply {
        tool_calls,
        ..LlmReply::default()
    }
}

fn answer() -> LlmReply {
    let object = json!({"observe": "o", "thought": "t",
        "action": {"action_type": "ANSWER", "output": {"answer": "done"}}});
    LlmReply {
        content: object.to_string(),
        ..LlmReply::default()
    }
}

/// JSON nested `depth` levels deep, built by parsing as the adapters do (serde_json stops
/// at 128 levels, so this is as deep as a tool result can get).
fn nested(depth: usize) -> Value {
    let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn huge_and_deep_inputs_are_cut_to_the_limits_in_linear_time() {
    const SIZE: usize = 4 << 20;
    let long = "y".repeat(SIZE);
    // A 4 MB reply: four 1 MB texts, and a field nested deeper than the checkpoint allows.
    let quarter = &long[..SIZE / 4];
    let reply = json!({"observe": quarter, "thought": quarter, "abstract": quarter,
        "short_term_memory_append": quarter, "notes": nested(126),
        "action": {"action_type": "CALL_TOOL", "output": {}}});
    let calls: Vec<ToolCallRequest> = (0..4).map(tool_call).collect();
    let results = vec![
        success(&calls[0], Value::String(long.clone())),
        success(&calls[1], nested(126)),
        success(&calls[2], Value::Array(vec![json!(1); 500_000])),
        ToolCallResult {
            success: false,
            result: None,
            error: Some(quarter.to_owned()),
            memo: Some(quarter.to_owned()),
            ..success(&calls[3], Value::Null)
        },
    ];
    let huge_reply = LlmReply {
        content: reply.to_string(),
        tool_calls: calls,
        ..LlmReply::default()
    };
    let garbage = LlmReply {
        content: format!("{}{long}", "{".repeat(100_000)),
        ..LlmReply::default()
    };
    let objective = format!("objective {}", "z".repeat(1000));
    let mut machine = Machine::new(task(objective, Limits::default()));
    let recursions = vec![(huge_reply, results), (garbage, vec![]), (answer(), vec![])];
    let requests = within(SLOW, "recursions of megabytes", || {
        drive(&mut machine, recursions)
    });
    assert_eq!(requests.len(), 3);
    // The default limits cut replies at 16000 chars and tool results at 8000, and the
    // request is fitted into 24000 tokens (about 96000 ASCII chars): nothing of the
    // megabytes gets through whole.
    for request in &requests[1..] {
        assert!(
            request_chars(request) < 120_000,
            "{}",
            request_chars(request)
        );
    }
}
