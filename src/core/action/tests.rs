//! Unit tests of reply parsing: every action type, every tolerance and every error.

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

fn object(action_type: &str, output: Value) -> String {
    json!({
        "trace_id": "made-up",
        "observe": "first recursion",
        "thought": "decide",
        "action": {"action_type": action_type, "output": output},
        "abstract": "did a thing",
        "short_term_memory_append": "remember"
    })
    .to_string()
}

fn parse(content: &str) -> Result<ParsedReply, ReplyError> {
    parse_reply(&reply(content))
}

#[test]
fn answer_is_parsed_with_all_fields() {
    let parsed = parse(&object("ANSWER", json!({"answer": "3"}))).unwrap();
    assert_eq!(parsed.observe, "first recursion");
    assert_eq!(parsed.thought, "decide");
    assert_eq!(parsed.abstract_, "did a thing");
    assert_eq!(parsed.short_term_memory_append.as_deref(), Some("remember"));
    assert_eq!(parsed.action, Action::Answer { answer: "3".into() });
    assert_eq!(parsed.action.action_type(), "ANSWER");
    assert_eq!(parsed.raw["trace_id"], "made-up");
    assert!(parsed.step_updates.is_empty());
}

#[test]
fn re_plan_defaults_status_to_pending_and_keeps_notes() {
    let output = json!({"plan": [
        {"step_id": "1", "description": "compute", "status": "running"},
        {"step_id": 2, "description": "answer"}
    ], "notes": "easy"});
    let parsed = parse(&object("re_plan", output)).unwrap();
    let Action::RePlan { plan, notes } = &parsed.action else {
        panic!("not a plan: {:?}", parsed.action)
    };
    assert_eq!(plan[0].status, StepStatus::Running);
    assert_eq!(plan[1].step_id, "2");
    assert_eq!(plan[1].status, StepStatus::Pending);
    assert_eq!(notes.as_deref(), Some("easy"));
    assert_eq!(parsed.action.output()["plan"][1]["status"], "pending");
}

#[test]
fn plan_is_accepted_as_re_plan_and_case_is_ignored() {
    let output = json!({"plan": [{"step_id": "1", "description": "x"}]});
    for name in ["PLAN", "Re_Plan", "replan", " re-plan "] {
        let parsed = parse(&object(name, output.clone())).unwrap();
        assert_eq!(parsed.action.action_type(), "RE_PLAN", "{name}");
    }
    let parsed = parse(&object("reflect", json!({"summary": "so far"}))).unwrap();
    assert_eq!(parsed.action.output(), json!({"summary": "so far"}));
}

#[test]
fn call_tool_carries_the_native_tool_calls() {
    let parsed = parse_reply(&with_calls(&object("CALL_TOOL", json!({})))).unwrap();
    let Action::CallTool(calls) = &parsed.action else {
        panic!("not a call: {:?}", parsed.action)
    };
    assert_eq!(calls[0].id, "call_1");
    assert_eq!(parsed.action.output(), json!({}));
    assert_eq!(parsed.observe, "first recursion");
}

#[test]
fn tool_calls_without_json_content_are_accepted_as_call_tool() {
    for content in [
        "",
        "  ",
        "Let me calculate that.",
        r#"{"expression": "1+2"}"#,
    ] {
        let parsed = parse_reply(&with_calls(content)).unwrap();
        assert_eq!(parsed.action.action_type(), "CALL_TOOL");
        assert_eq!(
            (parsed.observe.as_str(), parsed.abstract_.as_str()),
            ("", "")
        );
    }
}

#[test]
fn fences_prose_braces_and_escaped_quotes_are_tolerated() {
    let inner = json!({
        "observe": "saw {braces} and \"quotes\"",
        "thought": "a \\ backslash }",
        "action": {"action_type": "ANSWER", "output": {"answer": "{ok}"}}
    });
    let content = format!("Here you go:\n```json\n{inner}\n```\nHope it helps {{");
    let parsed = parse(&content).unwrap();
    assert_eq!(parsed.observe, "saw {braces} and \"quotes\"");
    assert_eq!(parsed.thought, "a \\ backslash }");
    assert_eq!(
        parsed.action,
        Action::Answer {
            answer: "{ok}".into()
        }
    );
    assert_eq!(parsed.abstract_, "");
    assert_eq!(parsed.short_term_memory_append, None);
}

#[test]
fn seed_000_nesting_under_result_is_accepted() {
    let content = json!({"observe": "o", "thought": "t",
        "action": {"result": {"action_type": "ANSWER", "output": {"answer": "a"}}}});
    assert!(parse(&content.to_string()).is_ok());
}

#[test]
fn blank_memory_is_none_and_step_updates_are_read() {
    let content = json!({"observe": "o", "thought": "t", "short_term_memory_append": "  ",
        "action": {"action_type": "REFLECT", "output": {"summary": "s"}},
        "step_updates": [{"step_id": "1", "status": "DONE"}, {"step_id": 2, "status": "error"}]});
    let parsed = parse(&content.to_string()).unwrap();
    assert_eq!(parsed.short_term_memory_append, None);
    assert_eq!(
        parsed.step_updates,
        vec![
            StepUpdate {
                step_id: "1".into(),
                status: StepStatus::Done
            },
            StepUpdate {
                step_id: "2".into(),
                status: StepStatus::Error
            }
        ]
    );
}

#[test]
fn empty_and_prose_only_replies_are_rejected() {
    assert_eq!(parse(" \n"), Err(ReplyError::Empty));
    let error = parse("I think the answer is 3.").unwrap_err();
    assert!(
        matches!(&error, ReplyError::NoJsonObject { excerpt } if excerpt.starts_with("I think"))
    );
    assert!(error.to_string().contains("exactly one JSON object"));
}

#[test]
fn invalid_json_reports_line_and_column() {
    let error = parse("{\"observe\": \"say \"hi\"\",\n\"thought\": 1}").unwrap_err();
    let ReplyError::InvalidJson { message } = &error else {
        panic!("unexpected {error:?}")
    };
    assert!(message.contains("line 1 column"), "{message}");
    assert!(error.to_string().contains("unescaped double quotes"));
}

#[test]
fn missing_and_mistyped_fields_name_their_path() {
    let no_thought = json!({"observe": "o", "action": {"action_type": "ANSWER"}}).to_string();
    assert!(
        matches!(parse(&no_thought), Err(ReplyError::MissingField { path, .. }) if path == "thought")
    );
    let bad_observe = json!({"observe": 1, "thought": "t"}).to_string();
    assert!(
        matches!(parse(&bad_observe), Err(ReplyError::WrongType { path, .. }) if path == "observe")
    );
    let no_output = json!({"observe": "o", "thought": "t", "action": {"action_type": "ANSWER"}});
    let error = parse(&no_output.to_string()).unwrap_err();
    assert!(matches!(&error, ReplyError::MissingField { path, .. } if path == "action.output"));
    let bad_step = object(
        "RE_PLAN",
        json!({"plan": [{"step_id": "1", "description": "a"},
        {"step_id": "2"}]}),
    );
    let error = parse(&bad_step).unwrap_err();
    assert_eq!(
        error.to_string(),
        "reply rejected: field `action.output.plan[1].description` is missing; expected a \
         non-empty string describing the step"
    );
    let bad_abstract = json!({"observe": "o", "thought": "t", "abstract": ["x"],
        "action": {"action_type": "ANSWER", "output": {"answer": "a"}}});
    assert!(matches!(parse(&bad_abstract.to_string()),
        Err(ReplyError::WrongType { path, .. }) if path == "abstract"));
}

#[test]
fn empty_outputs_are_rejected() {
    let empty_answer = parse(&object("ANSWER", json!({"answer": " "}))).unwrap_err();
    assert!(
        matches!(empty_answer, ReplyError::EmptyField { path, .. } if path == "action.output.answer")
    );
    let empty_plan = parse(&object("RE_PLAN", json!({"plan": []}))).unwrap_err();
    assert!(
        matches!(empty_plan, ReplyError::EmptyField { path, .. } if path == "action.output.plan")
    );
    let text_plan = parse(&object("RE_PLAN", json!({"plan": "1. a\n2. b"}))).unwrap_err();
    assert!(matches!(text_plan, ReplyError::WrongType { found, .. } if found == "a string"));
    let no_summary = parse(&object("REFLECT", json!({}))).unwrap_err();
    assert!(
        matches!(no_summary, ReplyError::MissingField { path, .. } if path == "action.output.summary")
    );
}

#[test]
fn unknown_action_type_lists_the_legal_ones() {
    let error = parse(&object("SEARCH", json!({}))).unwrap_err();
    assert_eq!(
        error,
        ReplyError::UnknownActionType {
            found: "SEARCH".into()
        }
    );
    assert!(
        error
            .to_string()
            .contains("CALL_TOOL, RE_PLAN, REFLECT, ANSWER")
    );
}

#[test]
fn call_tool_and_tool_calls_must_agree() {
    let error = parse(&object("CALL_TOOL", json!({}))).unwrap_err();
    assert_eq!(error, ReplyError::CallToolWithoutToolCalls);
    let error = parse_reply(&with_calls(&object("ANSWER", json!({"answer": "a"})))).unwrap_err();
    assert_eq!(
        error,
        ReplyError::ToolCallsWithoutCallTool {
            action_type: "ANSWER".into(),
            names: "calculate".into()
        }
    );
}

#[test]
fn bad_statuses_and_duplicate_step_ids_are_rejected() {
    let updates = json!({"observe": "o", "thought": "t",
        "action": {"action_type": "ANSWER", "output": {"answer": "a"}},
        "step_updates": [{"step_id": "1", "status": "finished"}]});
    let error = parse(&updates.to_string()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "reply rejected: field `step_updates[0].status` has the invalid status \"finished\"; \
         expected one of running, done, error"
    );
    let pending = updates.to_string().replace("finished", "pending");
    assert!(matches!(
        parse(&pending),
        Err(ReplyError::InvalidStatus { .. })
    ));
    let plan = object(
        "RE_PLAN",
        json!({"plan": [{"step_id": "1", "description": "a"},
        {"step_id": "1", "description": "b"}]}),
    );
    assert!(matches!(parse(&plan),
        Err(ReplyError::DuplicateStepId { path, .. }) if path == "action.output.plan[1].step_id"));
    let plan = object(
        "RE_PLAN",
        json!({"plan": [{"step_id": "1", "description": "a", "status": "x"}]}),
    );
    assert!(matches!(
        parse(&plan),
        Err(ReplyError::InvalidStatus { .. })
    ));
}

#[test]
fn action_serde_layout_is_tagged_by_action_type() {
    let action = Action::Reflect {
        summary: "s".into(),
    };
    let value = serde_json::to_value(&action).unwrap();
    assert_eq!(
        value,
        json!({"action_type": "REFLECT", "output": {"summary": "s"}})
    );
    assert_eq!(serde_json::from_value::<Action>(value).unwrap(), action);
}

#[test]
fn garbage_never_panics() {
    let mut inputs: Vec<String> = [
        "{", "}", "{}", "[]", "null", "{\"observe\":", "{\"action\":[]}", "{\"action\":{}}",
        "{\"observe\":\"o\",\"thought\":\"t\",\"action\":{\"action_type\":null}}",
        "{\"observe\":\"o\",\"thought\":\"t\",\"action\":{\"action_type\":\"ANSWER\",\"output\":[]}}",
        "{\"observe\":\"o\",\"thought\":\"t\",\"action\":{\"action_type\":\"RE_PLAN\",\"output\":{\"plan\":[1]}}}",
        "\u{feff}{\"a\":\"\\u00\"}", "{\"a\":\"\\", "```json\n```", "\0\0{\0}", "{{{{{{{{{{",
        "{\"step_updates\":{}}", "💥{\"observe\":\"💥\"}💥",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    inputs.push("{".repeat(10_000));
    inputs.push("[".repeat(10_000));
    inputs.push(format!("{{\"observe\":\"{}", "\\\"".repeat(1000)));
    for input in &inputs {
        let _ = parse_reply(&reply(input));
        let _ = parse_reply(&with_calls(input));
    }
}
