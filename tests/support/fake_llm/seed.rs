//! Scripted replies in the seed-002 output format: RE_PLAN, CALL_TOOL (with native tool
//! calls), REFLECT and ANSWER, each echoing the request's trace id.

use serde_json::{Value, json};

use super::{FakeReply, TRACE_ID_PLACEHOLDER};

/// A seed-002 reply object: trace_id (placeholder), observe, thought,
/// `action {action_type, output}`, abstract and an empty `short_term_memory_append`.
pub fn seed_object(action_type: &str, output: Value) -> Value {
    json!({
        "trace_id": TRACE_ID_PLACEHOLDER,
        "observe": format!("fake observe before {action_type}"),
        "thought": format!("fake thought choosing {action_type}"),
        "action": {"action_type": action_type, "output": output},
        "abstract": format!("fake {action_type}"),
        "short_term_memory_append": ""
    })
}

/// RE_PLAN with the given `(step_id, description)` steps, all `pending`.
pub fn plan_reply(steps: &[(&str, &str)]) -> FakeReply {
    let plan: Vec<Value> = steps
        .iter()
        .map(|(id, description)| {
            json!({"step_id": id, "description": description, "status": "pending"})
        })
        .collect();
    FakeReply::json(seed_object("RE_PLAN", json!({"plan": plan, "notes": ""})))
}

/// CALL_TOOL: the seed object as content plus native tool calls `(name, arguments)`.
pub fn call_tool_reply(calls: Vec<(&str, Value)>) -> FakeReply {
    FakeReply::tool_calls(seed_object("CALL_TOOL", json!({})), calls)
}

/// REFLECT with `summary`.
pub fn reflect_reply(summary: &str) -> FakeReply {
    FakeReply::json(seed_object("REFLECT", json!({"summary": summary})))
}

/// ANSWER with `answer`.
pub fn answer_reply(answer: &str) -> FakeReply {
    FakeReply::json(seed_object("ANSWER", json!({"answer": answer})))
}
