//! Unit tests of replies around the JSON object: `<think>` reasoning blocks (with JSON,
//! even reply drafts, inside the reasoning) and contents holding several reply objects.

use super::*;
use serde_json::json;

fn reply(content: &str) -> LlmReply {
    LlmReply {
        content: content.to_owned(),
        ..LlmReply::default()
    }
}

fn with_calls(content: &str) -> LlmReply {
    LlmReply {
        content: content.to_owned(),
        tool_calls: vec![ToolCallRequest {
            id: "call_1".into(),
            name: "calculate".into(),
            arguments: r#"{"expression":"1+2"}"#.into(),
        }],
        ..LlmReply::default()
    }
}

fn parse(content: &str) -> Result<ParsedReply, ReplyError> {
    parse_reply(&reply(content))
}

/// A reply object; `output` goes under `action.output`.
fn object(action_type: &str, output: Value) -> String {
    json!({
        "observe": format!("observe {action_type}"),
        "thought": "decide",
        "action": {"action_type": action_type, "output": output},
        "abstract": "a"
    })
    .to_string()
}

fn answer(text: &str) -> String {
    object("ANSWER", json!({ "answer": text }))
}

/// The answer of a parsed ANSWER reply, else a description of what came out.
fn answer_of(result: Result<ParsedReply, ReplyError>) -> String {
    match result.map(|parsed| parsed.action) {
        Ok(Action::Answer { answer }) => answer,
        other => format!("not an answer: {other:?}"),
    }
}

#[test]
fn the_reply_after_a_think_block_is_taken() {
    // Each reasoning drafts a different answer: only the cut tells the two apart.
    let draft = answer("2");
    let shapes = [
        format!(
            "<think>\nThe user wants 1+2: {draft}?\n</think>\n\n{}",
            answer("3")
        ),
        format!("  \n<THINK>upper case {draft}</THINK>{}", answer("3")),
        format!(
            "<thinking>{draft}</thinking>\n```json\n{}\n```",
            answer("3")
        ),
        format!(
            "<Think>mixed {draft}</thinking> Here it is: {}",
            answer("3")
        ),
        format!("<think>a</think><think>{draft}</think>{}", answer("3")),
    ];
    for content in &shapes {
        assert_eq!(answer_of(parse(content)), "3", "{content}");
    }
}

#[test]
fn json_in_the_reasoning_is_never_taken() {
    let decoys = [
        answer("draft"),
        object("REFLECT", json!({"summary": "draft"})),
    ]
    .join(" or ");
    let shapes = [
        // Drafts of the reply inside the reasoning, then the real reply.
        format!(
            "<think>Draft: {decoys}. {{\"x\": 1}} Better:</think>{}",
            answer("3")
        ),
        // The reasoning quotes a closing tag; the reply follows the last one.
        format!(
            "<think>I must write </think> then {decoys}</think>\n{}",
            answer("3")
        ),
        // The provider stripped the opening tag.
        format!(
            "Reasoning with {decoys} in it.\n</think>\n\n{}",
            answer("3")
        ),
    ];
    for content in &shapes {
        assert_eq!(answer_of(parse(content)), "3", "{content}");
    }
}

#[test]
fn a_reply_mentioning_the_closing_tag_is_not_cut() {
    let mentions = json!({"observe": "my last reply lacked </think>", "thought": "t",
        "action": {"action_type": "ANSWER", "output": {"answer": "3 </think> 4"}}})
    .to_string();
    for content in [mentions.clone(), format!("<think>r</think>\n{mentions}")] {
        let parsed = parse(&content).unwrap();
        assert_eq!(parsed.observe, "my last reply lacked </think>");
        assert_eq!(answer_of(Ok(parsed)), "3 </think> 4");
    }
}

#[test]
fn an_unclosed_think_block_is_all_reasoning() {
    let content = format!("<think>I will answer {}", answer("3"));
    let error = parse(&content).unwrap_err();
    assert_eq!(error, ReplyError::UnclosedReasoning);
    assert!(error.to_string().contains("never closed"), "{error}");
    assert!(error.to_string().contains("</think>"), "{error}");
    let parsed = parse_reply(&with_calls(&content)).unwrap();
    assert_eq!(parsed.action.action_type(), "CALL_TOOL");
}

#[test]
fn only_reasoning_before_tool_calls_is_a_bare_tool_call() {
    let decoy = object("REFLECT", json!({"summary": "draft"}));
    for content in [
        format!("<think>call it {decoy}</think>"),
        "<think>x</think>\n  ".to_owned(),
        "<think>x</think> Let me calculate.".to_owned(),
        "<think>x</think>{\"expression\": \"1+2\"}".to_owned(),
    ] {
        let parsed = parse_reply(&with_calls(&content)).unwrap();
        assert_eq!(parsed.action.action_type(), "CALL_TOOL", "{content}");
        assert_eq!(parsed.observe, "", "{content}");
    }
    let error = parse(&format!("<think>{decoy}</think>")).unwrap_err();
    assert_eq!(error, ReplyError::NothingAfterReasoning);
    let error = parse("<think>x</think> The answer is 3.").unwrap_err();
    assert!(
        matches!(&error, ReplyError::NoJsonObject { excerpt } if excerpt == "The answer is 3."),
        "{error:?}"
    );
}

#[test]
fn a_draft_then_a_single_answer_takes_the_answer() {
    let draft = object("REFLECT", json!({"summary": "so far"}));
    let content = format!("{draft}\nActually, final:\n{}", answer("3"));
    assert_eq!(answer_of(parse(&content)), "3");
    let content = format!("{}\n{draft}", answer("3"));
    assert_eq!(answer_of(parse(&content)), "3");
}

#[test]
fn several_objects_without_a_single_answer_are_rejected() {
    let call = object("CALL_TOOL", json!({}));
    let reflect = object("reflect", json!({"summary": "s"}));
    let error = parse_reply(&with_calls(&format!("{call}\n{reflect}"))).unwrap_err();
    assert_eq!(
        error,
        ReplyError::SeveralReplyObjects {
            count: 2,
            action_types: "CALL_TOOL, REFLECT".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "reply rejected: the reply held 2 JSON objects (CALL_TOOL, REFLECT) and must hold \
         exactly one; choose one action and write only its object (to call several tools, use \
         one CALL_TOOL object with several native tool_calls)"
    );
    let two_answers = format!("{} {}", answer("3"), answer("4"));
    let error = parse(&two_answers).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("held 2 JSON objects (ANSWER, ANSWER)")
    );
}

#[test]
fn many_objects_are_counted_and_named_with_a_bound() {
    let content = object("REFLECT", json!({"summary": "s"})) + &"{\"thought\": 1}".repeat(11);
    let error = parse(&content).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("held 12 JSON objects (REFLECT, no action_type,"),
        "{text}"
    );
    assert!(text.contains(", …)"), "{text}");
}

#[test]
fn quoted_non_reply_objects_and_repeats_do_not_count() {
    let reflect = object("REFLECT", json!({"summary": "s"}));
    let quoted = "Computing {} via {\"expression\": \"1+2\"}:";
    let content = format!("{quoted} {reflect} {quoted} {}", answer("3"));
    assert_eq!(answer_of(parse(&content)), "3");
    let content = format!(
        "{quoted} {reflect} {quoted} {}",
        object("CALL_TOOL", json!({}))
    );
    let error = parse(&content).unwrap_err().to_string();
    assert!(
        error.contains("held 2 JSON objects (REFLECT, CALL_TOOL)"),
        "{error}"
    );
    // The same object twice is one reply; a different one is not.
    let content = format!("{reflect}\n{reflect}");
    assert_eq!(
        parse(&content).map(|p| p.action.action_type()),
        Ok("REFLECT")
    );
    let other = object("REFLECT", json!({"summary": "t"}));
    let error = parse(&format!("{reflect}\n{other}")).unwrap_err();
    assert!(matches!(
        error,
        ReplyError::SeveralReplyObjects { count: 2, .. }
    ));
}

#[test]
fn reasoning_drafts_and_several_replies_combine() {
    let call = object("CALL_TOOL", json!({}));
    let content = format!("<think>{call}</think>{call} {}", answer("3"));
    assert_eq!(answer_of(parse(&content)), "3");
    let reflect = object("REFLECT", json!({"summary": "s"}));
    let content = format!("<think>{}</think>{call} {reflect}", answer("draft"));
    assert!(matches!(
        parse(&content),
        Err(ReplyError::SeveralReplyObjects { count: 2, .. })
    ));
}
