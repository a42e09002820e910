//! Properties of the reply parser: it never panics, an accepted reply is consistent with
//! the native tool calls and the schema, reasoning never leaks into the reply, different
//! reply objects are never silently reduced to the first, and huge, deep or brace-flooded
//! content is handled in linear time.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::strategies::{content, llm_reply, reply_object, tool_calls};
use super::{SLOW, config, within};
use crate::core::action::{Action, ParsedReply, parse_reply};
use crate::core::extract::canonical_action_type;
use crate::core::reply_error::ReplyError;
use crate::core::types::{LlmReply, ToolCallRequest};

fn reply(content: String, tool_calls: Vec<ToolCallRequest>) -> LlmReply {
    LlmReply {
        content,
        tool_calls,
        ..LlmReply::default()
    }
}

/// What holds of every parse: an accepted reply is consistent, a rejection says why.
fn check(reply: &LlmReply) -> Result<ParsedReply, ReplyError> {
    let parsed = parse_reply(reply);
    match &parsed {
        Ok(parsed) => check_accepted(reply, parsed),
        Err(error) => assert!(error.to_string().starts_with("reply rejected: "), "{error}"),
    }
    parsed
}

fn check_accepted(reply: &LlmReply, parsed: &ParsedReply) {
    let has_calls = !reply.tool_calls.is_empty();
    assert_eq!(matches!(parsed.action, Action::CallTool(_)), has_calls);
    assert!(parsed.raw.is_object());
    match &parsed.action {
        Action::CallTool(calls) => assert_eq!(calls, &reply.tool_calls),
        Action::Answer { answer } => assert!(!answer.trim().is_empty()),
        Action::Reflect { summary } => assert!(!summary.trim().is_empty()),
        Action::RePlan { plan, .. } => {
            assert!(!plan.is_empty());
            for (i, step) in plan.iter().enumerate() {
                assert!(!step.step_id.is_empty());
                assert!(plan[..i].iter().all(|other| other.step_id != step.step_id));
            }
        }
    }
}

/// The canonical action type of a reply object (`None` when absent or unknown).
fn action_type(object: &Value) -> Option<&'static str> {
    let action = &object["action"];
    let found = match action.get("action_type") {
        Some(found) if !found.is_null() => found,
        _ => &action["result"]["action_type"],
    };
    found.as_str().and_then(canonical_action_type)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_reply_is_parsed_or_rejected_with_a_reason(reply in llm_reply()) {
        check(&reply).ok();
    }

    #[test]
    fn lossy_bytes_are_parsed_or_rejected(bytes in vec(any::<u8>(), 0..2048), calls in tool_calls()) {
        check(&reply(String::from_utf8_lossy(&bytes).into_owned(), calls)).ok();
    }

    #[test]
    fn reasoning_never_leaks_into_the_reply(
        reasoning in content(),
        decoy in reply_object(),
        answer in "[a-z]{1,4}.{0,40}",
        opened in any::<bool>(),
    ) {
        // Whatever the reasoning holds, it holds no tags of its own here.
        let reasoning = reasoning.to_ascii_lowercase().replace("think", "thonk");
        let object = json!({"observe": "o", "thought": "t",
            "action": {"action_type": "ANSWER", "output": {"answer": answer}}});
        let open = if opened { "<think>" } else { "" };
        let content = format!("{open}{reasoning}{decoy}\n</think>\n{object}");
        let parsed = check(&reply(content, Vec::new()));
        prop_assert_eq!(parsed.map(|p| p.action), Ok(Action::Answer { answer }));
    }

    #[test]
    fn different_reply_objects_are_never_reduced_to_the_first(
        first in reply_object(),
        second in reply_object(),
        calls in tool_calls(),
    ) {
        let texts = [first.to_string(), second.to_string()];
        let parsed: Vec<Value> = texts.iter().map(|t| serde_json::from_str(t).unwrap()).collect();
        let answers: Vec<&Value> =
            parsed.iter().filter(|o| action_type(o) == Some("ANSWER")).collect();
        let result = check(&reply(texts.join("\n"), calls));
        if parsed[0] == parsed[1] {
            return Ok(());
        }
        match (answers.as_slice(), result) {
            ([answer], Ok(accepted)) => prop_assert_eq!(&accepted.raw, *answer),
            ([_], Err(error)) => {
                let several = matches!(error, ReplyError::SeveralReplyObjects { .. });
                prop_assert!(!several, "{}", error);
            }
            (_, result) => prop_assert!(
                matches!(result, Err(ReplyError::SeveralReplyObjects { count: 2, .. })),
                "{:?}",
                result.map(|accepted| accepted.raw)
            ),
        }
    }
}

/// A reply whose content is `text`, parsed with and without native tool calls.
fn parse_both(text: &str) -> Result<ParsedReply, ReplyError> {
    let call = ToolCallRequest {
        id: "call_1".into(),
        name: "calculate".into(),
        arguments: "{}".into(),
    };
    check(&reply(text.to_owned(), vec![call])).ok();
    check(&reply(text.to_owned(), Vec::new()))
}

#[test]
fn deep_nesting_is_rejected_in_linear_time() {
    const DEPTH: usize = 100_000;
    let shapes = [
        "[".repeat(DEPTH),
        "{".repeat(DEPTH),
        format!("{}{}", "{".repeat(DEPTH), "}".repeat(DEPTH)),
        format!("{{\"observe\":{}{}}}", "[".repeat(DEPTH), "]".repeat(DEPTH)),
        "{\"a\":".repeat(DEPTH),
        format!("<think>{}</think>{}", "{".repeat(DEPTH), "[".repeat(DEPTH)),
    ];
    for content in &shapes {
        let parsed = within(SLOW, "deep nesting", || parse_both(content));
        assert!(parsed.is_err(), "{:?}", parsed.map(|p| p.action));
    }
}

#[test]
fn huge_strings_are_parsed_in_linear_time() {
    const SIZE: usize = 4 << 20;
    let long = "x".repeat(SIZE);
    let object = json!({"observe": long, "thought": "t",
        "action": {"action_type": "ANSWER", "output": {"answer": "a"}}});
    let parsed = within(SLOW, "a 4 MB reply", || parse_both(&object.to_string()));
    assert_eq!(parsed.map(|p| p.observe.len()), Ok(SIZE));
    let unterminated = format!("{{\"observe\": \"{long}");
    let error = within(SLOW, "a 4 MB unterminated string", || {
        parse_both(&unterminated)
    });
    assert!(matches!(error, Err(ReplyError::InvalidJson { .. })));
    let error = within(SLOW, "4 MB of prose", || parse_both(&long));
    assert!(matches!(error, Err(ReplyError::NoJsonObject { excerpt }) if excerpt.len() < 200));
    let unclosed = format!("<think>{long}");
    let error = within(SLOW, "4 MB of reasoning", || parse_both(&unclosed));
    assert_eq!(error.map(|p| p.action), Err(ReplyError::UnclosedReasoning));
}

#[test]
fn floods_of_braces_objects_and_tags_stay_linear() {
    // 1 MB, not 4: every small object is a parse of its own, slow in a debug build.
    const SIZE: usize = 1 << 20;
    let reflect = r#"{"observe":"o","thought":"t","action":{"action_type":"REFLECT","output":{"summary":"s"}}}"#;
    let floods = [
        "{}",
        "}{",
        "\"{",
        "{\"a\":\"",
        "{\"observe\":1}",
        "</think>",
        "</think>{",
        "<think>{\"thought\":\"</think>\"}",
        "{\"thought\":\"</think>\"}</think>",
        reflect,
    ];
    for flood in floods {
        let content = flood.repeat(SIZE / flood.len());
        within(SLOW, flood, || check(&reply(content, Vec::new()))).ok();
    }
    let alternating =
        format!("{reflect}{}", reflect.replace("REFLECT", "re_plan")).repeat(SIZE / 180);
    let error = within(SLOW, "alternating replies", || {
        check(&reply(alternating, Vec::new()))
    });
    assert!(
        matches!(&error, Err(ReplyError::SeveralReplyObjects { action_types, .. })
            if action_types.len() < 200),
        "{error:?}"
    );
}
