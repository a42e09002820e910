//! Generators shared by the property tests: reply contents that steer the scanner into its
//! corners, arbitrary JSON values (reply-shaped or not), tool calls and tool results.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

use crate::core::types::{LlmReply, ToolCallRequest, ToolCallResult};

/// Fragments of replies and of their failure modes.
const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    "\\\"",
    ":",
    ",",
    " ",
    "\n",
    "{}",
    "[]",
    "null",
    "1e999",
    "-0",
    "\\u00",
    "\\ud800",
    "好",
    "💥",
    "\u{0}",
    "\u{feff}",
    "<think>",
    "</think>",
    "<THINKING>",
    "</Thinking>",
    "</think",
    "```json\n",
    "```",
    "\"action\":",
    "\"observe\":",
    "\"thought\":",
    "\"action_type\":",
    "\"output\":",
    "\"ANSWER\"",
    "\"call-tool\"",
    "\"PLAN\"",
    "\"result\":",
    "\"step_updates\":",
    "\"step_id\": 1",
    "\"plan\":",
    r#"{"observe":"o","thought":"t","action":{"action_type":"ANSWER","output":{"answer":"a"}}}"#,
    r#"{"observe":"o","thought":"t","action":{"action_type":"REFLECT","output":{"summary":"s"}}}"#,
    r#"{"observe":"o","thought":"t","action":{"action_type":"CALL_TOOL","output":{}}}"#,
    r#"{"expression":"1+2"}"#,
];

/// Keys a model's JSON uses, so arbitrary objects often look like (parts of) replies.
const KEYS: &[&str] = &[
    "action",
    "observe",
    "thought",
    "abstract",
    "action_type",
    "output",
    "answer",
    "summary",
    "plan",
    "notes",
    "step_id",
    "description",
    "status",
    "step_updates",
    "result",
    "short_term_memory_append",
];

/// Action types as models write them, right and wrong.
const ACTION_TYPES: &[&str] = &[
    "ANSWER",
    "CALL_TOOL",
    "RE_PLAN",
    "REFLECT",
    "plan",
    "call-tool",
    "Re Plan",
    "SEARCH",
    "",
];

/// Arbitrary reply content: lossy bytes, soups of fragments, JSON values, reply objects.
pub(super) fn content() -> impl Strategy<Value = String> {
    prop_oneof![
        vec(any::<u8>(), 0..512).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        vec(select(PIECES), 0..64).prop_map(|pieces| pieces.concat()),
        vec(
            prop_oneof![select(PIECES).prop_map(str::to_owned), "\\PC{0,8}"],
            0..48
        )
        .prop_map(|pieces| pieces.concat()),
        json_value().prop_map(|value| value.to_string()),
        (".{0,12}", reply_object(), ".{0,12}")
            .prop_map(|(before, object, after)| format!("{before}{object}{after}")),
    ]
}

/// Arbitrary JSON: every kind of leaf, nested up to 8 levels.
pub(super) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        // NaN and the infinities become null.
        any::<f64>().prop_map(|number| json!(number)),
        ".{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(key(), inner, 0..6).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![select(KEYS).prop_map(str::to_owned), ".{0,6}"]
}

/// A string most of the time, anything now and then.
fn text_or_any() -> impl Strategy<Value = Value> {
    prop_oneof![4 => ".{0,24}".prop_map(Value::from), 1 => json_value()]
}

/// An object shaped like a reply, with arbitrary (often wrong) field values.
pub(super) fn reply_object() -> impl Strategy<Value = Value> {
    let plan_step = (text_or_any(), text_or_any(), text_or_any())
        .prop_map(|(id, description, status)| json!({"step_id": id, "description": description, "status": status}));
    let output = prop_oneof![
        json_value(),
        text_or_any().prop_map(|answer| json!({"answer": answer, "summary": answer})),
        vec(plan_step, 0..4).prop_map(|plan| json!({"plan": plan})),
    ];
    let action = (select(ACTION_TYPES), output, any::<bool>()).prop_map(|(kind, output, nest)| {
        let action = json!({"action_type": kind, "output": output});
        // Seed 000 nests the action under `result`.
        match nest {
            true => json!({ "result": action }),
            false => action,
        }
    });
    (
        text_or_any(),
        text_or_any(),
        action,
        text_or_any(),
        json_value(),
    )
        .prop_map(|(observe, thought, action, abstract_, step_updates)| {
            let mut object = Map::new();
            object.insert("observe".into(), observe);
            object.insert("thought".into(), thought);
            object.insert("action".into(), action);
            object.insert("abstract".into(), abstract_);
            object.insert("step_updates".into(), step_updates);
            Value::Object(object)
        })
}

/// Native tool calls with arbitrary names and arguments (JSON or not).
pub(super) fn tool_calls() -> impl Strategy<Value = Vec<ToolCallRequest>> {
    let arguments = prop_oneof![json_value().prop_map(|v| v.to_string()), content()];
    vec((".{0,12}", arguments), 0..3).prop_map(|calls| {
        calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| ToolCallRequest {
                id: format!("call_{i}"),
                name,
                arguments,
            })
            .collect()
    })
}

/// An arbitrary LLM reply.
pub(super) fn llm_reply() -> impl Strategy<Value = LlmReply> {
    (content(), tool_calls()).prop_map(|(content, tool_calls)| LlmReply {
        content,
        tool_calls,
        ..LlmReply::default()
    })
}

/// Arbitrary tool results: JSON results, errors, memos, success either way.
pub(super) fn tool_results() -> impl Strategy<Value = Vec<ToolCallResult>> {
    let result = (
        "call_[0-3]",
        ".{0,12}",
        json_value(),
        any::<bool>(),
        proptest::option::of(json_value()),
        proptest::option::of(".{0,40}"),
        proptest::option::of(".{0,40}"),
    );
    vec(result, 0..4).prop_map(|results| {
        results
            .into_iter()
            .map(
                |(id, name, arguments, success, result, error, memo)| ToolCallResult {
                    tool_call_id: id,
                    name,
                    arguments,
                    success,
                    result,
                    error,
                    memo,
                    duration_ms: 1,
                },
            )
            .collect()
    })
}
