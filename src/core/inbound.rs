//! What comes into the machine from outside, made fit to keep before anything reads it: a
//! model's reply and a tool's result hold only storable text (the rule of
//! [`crate::core::storable`]: NUL becomes U+FFFD, a `\u0000` escape in JSON text `\ufffd`),
//! and every tool call of a task has an id of its own. Applied where the text enters, so
//! that the machine's state, what the model is shown in the next recursion and the stored
//! rows are the same text.
//!
//! **Tool-call ids.** A call keeps the provider's id when no earlier call of the task used
//! it. Otherwise, deterministically (a replay of the same replies, such as a fork, gives the
//! same ids):
//! - an empty or blank id, or one longer than [`MAX_TOOL_CALL_ID_CHARS`], becomes
//!   `call_<iteration>_<position>`;
//! - an id an earlier call of the task used (in the same reply or an earlier one) becomes
//!   `<id>_<iteration>_<position>`;
//! - if that is taken as well, `_2`, `_3`, ... is appended until it is not.
//!
//! `position` is the call's 1-based place in its reply. Why: a call's id keys its ledger row
//! (`tool_calls`, unique per recursion), its approval (unique per task) and its idempotency
//! key (`<task_id>:<tool_call_id>`), so two calls sharing one would overwrite, block or
//! silently deduplicate each other.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::core::record::RecursionRecord;
use crate::core::storable;
use crate::core::types::{LlmReply, ToolCallRequest, ToolCallResult};

/// The reply of recursion `iteration` with storable text and task-unique tool-call ids;
/// `used` holds the ids the task's calls took so far and gains this reply's. Borrowed (no
/// copy) when nothing changed.
pub fn reply<'a>(
    reply: &'a LlmReply,
    iteration: u32,
    used: &mut BTreeSet<String>,
) -> Cow<'a, LlmReply> {
    let content = storable::json_text(&reply.content);
    let mut changed = matches!(content, Cow::Owned(_));
    let mut calls = Vec::with_capacity(reply.tool_calls.len());
    for (index, call) in reply.tool_calls.iter().enumerate() {
        let name = storable::text(&call.name);
        let arguments = storable::json_text(&call.arguments);
        let id = unique_id(&call.id, iteration, index + 1, used);
        changed |=
            matches!(name, Cow::Owned(_)) || matches!(arguments, Cow::Owned(_)) || id != call.id;
        calls.push(ToolCallRequest {
            id,
            name: name.into_owned(),
            arguments: arguments.into_owned(),
        });
    }
    if !changed {
        return Cow::Borrowed(reply);
    }
    Cow::Owned(LlmReply {
        content: content.into_owned(),
        tool_calls: calls,
        usage: reply.usage,
    })
}

/// The longest tool-call id kept as the provider sent it. Providers send ids of 20 to 40
/// characters; a longer one is not an id but whatever a model or proxy put there, and it
/// would be copied into every ledger row, idempotency key and prompt that names the call.
pub const MAX_TOOL_CALL_ID_CHARS: usize = 128;

/// The id the call at `position` (1-based) of recursion `iteration` gets (see the module
/// doc), recorded in `used`.
fn unique_id(id: &str, iteration: u32, position: usize, used: &mut BTreeSet<String>) -> String {
    let id = storable::text(id);
    let base = if id.trim().is_empty() || id.chars().count() > MAX_TOOL_CALL_ID_CHARS {
        format!("call_{iteration}_{position}")
    } else if used.contains(id.as_ref()) {
        format!("{id}_{iteration}_{position}")
    } else {
        id.into_owned()
    };
    let mut candidate = base.clone();
    let mut suffix = 2u32;
    while used.contains(&candidate) {
        candidate = format!("{base}_{suffix}");
        suffix += 1;
    }
    used.insert(candidate.clone());
    candidate
}

/// A tool's result with storable text: its id, name, arguments, result, error and memo.
pub fn tool_result(mut result: ToolCallResult) -> ToolCallResult {
    result.tool_call_id = storable::owned(result.tool_call_id);
    result.name = storable::owned(result.name);
    storable::json(&mut result.arguments);
    if let Some(value) = &mut result.result {
        storable::json(value);
    }
    result.error = result.error.map(storable::owned);
    result.memo = result.memo.map(storable::owned);
    result
}

/// Whether every text of `result` is storable as it is.
pub fn is_storable_result(result: &ToolCallResult) -> bool {
    storable::is_storable(&result.tool_call_id)
        && storable::is_storable(&result.name)
        && storable::is_storable_json(&result.arguments)
        && result
            .result
            .as_ref()
            .is_none_or(storable::is_storable_json)
        && result.error.as_deref().is_none_or(storable::is_storable)
        && result.memo.as_deref().is_none_or(storable::is_storable)
}

/// Makes every text of a finished recursion storable, in place (the last defence of a step
/// write: what entered through [`reply`] and [`tool_result`] is storable already). Returns
/// whether anything had to change.
pub fn make_record_storable(record: &mut RecursionRecord) -> bool {
    let before = is_storable_record(record);
    if before {
        return false;
    }
    for text in [
        &mut record.observe,
        &mut record.thought,
        &mut record.abstract_,
    ] {
        *text = storable::owned(std::mem::take(text));
    }
    for text in [
        &mut record.step_id,
        &mut record.action_type,
        &mut record.error_log,
    ] {
        *text = text.take().map(storable::owned);
    }
    storable::json(&mut record.output);
    let results = std::mem::take(&mut record.tool_call_results);
    record.tool_call_results = results.into_iter().map(tool_result).collect();
    true
}

/// Whether every text of a finished recursion is storable as it is.
pub fn is_storable_record(record: &RecursionRecord) -> bool {
    [&record.observe, &record.thought, &record.abstract_]
        .into_iter()
        .all(|text| storable::is_storable(text))
        && [&record.step_id, &record.action_type, &record.error_log]
            .into_iter()
            .all(|text| text.as_deref().is_none_or(storable::is_storable))
        && storable::is_storable_json(&record.output)
        && record.tool_call_results.iter().all(is_storable_result)
}

#[cfg(test)]
mod tests;
