//! The size limits of one task's LLM requests ([`Limits`]), the token estimate the machine
//! budgets with, and the trimming helpers that cut oversized text with a visible marker and
//! keep values nested too deep as their text ([`MAX_JSON_DEPTH`]).
//!
//! # Token estimate
//!
//! No tokenizer runs in the core, so tokens are estimated from the text: every ASCII byte
//! counts a quarter token (rounded up per text) and every non-ASCII character counts one
//! whole token. English prose and JSON average about four characters per token in the
//! common BPE vocabularies, while CJK text and symbols cost one token or more per
//! character, so a plain `chars / 4` would underestimate Chinese input by a factor of four.
//! A request adds [`MESSAGE_OVERHEAD_TOKENS`] per message (role and separators) and
//! [`REQUEST_OVERHEAD_TOKENS`] for the reply priming. Tool schemas sent beside the messages
//! are not counted: keep some headroom between the budget and the model's context window.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::text::CharCounts;
use crate::core::types::ChatMessage;

/// The deepest nesting of arrays and objects the machine keeps in a value from outside (a
/// tool result, the reply object): serde_json refuses to read more than 128 levels, and the
/// snapshot and the checkpoint wrap these values a few levels deep, so a deeper value would
/// make the checkpoint unreadable on resume. Deeper values are kept as their JSON text.
pub const MAX_JSON_DEPTH: usize = 64;

/// Tokens added per message for its role and separators.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 4;

/// Tokens added once per request (the assistant reply priming).
pub const REQUEST_OVERHEAD_TOKENS: u32 = 3;

/// Size limits of the requests a task sends, checkpointed with the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// The estimated size one LLM request may reach (all messages); above it the machine
    /// compacts the context. Default 24000.
    pub context_budget_tokens: u32,
    /// Earlier recursions kept verbatim as assistant messages when the context is
    /// compacted; older ones are folded into `context.compacted_history`. Default 4.
    pub keep_recent_recursions: u32,
    /// A tool result (or error) longer than this, as JSON text, is cut with a marker
    /// wherever it is fed back to the model. Default 8000.
    pub max_tool_result_chars: usize,
    /// A model reply field, raw reply or action result longer than this is cut with a
    /// marker wherever it is fed back or kept as raw output. Default 16000.
    pub max_reply_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            context_budget_tokens: 24_000,
            keep_recent_recursions: 4,
            max_tool_result_chars: 8_000,
            max_reply_chars: 16_000,
        }
    }
}

/// The estimated token count of `text` (see the module doc).
pub fn estimate_tokens(text: &str) -> u32 {
    tokens_of(CharCounts::of(text))
}

fn tokens_of(counts: CharCounts) -> u32 {
    u32::try_from(counts.ascii.div_ceil(4) + counts.other).unwrap_or(u32::MAX)
}

/// The estimated token count of a request made of `messages`.
pub fn estimate_request_tokens(messages: &[ChatMessage]) -> u32 {
    messages
        .iter()
        .map(|m| tokens_of(m.content.counts()).saturating_add(MESSAGE_OVERHEAD_TOKENS))
        .fold(REQUEST_OVERHEAD_TOKENS, u32::saturating_add)
}

/// The marker appended to cut text: `…[truncated: N of M chars shown]`.
pub fn truncation_marker(shown: usize, total: usize) -> String {
    format!("…[truncated: {shown} of {total} chars shown]")
}

/// `text` itself when it has at most `max_chars` characters, else its first `max_chars`
/// characters followed by the [`truncation_marker`].
pub fn trim_text(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let total = max_chars + text[cut..].chars().count();
            format!("{}{}", &text[..cut], truncation_marker(max_chars, total))
        }
    }
}

/// Whether `text` is longer than `max_chars` characters.
pub(crate) fn exceeds(text: &str, max_chars: usize) -> bool {
    text.len() > max_chars && text.chars().nth(max_chars).is_some()
}

/// `value` itself when its JSON text has at most `max_chars` characters and it nests at
/// most [`MAX_JSON_DEPTH`] levels; otherwise a JSON string holding the first `max_chars`
/// characters of that text (and the marker when cut).
pub fn trim_json(value: &Value, max_chars: usize) -> Value {
    match value {
        Value::String(text) if !exceeds(text, max_chars) => value.clone(),
        Value::String(text) => Value::String(trim_text(text, max_chars)),
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
        _ => {
            let text = value.to_string();
            match exceeds(&text, max_chars) || deeper_than(value, MAX_JSON_DEPTH) {
                true => Value::String(trim_text(&text, max_chars)),
                false => value.clone(),
            }
        }
    }
}

/// `value` itself when it nests at most [`MAX_JSON_DEPTH`] levels, else its JSON text.
pub(crate) fn bound_depth(value: Value) -> Value {
    match deeper_than(&value, MAX_JSON_DEPTH) {
        true => Value::String(value.to_string()),
        false => value,
    }
}

/// Whether `value` nests arrays and objects more than `max_depth` levels deep. Iterative,
/// so it holds whatever the depth; linear in the size of the value.
pub(crate) fn deeper_than(value: &Value, max_depth: usize) -> bool {
    let mut pending = vec![(value, 1usize)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth > max_depth {
            return true;
        }
        let nested = children.filter(|child| child.is_array() || child.is_object());
        pending.extend(nested.map(|child| (child, depth + 1)));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::Role;
    use serde_json::json;

    #[test]
    fn defaults_and_partial_deserialization() {
        let limits = Limits::default();
        assert_eq!(limits.context_budget_tokens, 24_000);
        assert_eq!(limits.keep_recent_recursions, 4);
        assert_eq!(limits.max_tool_result_chars, 8_000);
        assert_eq!(limits.max_reply_chars, 16_000);
        let partial: Limits =
            serde_json::from_value(json!({"context_budget_tokens": 9})).unwrap_or_default();
        assert_eq!(partial.context_budget_tokens, 9);
        assert_eq!(partial.max_reply_chars, 16_000);
    }

    #[test]
    fn ascii_counts_a_quarter_and_other_characters_one() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("你好"), 2);
        assert_eq!(estimate_tokens("héllo"), 1 + 1);
        let messages = [
            ChatMessage::new(Role::User, "abcd"),
            ChatMessage::new(Role::System, ""),
        ];
        assert_eq!(estimate_request_tokens(&messages), 3 + (1 + 4) + 4);
    }

    #[test]
    fn text_is_cut_on_char_boundaries_with_a_marker() {
        assert_eq!(trim_text("short", 5), "short");
        assert_eq!(
            trim_text("héllo wörld", 4),
            "héll…[truncated: 4 of 11 chars shown]"
        );
        assert!(!exceeds("héllo", 5));
        assert!(exceeds("héllo", 4));
    }

    #[test]
    fn json_values_are_cut_as_text() {
        let small = json!({"a": 1});
        assert_eq!(trim_json(&small, 7), small);
        let big = json!({"items": "x".repeat(50)});
        let cut = trim_json(&big, 20);
        let Value::String(text) = &cut else {
            panic!("expected a string, got {cut}")
        };
        assert!(text.starts_with(r#"{"items":"xxxxxxxxx"#), "{text}");
        assert!(
            text.ends_with("…[truncated: 20 of 62 chars shown]"),
            "{text}"
        );
        assert_eq!(trim_json(&json!(12345), 2), json!(12345));
        assert_eq!(
            trim_json(&json!("abcdef"), 3),
            json!("abc…[truncated: 3 of 6 chars shown]")
        );
    }

    fn nested(depth: usize) -> Value {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn values_nested_too_deep_are_kept_as_text() {
        assert!(!deeper_than(&json!(1), 0));
        assert!(deeper_than(&json!([]), 0));
        assert!(!deeper_than(&json!({"a": [1, {"b": 2}]}), 3));
        assert!(deeper_than(&json!({"a": [1, {"b": {}}]}), 3));
        let shallow = nested(MAX_JSON_DEPTH);
        assert_eq!(trim_json(&shallow, usize::MAX), shallow);
        assert_eq!(bound_depth(shallow.clone()), shallow);
        let deep = nested(MAX_JSON_DEPTH + 1);
        let text = deep.to_string();
        assert_eq!(trim_json(&deep, usize::MAX), Value::String(text.clone()));
        assert_eq!(bound_depth(deep), Value::String(text));
    }
}
