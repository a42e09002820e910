//! Unit tests of the compaction helpers: folding a history message, the detail levels and
//! what each trims.

use super::*;
use crate::core::limits::Limits;
use crate::core::record::Closed;
use crate::core::state::{ActionView, StepRecursion, StepStatus, ToolResultView};
use crate::core::types::ToolCallResult;
use serde_json::{Value, json};
use uuid::Uuid;

fn tool_closed(result: Value) -> Closed {
    Closed {
        observe: "o".into(),
        thought: "t".into(),
        abstract_: "fetched the page".into(),
        action: Some(ActionView {
            action_type: "CALL_TOOL".into(),
            output: json!({}),
        }),
        output: json!({}),
        result: None,
        status: RecursionStatus::Done,
        error_log: None,
        tool_call_results: Some(vec![ToolCallResult {
            tool_call_id: "c1".into(),
            name: "fetch".into(),
            arguments: json!({"url": "u"}),
            success: true,
            result: Some(result),
            error: None,
            memo: None,
            duration_ms: 1,
        }]),
    }
}

#[test]
fn history_messages_fold_into_one_line() {
    let limits = Limits::default();
    let message = tool_closed(json!("x".repeat(20))).history_message(3, Uuid::nil(), &limits);
    let folded = FoldedRecursion::from_history(&message);
    assert_eq!(folded.iteration, 3);
    assert_eq!(folded.line(160), "#3 CALL_TOOL done: fetched the page");
    let failed = Closed::failed("reply rejected: no JSON".into(), json!({"raw": "?"}));
    let folded = FoldedRecursion::from_history(&failed.history_message(4, Uuid::nil(), &limits));
    assert_eq!(folded.line(10), "#4 NO_ACTION error: reply reje…");
    let odd = FoldedRecursion::from_history("not json at all");
    assert_eq!(odd.summary, "not json at all");
}

#[test]
fn compacted_lines_count_what_they_leave_out() {
    let folded: Vec<FoldedRecursion> = (1..=7)
        .map(|i| FoldedRecursion {
            iteration: i,
            action_type: Some("REFLECT".into()),
            status: RecursionStatus::Done,
            summary: format!("summary number {i}"),
        })
        .collect();
    assert_eq!(compacted_lines(&folded, &Detail::FULL).len(), 7);
    let floor = Detail::REDUCED[2];
    let lines = compacted_lines(&folded, &floor);
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0], "(2 earlier folded recursions not shown)");
    assert_eq!(lines[5], "#7 REFLECT done: summary number 7");
    assert!(compacted_lines(&[], &floor).is_empty());
}

#[test]
fn reduced_levels_trim_plan_memory_and_last_recursion() {
    let recursion = |i: u128| StepRecursion {
        trace_id: Uuid::from_u128(i),
        status: RecursionStatus::Error,
        result: "r".repeat(500),
        error_log: Some("e".repeat(500)),
    };
    let steps = vec![PlanStep {
        step_id: "1".into(),
        description: "d".repeat(1000),
        status: StepStatus::Running,
        recursions: (0..9).map(recursion).collect(),
    }];
    assert!(matches!(plan(&steps, &Detail::FULL), Cow::Borrowed(_)));
    let level2 = Detail::REDUCED[1];
    let trimmed = plan(&steps, &level2);
    assert_eq!(trimmed[0].recursions.len(), 3);
    assert_eq!(trimmed[0].recursions[2].trace_id, Uuid::from_u128(8));
    assert!(
        trimmed[0].recursions[0]
            .result
            .ends_with("160 of 500 chars shown]")
    );
    assert!(trimmed[0].description.starts_with(&"d".repeat(200)));

    let limits = Limits::default();
    let last = tool_closed(json!("y".repeat(9000))).last_recursion(2, Uuid::nil(), &limits);
    let full_result = last.tool_call_results.as_ref().map(|r| r[0].result.clone());
    let Some(Some(Value::String(text))) = full_result else {
        panic!("expected a trimmed string result")
    };
    assert!(
        text.ends_with("…[truncated: 8000 of 9000 chars shown]"),
        "{}",
        &text[7990..]
    );
    let view = last_recursion(&last, &Detail::REDUCED[2]);
    let results: &[ToolResultView] = view.tool_call_results.as_deref().unwrap_or_default();
    let shown = serde_json::to_string(&results[0].result).unwrap_or_default();
    assert!(shown.len() < 400, "{shown}");
}

#[test]
fn conversation_keeps_the_latest_turns_short() {
    let turns: Vec<ConversationTurn> = (0..8)
        .map(|i| ConversationTurn {
            task_id: Uuid::from_u128(i),
            input: format!("question {i} {}", "q".repeat(1000)),
            answer: (i % 2 == 0).then(|| "a".repeat(1000)),
            status: "completed".into(),
        })
        .collect();
    let shown = conversation(&turns, &Detail::FULL);
    assert_eq!(shown.len(), 5);
    assert_eq!(shown[0].task_id, Uuid::from_u128(3));
    assert!(shown[0].input.starts_with("question 3 "));
    assert!(shown[0].input.chars().count() < 700);
    assert_eq!(shown[0].answer, None);
    assert!(
        shown[1]
            .answer
            .as_deref()
            .unwrap_or_default()
            .contains("600 of 1000")
    );
    assert_eq!(conversation(&turns, &Detail::REDUCED[2]).len(), 1);
}

#[test]
fn levels_only_ever_shrink() {
    let mut previous = Detail::FULL;
    for level in Detail::REDUCED {
        assert_eq!(level.level, previous.level + 1);
        for (now, before) in [
            (level.text_chars, previous.text_chars),
            (level.description_chars, previous.description_chars),
            (level.step_recursions, previous.step_recursions),
            (level.memory_entries, previous.memory_entries),
            (level.compacted_lines, previous.compacted_lines),
            (level.compacted_chars, previous.compacted_chars),
            (level.conversation_turns, previous.conversation_turns),
            (level.conversation_chars, previous.conversation_chars),
            (level.last_chars, previous.last_chars),
            (level.tool_results, previous.tool_results),
            (level.objective_chars, previous.objective_chars),
        ] {
            assert!(now <= before, "level {}", level.level);
        }
        previous = level;
    }
}
