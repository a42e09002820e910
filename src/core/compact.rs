//! Context compaction (seed 003's COMPACTING), the pure parts: the folded summary of an
//! earlier recursion ([`FoldedRecursion`]), the detail levels a state snapshot can be
//! rendered at ([`Detail`]) and the trimming each level applies. The machine decides when
//! to fold and which level to use (`machine/fit.rs`).
//!
//! Folding is permanent: a folded recursion's assistant message leaves the history and a
//! one-line summary joins `context.compacted_history`. Detail levels are not: every request
//! starts again at [`Detail::FULL`], so nothing is lost from the machine's state (the plan,
//! memory and last recursion stay whole and are only rendered shorter).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::core::bounded::excerpt;
use crate::core::limits::{trim_json, trim_text};
use crate::core::record::HistoryHead;
use crate::core::state::ConversationTurn;
use crate::core::state::{LastRecursion, MemoryEntry, PlanStep, RecursionStatus};

/// The longest summary kept for a folded recursion, in characters.
pub const FOLDED_SUMMARY_CHARS: usize = 160;

/// An earlier recursion whose assistant message was folded away.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldedRecursion {
    pub iteration: u32,
    /// `None` when the recursion had no usable reply.
    pub action_type: Option<String>,
    pub status: RecursionStatus,
    /// Its abstract, else its error_log, cut at [`FOLDED_SUMMARY_CHARS`].
    pub summary: String,
}

impl FoldedRecursion {
    /// Folds one history message (written by the machine, so it parses; anything else is
    /// kept as an excerpt rather than dropped).
    pub(crate) fn from_history(message: &str) -> Self {
        let Some(head) = HistoryHead::parse(message) else {
            return Self {
                iteration: 0,
                action_type: None,
                status: RecursionStatus::Done,
                summary: excerpt(message, FOLDED_SUMMARY_CHARS),
            };
        };
        let summary = [head.abstract_, head.error_log]
            .into_iter()
            .flatten()
            .find(|text| !text.trim().is_empty())
            .unwrap_or_default();
        Self {
            iteration: head.iteration,
            action_type: head.action_type,
            status: head.status.unwrap_or(RecursionStatus::Done),
            summary: excerpt(&summary, FOLDED_SUMMARY_CHARS),
        }
    }

    /// `#3 CALL_TOOL done: fetched the page`, with the summary cut at `max_chars`.
    pub(crate) fn line(&self, max_chars: usize) -> String {
        let action = self.action_type.as_deref().unwrap_or("NO_ACTION");
        let status = self.status.as_str();
        let summary = excerpt(&self.summary, max_chars);
        format!("#{} {action} {status}: {summary}", self.iteration)
    }
}

/// How much of the state a snapshot shows. `usize::MAX` means "no limit".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Detail {
    /// Level number, 0 = full.
    pub level: u8,
    /// Cut for plan step results and error_logs, memory entries and constraints.
    pub text_chars: usize,
    /// Cut for plan step descriptions.
    pub description_chars: usize,
    /// Recursions shown per plan step (the latest).
    pub step_recursions: usize,
    /// Short-term memory entries shown (the latest).
    pub memory_entries: usize,
    /// Compacted history lines shown (the latest).
    pub compacted_lines: usize,
    /// Cut for the summaries of compacted history lines.
    pub compacted_chars: usize,
    /// Conversation turns shown (the latest).
    pub conversation_turns: usize,
    /// Cut for each conversation turn's input and answer.
    pub conversation_chars: usize,
    /// Cut for `last_recursion`'s texts, action output, and each tool result.
    pub last_chars: usize,
    /// Tool results shown in `last_recursion` (the first).
    pub tool_results: usize,
    /// Cut for `context.objective` (message `[0]` keeps the input whole).
    pub objective_chars: usize,
}

const NO_LIMIT: usize = usize::MAX;

impl Detail {
    /// Everything as stored; conversation turns are always kept short.
    pub const FULL: Detail = Detail {
        level: 0,
        text_chars: NO_LIMIT,
        description_chars: NO_LIMIT,
        step_recursions: NO_LIMIT,
        memory_entries: NO_LIMIT,
        compacted_lines: NO_LIMIT,
        compacted_chars: FOLDED_SUMMARY_CHARS,
        conversation_turns: 5,
        conversation_chars: 600,
        last_chars: NO_LIMIT,
        tool_results: NO_LIMIT,
        objective_chars: NO_LIMIT,
    };

    /// The reduced levels tried in order once folding alone is not enough; the last one is
    /// the floor.
    pub const REDUCED: [Detail; 3] = [
        Detail {
            level: 1,
            text_chars: 400,
            description_chars: 400,
            step_recursions: 5,
            memory_entries: 20,
            compacted_lines: 20,
            compacted_chars: 120,
            conversation_turns: 3,
            conversation_chars: 300,
            last_chars: 4_000,
            tool_results: 20,
            objective_chars: 4_000,
        },
        Detail {
            level: 2,
            text_chars: 160,
            description_chars: 200,
            step_recursions: 3,
            memory_entries: 10,
            compacted_lines: 10,
            compacted_chars: 80,
            conversation_turns: 2,
            conversation_chars: 160,
            last_chars: 1_000,
            tool_results: 10,
            objective_chars: 1_000,
        },
        Detail {
            level: 3,
            text_chars: 80,
            description_chars: 120,
            step_recursions: 1,
            memory_entries: 5,
            compacted_lines: 5,
            compacted_chars: 60,
            conversation_turns: 1,
            conversation_chars: 80,
            last_chars: 300,
            tool_results: 5,
            objective_chars: 300,
        },
    ];

    fn is_full(&self) -> bool {
        self.level == 0
    }
}

/// The latest `keep` items of `items` (all when `keep` is no limit).
fn latest<T>(items: &[T], keep: usize) -> &[T] {
    &items[items.len().saturating_sub(keep)..]
}

/// `text` cut at `max` with a marker, borrowed when it fits.
fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match crate::core::limits::exceeds(text, max) {
        true => Cow::Owned(trim_text(text, max)),
        false => Cow::Borrowed(text),
    }
}

/// The plan at `detail`: every step, descriptions cut, the latest recursions per step.
pub(crate) fn plan<'a>(steps: &'a [PlanStep], detail: &Detail) -> Cow<'a, [PlanStep]> {
    if detail.is_full() {
        return Cow::Borrowed(steps);
    }
    let text = detail.text_chars;
    let trimmed = steps.iter().map(|step| {
        let mut recursions = latest(&step.recursions, detail.step_recursions).to_vec();
        for recursion in &mut recursions {
            recursion.result = cut(&recursion.result, text).into_owned();
            recursion.error_log = recursion.error_log.as_deref().map(|e| trim_text(e, text));
        }
        PlanStep {
            step_id: step.step_id.clone(),
            description: cut(&step.description, detail.description_chars).into_owned(),
            status: step.status,
            recursions,
        }
    });
    Cow::Owned(trimmed.collect())
}

/// Short-term memory at `detail`: the latest entries, each cut.
pub(crate) fn memory<'a>(entries: &'a [MemoryEntry], detail: &Detail) -> Cow<'a, [MemoryEntry]> {
    if detail.is_full() {
        return Cow::Borrowed(entries);
    }
    let kept = latest(entries, detail.memory_entries)
        .iter()
        .map(|entry| MemoryEntry {
            memory: cut(&entry.memory, detail.text_chars).into_owned(),
            ..entry.clone()
        });
    Cow::Owned(kept.collect())
}

/// The constraints at `detail`: each cut.
pub(crate) fn constraints<'a>(items: &'a [String], detail: &Detail) -> Cow<'a, [String]> {
    match detail.is_full() {
        true => Cow::Borrowed(items),
        false => Cow::Owned(
            items
                .iter()
                .map(|c| cut(c, detail.description_chars).into_owned())
                .collect(),
        ),
    }
}

/// `context.compacted_history` at `detail`: the latest lines, after a line counting the
/// folded recursions left out.
pub(crate) fn compacted_lines(folded: &[FoldedRecursion], detail: &Detail) -> Vec<String> {
    let shown = latest(folded, detail.compacted_lines);
    let hidden = folded.len() - shown.len();
    let mut lines = Vec::with_capacity(shown.len() + 1);
    if hidden > 0 {
        lines.push(format!("({hidden} earlier folded recursions not shown)"));
    }
    lines.extend(shown.iter().map(|f| f.line(detail.compacted_chars)));
    lines
}

/// `context.conversation` at `detail`: the latest turns, input and answer cut.
pub(crate) fn conversation(turns: &[ConversationTurn], detail: &Detail) -> Vec<ConversationTurn> {
    let max = detail.conversation_chars;
    latest(turns, detail.conversation_turns)
        .iter()
        .map(|turn| ConversationTurn {
            task_id: turn.task_id,
            input: cut(&turn.input, max).into_owned(),
            answer: turn.answer.as_deref().map(|a| cut(a, max).into_owned()),
            status: turn.status.clone(),
        })
        .collect()
}

/// `last_recursion` at `detail`: texts, action output and tool results cut, and only the
/// first tool results (the count of the others in `tool_call_results_omitted`).
pub(crate) fn last_recursion<'a>(
    last: &'a LastRecursion,
    detail: &Detail,
) -> Cow<'a, LastRecursion> {
    if detail.is_full() {
        return Cow::Borrowed(last);
    }
    let max = detail.last_chars;
    let mut view = last.clone();
    view.observe = cut(&last.observe, max).into_owned();
    view.thought = cut(&last.thought, max).into_owned();
    view.error_log = last.error_log.as_deref().map(|e| cut(e, max).into_owned());
    if let Some(action) = &mut view.action {
        action.output = trim_json(&action.output, max);
    }
    if let Some(results) = &mut view.tool_call_results {
        if results.len() > detail.tool_results {
            view.tool_call_results_omitted = Some(results.len() - detail.tool_results);
            results.truncate(detail.tool_results);
        }
        for result in results.iter_mut() {
            result.arguments = trim_json(&result.arguments, max);
            result.result = result.result.as_ref().map(|r| trim_json(r, max));
            result.error = result.error.as_deref().map(|e| cut(e, max).into_owned());
        }
    }
    Cow::Owned(view)
}

/// `context.objective` at `detail`.
pub(crate) fn objective<'a>(text: &'a str, detail: &Detail) -> Cow<'a, str> {
    cut(text, detail.objective_chars)
}

#[cfg(test)]
mod tests;
