//! Unit tests of locating the reply object: scanning, reasoning cuts, several objects.

use super::*;
use serde_json::json;

fn find(content: &str) -> Result<Value, ExtractError> {
    find_reply_object(content).map(Value::Object)
}

#[test]
fn plain_object_is_found() {
    assert_eq!(find(r#"{"observe":"x"}"#).unwrap()["observe"], "x");
}

#[test]
fn fenced_object_and_prose_are_tolerated() {
    let content = "Sure! Here it is:\n```json\n{\"observe\": \"a\"}\n```\nDone.";
    assert_eq!(find(content).unwrap()["observe"], "a");
}

#[test]
fn braces_and_escaped_quotes_inside_strings_do_not_confuse_the_scan() {
    let content = r#"note {x} then {"observe": "a } \" { b", "thought": "\\"} trailing }"#;
    let value = find(content).unwrap();
    assert_eq!(value["observe"], "a } \" { b");
    assert_eq!(value["thought"], "\\");
}

#[test]
fn reply_object_is_preferred_over_an_empty_object_in_prose() {
    let content = r#"output is {} and {"action": {"action_type": "ANSWER"}}"#;
    assert!(find(content).unwrap().get("action").is_some());
}

#[test]
fn inner_objects_of_a_broken_reply_are_not_mistaken_for_it() {
    let content = r#"{"observe": "say "hi"", "action": {"action_type": "ANSWER"}}"#;
    match find(content) {
        Err(ExtractError::Invalid(message)) => assert!(message.contains("line 1")),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn truncated_object_is_reported_as_incomplete() {
    match find(r#"{"observe": "a", "action": {"#) {
        Err(ExtractError::Invalid(message)) => assert!(message.contains("incomplete")),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn no_brace_means_no_object() {
    assert_eq!(
        find("just words"),
        Err(ExtractError::NoObject {
            excerpt: "just words".into()
        })
    );
    assert!(matches!(find(""), Err(ExtractError::NoObject { .. })));
}

#[test]
fn multibyte_text_around_the_object_is_fine() {
    let content = "好的：{\"observe\": \"观察 }\"} 完成";
    assert_eq!(find(content).unwrap()["observe"], "观察 }");
}

#[test]
fn odd_inputs_never_panic() {
    let inputs = [
        "{",
        "}",
        "{{{{",
        "}}}}{",
        "\"{\"",
        "{\"",
        "{\\",
        "{\"a\":\"\\",
        "[{}]",
        "{]",
        "\u{0}{\u{0}}",
        "{\"a\":1}}}}",
        "```json\n{\n```",
        "{\"a\":{\"b\":[1,2,{]}}",
    ];
    for input in inputs {
        let _ = find_reply_object(input);
    }
}

fn answer(text: &str) -> String {
    json!({"observe": "o", "thought": "t",
        "action": {"action_type": "ANSWER", "output": {"answer": text}}})
    .to_string()
}

fn act(action_type: &str) -> String {
    json!({"observe": "o", "thought": "t", "action": {"action_type": action_type}}).to_string()
}

#[test]
fn reasoning_before_the_reply_is_cut_off_with_its_decoys() {
    let decoy = answer("2");
    let content = format!("<think>draft {decoy} no</think>\n{}", answer("3"));
    assert_eq!(find(&content).unwrap()["action"]["output"]["answer"], "3");
    let stray = format!("draft {decoy}</THINKING> {}", answer("4"));
    assert_eq!(find(&stray).unwrap()["action"]["output"]["answer"], "4");
}

#[test]
fn a_closing_tag_inside_the_reply_does_not_cut_it() {
    let reply = json!({"observe": "I closed </think> last time", "thought": "t",
        "action": {"action_type": "ANSWER", "output": {"answer": "5"}}})
    .to_string();
    for content in [
        reply.clone(),
        format!("<think>r</think>{reply}"),
        format!("<think>r {} </think> r </think>{reply}", act("REFLECT")),
    ] {
        let found = find(&content).unwrap();
        assert_eq!(found["observe"], "I closed </think> last time", "{content}");
    }
}

#[test]
fn a_decoy_before_a_stray_closing_tag_is_never_taken() {
    let content = format!("draft {}</think>", act("ANSWER"));
    assert_eq!(find(&content), Err(ExtractError::NothingAfterReasoning));
    let content = format!("<think>draft {}</think>  ", act("ANSWER"));
    assert_eq!(find(&content), Err(ExtractError::NothingAfterReasoning));
    let content = format!("<think>draft {}", act("ANSWER"));
    assert_eq!(find(&content), Err(ExtractError::UnclosedReasoning));
}

#[test]
fn several_reply_objects_need_a_single_answer() {
    let content = format!("{} then {}", act("CALL_TOOL"), answer("6"));
    assert_eq!(find(&content).unwrap()["action"]["output"]["answer"], "6");
    let content = format!("{} {} {}", act("call-tool"), act("Reflect"), act("SEARCH"));
    assert_eq!(
        find(&content),
        Err(ExtractError::SeveralReplies {
            count: 3,
            action_types: vec!["CALL_TOOL".into(), "REFLECT".into(), "\"SEARCH\"".into()]
        })
    );
    let content = format!("{} {}", answer("1"), answer("2"));
    assert!(matches!(
        find(&content),
        Err(ExtractError::SeveralReplies { count: 2, .. })
    ));
}

#[test]
fn identical_repeats_and_quoted_objects_are_one_reply() {
    let content = format!("{} again: {}", act("REFLECT"), act("REFLECT"));
    assert_eq!(find(&content).unwrap()["action"]["action_type"], "REFLECT");
    let content = format!("{} again: {}", act("REFLECT"), act("reflect"));
    assert!(matches!(
        find(&content),
        Err(ExtractError::SeveralReplies { count: 2, .. })
    ));
    let quoted = "{} and {\"expression\": \"1+2\"}";
    let content = format!("{quoted} {} {quoted} {}", act("REFLECT"), answer("8"));
    assert_eq!(find(&content).unwrap()["action"]["output"]["answer"], "8");
}

#[test]
fn many_reply_objects_are_named_only_up_to_a_bound() {
    let content = act("REFLECT").repeat(3) + &act("RE_PLAN").repeat(20);
    let Err(ExtractError::SeveralReplies {
        count,
        action_types,
    }) = find(&content)
    else {
        panic!("expected SeveralReplies")
    };
    assert_eq!(count, 23);
    assert_eq!(action_types.len(), NAMED_REPLIES);
}

#[test]
fn seed_000_nesting_and_missing_types_are_named() {
    let nested = json!({"action": {"result": {"action_type": "plan"}}});
    let content = format!("{nested} {}", json!({"thought": "t"}));
    assert_eq!(
        find(&content),
        Err(ExtractError::SeveralReplies {
            count: 2,
            action_types: vec!["RE_PLAN".into(), "no action_type".into()]
        })
    );
}
