//! Unit tests of what comes in: storable replies and results, task-unique tool-call ids.

use serde_json::json;

use super::*;
use crate::core::types::Usage;

fn call(id: &str, arguments: &str) -> ToolCallRequest {
    ToolCallRequest {
        id: id.into(),
        name: "calculate".into(),
        arguments: arguments.into(),
    }
}

fn with_calls(calls: Vec<ToolCallRequest>) -> LlmReply {
    LlmReply {
        content: String::new(),
        tool_calls: calls,
        usage: Usage::default(),
    }
}

fn ids(reply: &LlmReply) -> Vec<&str> {
    reply.tool_calls.iter().map(|c| c.id.as_str()).collect()
}

#[test]
fn a_clean_reply_with_fresh_ids_is_borrowed_as_it_is() {
    let reply = LlmReply {
        content: r#"{"thought": "é \u00e9 \uffff"}"#.into(),
        ..with_calls(vec![call("a", "{}"), call("b", r#"{"x": "\\u0000"}"#)])
    };
    let mut used = BTreeSet::new();
    assert!(matches!(
        self::reply(&reply, 1, &mut used),
        Cow::Borrowed(_)
    ));
    assert_eq!(used, BTreeSet::from(["a".to_owned(), "b".to_owned()]));
}

#[test]
fn nul_in_content_arguments_and_names_is_replaced() {
    let reply = LlmReply {
        content: "{\"thought\": \"a\\u0000b\"}\0".into(),
        ..with_calls(vec![ToolCallRequest {
            id: "c\0".into(),
            name: "calc\0".into(),
            arguments: r#"{"expression": "1\u0000", "k\u0000": 2}"#.into(),
        }])
    };
    let got = self::reply(&reply, 1, &mut BTreeSet::new()).into_owned();
    assert_eq!(got.content, "{\"thought\": \"a\\ufffdb\"}\u{FFFD}");
    let call = &got.tool_calls[0];
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        ("c\u{FFFD}", "calc\u{FFFD}")
    );
    let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(
        arguments,
        json!({"expression": "1\u{FFFD}", "k\u{FFFD}": 2})
    );
}

#[test]
fn duplicate_and_empty_ids_in_one_reply_get_deterministic_unique_ids() {
    let reply = with_calls(vec![
        call("dup", "{}"),
        call("dup", "{}"),
        call("", "{}"),
        call("  ", "{}"),
        call("dup", "{}"),
        // A provider id that happens to be the generated one of an earlier call.
        call("dup_1_2", "{}"),
    ]);
    let first = self::reply(&reply, 1, &mut BTreeSet::new()).into_owned();
    assert_eq!(
        ids(&first),
        [
            "dup",
            "dup_1_2",
            "call_1_3",
            "call_1_4",
            "dup_1_5",
            "dup_1_2_1_6"
        ]
    );
    let again = self::reply(&reply, 1, &mut BTreeSet::new()).into_owned();
    assert_eq!(ids(&again), ids(&first), "the same reply gets the same ids");
    // The arguments and names are untouched.
    assert!(
        first
            .tool_calls
            .iter()
            .all(|c| c.name == "calculate" && c.arguments == "{}")
    );
}

#[test]
fn an_id_an_earlier_reply_used_is_renamed_and_renaming_is_stable() {
    let mut used = BTreeSet::new();
    let reply = with_calls(vec![call("call_0", "{}")]);
    let first = self::reply(&reply, 1, &mut used).into_owned();
    assert_eq!(ids(&first), ["call_0"]);
    let second = self::reply(&reply, 2, &mut used).into_owned();
    assert_eq!(ids(&second), ["call_0_2_1"]);
    // Replaying the stored (renamed) replies keeps their ids (a fork rebuilds that way).
    let mut replayed = BTreeSet::new();
    for (iteration, reply) in [(1, &first), (2, &second)] {
        let again = self::reply(reply, iteration, &mut replayed);
        assert!(matches!(again, Cow::Borrowed(_)), "{:?}", ids(&again));
    }
}

#[test]
fn tool_results_are_made_storable_everywhere() {
    let result = ToolCallResult {
        tool_call_id: "c".into(),
        name: "mcp\0".into(),
        arguments: json!({"p\u{0}": "\u{0}"}),
        success: false,
        result: Some(json!({"structured": ["a\u{0}"]})),
        error: Some("bad\0".into()),
        memo: Some("m\0".into()),
        duration_ms: 1,
    };
    assert!(!is_storable_result(&result));
    let got = tool_result(result);
    assert!(is_storable_result(&got));
    assert_eq!(got.name, "mcp\u{FFFD}");
    assert_eq!(got.arguments, json!({"p\u{FFFD}": "\u{FFFD}"}));
    assert_eq!(got.result, Some(json!({"structured": ["a\u{FFFD}"]})));
    assert_eq!(got.error.as_deref(), Some("bad\u{FFFD}"));
    assert_eq!(got.memo.as_deref(), Some("m\u{FFFD}"));
}

#[test]
fn an_overlong_id_is_replaced_by_a_positional_one() {
    let long = "x".repeat(MAX_TOOL_CALL_ID_CHARS + 1);
    let fits = "y".repeat(MAX_TOOL_CALL_ID_CHARS);
    let reply = with_calls(vec![call(&long, "{}"), call(&fits, "{}")]);
    let mut used = BTreeSet::new();
    let fixed = super::reply(&reply, 4, &mut used);
    assert_eq!(ids(&fixed), vec!["call_4_1", fits.as_str()]);
}
