//! What PostgreSQL can store. Whatever comes from outside (a model's reply, a tool's
//! arguments and result, an MCP server's output, a task's input, guidance, an edited
//! approval, a person's reason) may hold any Unicode scalar value, but PostgreSQL refuses
//! one of them: U+0000 (NUL) in `text`, and its escape `\u0000` in `jsonb`. Every other
//! scalar value (U+FFFF, unassigned code points, long combining runs) is stored as it is.
//!
//! The rule is one replacement, applied where outside text enters agentd, so that what the
//! machine holds, what the next recursion's model sees and what the tables keep are the same
//! text: **NUL becomes U+FFFD (REPLACEMENT CHARACTER)**, in strings and in JSON object keys.
//! A lone surrogate cannot reach this point: JSON text that escapes one (`"\ud800"`) is not
//! valid Unicode and is refused by the JSON parser, and Rust strings cannot hold one.

use std::borrow::Cow;

use serde_json::Value;

/// The character that takes the place of every NUL.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// True when PostgreSQL stores `text` as it is.
pub fn is_storable(text: &str) -> bool {
    !text.contains('\0')
}

/// `text` with every NUL replaced; borrowed (no copy) when there was none.
pub fn text(text: &str) -> Cow<'_, str> {
    if is_storable(text) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    }
}

/// `text` with every NUL replaced, reusing the allocation when there was none.
pub fn owned(text: String) -> String {
    if is_storable(&text) {
        text
    } else {
        text.replace('\0', "\u{FFFD}")
    }
}

/// Replaces every NUL in `value`'s strings and object keys, in place.
pub fn json(value: &mut Value) {
    match value {
        Value::String(text) => {
            if !is_storable(text) {
                *text = text.replace('\0', "\u{FFFD}");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(json),
        Value::Object(map) => {
            if map.keys().any(|key| !is_storable(key)) {
                let entries = std::mem::take(map);
                for (key, mut item) in entries {
                    json(&mut item);
                    // Two keys that differ only by NUL and U+FFFD collapse into one; the
                    // later wins, as in a JSON object with a repeated key.
                    map.insert(owned(key), item);
                }
            } else {
                map.values_mut().for_each(json);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `value` with every NUL in its strings and keys replaced.
pub fn json_owned(mut value: Value) -> Value {
    json(&mut value);
    value
}

/// True when PostgreSQL stores `value` as `jsonb` as it is.
pub fn is_storable_json(value: &Value) -> bool {
    match value {
        Value::String(text) => is_storable(text),
        Value::Array(items) => items.iter().all(is_storable_json),
        Value::Object(map) => map
            .iter()
            .all(|(key, item)| is_storable(key) && is_storable_json(item)),
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
    }
}

/// The JSON escape of NUL, which `jsonb` refuses.
const NUL_ESCAPE: &str = "\\u0000";

/// The escape that takes its place in JSON text.
const REPLACEMENT_ESCAPE: &str = "\\ufffd";

/// JSON text (or text that may hold JSON, such as a model's reply or a tool call's raw
/// arguments) with the same rule applied to what parsing it yields: every NUL character
/// becomes U+FFFD, and every `\u0000` escape becomes `\ufffd`, so the text and every value
/// parsed from it are storable. Nothing else changes (spacing, key order, other escapes);
/// borrowed (no copy) when there was nothing to replace. `\\u0000` (an escaped backslash
/// followed by `u0000`) is not an escape of NUL and is kept.
pub fn json_text(text: &str) -> Cow<'_, str> {
    if is_storable(text) && !text.contains(NUL_ESCAPE) {
        return Cow::Borrowed(text);
    }
    let text = self::text(text);
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut at) = (0, 0);
    while at < bytes.len() {
        if bytes[at] != b'\\' {
            at += 1;
        } else if text[at..].starts_with(NUL_ESCAPE) {
            out.push_str(&text[copied..at]);
            out.push_str(REPLACEMENT_ESCAPE);
            at += NUL_ESCAPE.len();
            copied = at;
        } else {
            // An escape of something else (`\\` included): skip the escaped character, so
            // that a backslash it ends with cannot start an escape.
            at += 2;
        }
    }
    if copied == 0 {
        return text;
    }
    out.push_str(&text[copied.min(text.len())..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nul_becomes_the_replacement_character_and_nothing_else_changes() {
        assert_eq!(text("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        let clean = "U+FFFF \u{FFFF}, e\u{301}\u{301}\u{301}, 数";
        assert!(matches!(text(clean), Cow::Borrowed(_)));
        assert_eq!(owned(clean.to_owned()), clean);
        assert!(is_storable(&owned("\0".repeat(3))));
    }

    #[test]
    fn json_strings_and_keys_are_replaced_at_any_depth() {
        let mut value = json!({"a\u{0}": ["x\u{0}", {"k": "\u{0}"}], "n": 1, "t": true});
        assert!(!is_storable_json(&value));
        json(&mut value);
        assert!(is_storable_json(&value));
        assert_eq!(
            value,
            json!({"a\u{FFFD}": ["x\u{FFFD}", {"k": "\u{FFFD}"}], "n": 1, "t": true})
        );
    }

    #[test]
    fn json_with_an_escaped_nul_parses_and_is_made_storable() {
        let value: Value = serde_json::from_str(r#"{"thought": "a\u0000b"}"#).unwrap();
        assert_eq!(json_owned(value), json!({"thought": "a\u{FFFD}b"}));
    }

    #[test]
    fn a_lone_surrogate_escape_is_not_valid_json() {
        assert!(serde_json::from_str::<Value>(r#""\ud800""#).is_err());
    }

    #[test]
    fn json_text_replaces_nul_escapes_and_characters_and_keeps_the_rest() {
        let text = r#"{"a\u0000": "x\u0000y", "k": "\\u0000", "b": "\\\u0000"}"#;
        let replaced = json_text(text);
        assert_eq!(
            replaced,
            r#"{"a\ufffd": "x\ufffdy", "k": "\\u0000", "b": "\\\ufffd"}"#
        );
        let value: Value = serde_json::from_str(&replaced).unwrap();
        assert!(is_storable_json(&value));
        assert_eq!(
            value["k"], "\\u0000",
            "an escaped backslash is not an escape of NUL"
        );
        assert_eq!(json_text("raw\0nul"), "raw\u{FFFD}nul");
        let clean = r#"{"a": "\u00e9\\", "b": "\ud83d\ude00"}"#;
        assert!(matches!(json_text(clean), Cow::Borrowed(_)));
        // Not JSON at all, or cut in the middle of an escape: never a panic.
        assert_eq!(json_text("\\é\\u0000\\"), "\\é\\ufffd\\");
        for odd in ["\\", "\\u000", "é\\", "\\\\\\"] {
            assert_eq!(json_text(odd), odd);
        }
    }
}
