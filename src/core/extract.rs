//! Locating the JSON object in a model's reply content. Models wrap it in ``` fences or
//! surround it with prose despite the prompt, so the content is scanned for balanced
//! top-level `{...}` spans (respecting JSON strings and escapes) and each is tried in turn.
//! Never panics, and the whole scan is linear: candidates never overlap.

use serde_json::{Map, Value};

/// Why no usable object was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExtractError {
    /// The content has no `{` at all.
    NoObject,
    /// Candidates were found but none is valid JSON; the message describes the longest one
    /// (the one most likely meant as the reply), with serde's line and column.
    Invalid(String),
}

/// Keys that mark an object as the reply rather than some object quoted in prose.
const REPLY_KEYS: [&str; 3] = ["action", "observe", "thought"];

/// Finds the reply object in `content`: the first valid object carrying a reply key; else,
/// if a candidate failed to parse, that failure; else the first valid object at all.
pub(crate) fn find_json_object(content: &str) -> Result<Map<String, Value>, ExtractError> {
    let bytes = content.as_bytes();
    let mut first_valid: Option<Map<String, Value>> = None;
    let mut longest_failure: Option<(usize, String)> = None;
    let mut from = 0;
    while let Some(offset) = content.get(from..).and_then(|rest| rest.find('{')) {
        let start = from + offset;
        let end = balanced_end(bytes, start).unwrap_or(bytes.len());
        let candidate = content.get(start..end).unwrap_or_default();
        match serde_json::from_str::<Value>(candidate) {
            Ok(Value::Object(map)) if looks_like_reply(&map) => {
                return Ok(map);
            }
            Ok(Value::Object(map)) => {
                first_valid.get_or_insert(map);
            }
            Ok(_) => {}
            Err(error) => {
                if longest_failure
                    .as_ref()
                    .is_none_or(|(len, _)| candidate.len() > *len)
                {
                    longest_failure = Some((candidate.len(), describe(&error)));
                }
            }
        }
        from = end.max(start + 1);
    }
    match (longest_failure, first_valid) {
        (Some((_, message)), _) => Err(ExtractError::Invalid(message)),
        (None, Some(map)) => Ok(map),
        (None, None) => Err(ExtractError::NoObject),
    }
}

/// Whether `map` carries any of the reply's keys (`action`, `observe`, `thought`).
pub(crate) fn looks_like_reply(map: &Map<String, Value>) -> bool {
    REPLY_KEYS.iter().any(|key| map.contains_key(*key))
}

/// The index just past the `}` closing the `{` at `start`, or `None` if the text ends first.
/// Braces inside JSON strings (including escaped quotes) do not count.
fn balanced_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// serde's message (which carries line and column), plus a hint for truncated output.
fn describe(error: &serde_json::Error) -> String {
    if error.is_eof() {
        format!("{error} (the JSON object is incomplete: every {{ and [ must be closed)")
    } else {
        error.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(content: &str) -> Result<Value, ExtractError> {
        find_json_object(content).map(Value::Object)
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
        assert_eq!(find("just words"), Err(ExtractError::NoObject));
        assert_eq!(find(""), Err(ExtractError::NoObject));
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
            let _ = find_json_object(input);
        }
    }
}
