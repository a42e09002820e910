//! What the record of a model call (CONTRACT v3 §12) keeps, decided without I/O: the
//! `llm.record` mode, the `llm.record_redact` patterns, and the stored form of a request
//! body's parts (each made storable and redacted, addressed by the SHA-256 of what is
//! stored) and of a response.
//!
//! A part holding a message's text is redacted on its text, not on its JSON escaping: the
//! text is unescaped, every match of a pattern becomes `[redacted]`, NUL becomes U+FFFD
//! (`core::storable`), and the result is escaped again, so a pattern sees what the model
//! saw and a stored part is always valid JSON text. Glue parts (the model, the roles, the
//! tools) are only made storable. The request's hashes are never computed here: they are
//! of the bytes as sent.

use std::borrow::Cow;
use std::ops::Range;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::core::storable;
use crate::core::text::escape;

/// What replaces a match of a `llm.record_redact` pattern.
pub const REDACTED: &str = "[redacted]";

/// `llm.record`: how much of every model call is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordMode {
    /// The hashes, the request and the response (`llm_call_bodies`).
    #[default]
    Full,
    /// `request_sha256` and `request_key` only.
    Hash,
    /// Nothing.
    Off,
}

impl RecordMode {
    /// Whether the hashes are kept.
    pub fn hashes(self) -> bool {
        self != Self::Off
    }

    /// Whether the request and the response are kept.
    pub fn bodies(self) -> bool {
        self == Self::Full
    }
}

/// The compiled `llm.record_redact` patterns.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    patterns: Vec<Regex>,
}

/// A pattern that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("llm.record_redact[{index}] is not a valid regular expression ({pattern:?}): {error}")]
pub struct BadPattern {
    pub index: usize,
    pub pattern: String,
    pub error: regex::Error,
}

impl Redactor {
    /// Compiles `patterns`; the first that does not compile is the error.
    pub fn new(patterns: &[String]) -> Result<Self, BadPattern> {
        let patterns = patterns
            .iter()
            .enumerate()
            .map(|(index, pattern)| {
                Regex::new(pattern).map_err(|error| BadPattern {
                    index,
                    pattern: pattern.clone(),
                    error,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// Whether there is no pattern.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// `text` with every match of every pattern replaced (borrowed when none matched).
    pub fn text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut text = Cow::Borrowed(text);
        for pattern in &self.patterns {
            if let Cow::Owned(replaced) = pattern.replace_all(&text, REDACTED) {
                text = Cow::Owned(replaced);
            }
        }
        text
    }

    /// Redacts every string of `value` (object keys are kept), in place.
    pub fn json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(text) => {
                if let Cow::Owned(redacted) = self.text(text) {
                    *text = redacted;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.json(item)),
            Value::Object(map) => map.values_mut().for_each(|item| self.json(item)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// One stored part of a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPart {
    /// The first 16 bytes of the SHA-256 of `content`.
    pub id: Uuid,
    /// The part's JSON text, storable and redacted.
    pub content: String,
}

/// The address of a part: the first 16 bytes of the SHA-256 of its stored text.
pub fn part_id(content: &str) -> Uuid {
    let digest = Sha256::digest(content.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(id)
}

/// The stored form of one part as sent: `bytes`, with a message's JSON-escaped text at
/// `text` (see the module doc).
pub fn stored_part(bytes: &[u8], text: Option<Range<usize>>, redactor: &Redactor) -> StoredPart {
    let sent = String::from_utf8_lossy(bytes);
    let content = match text {
        Some(range) if !redactor.is_empty() && range.end <= bytes.len() => {
            redact_escaped(&sent, range, redactor)
        }
        _ => sent,
    };
    let content = match storable::json_text(&content) {
        Cow::Borrowed(_) => content.into_owned(),
        Cow::Owned(storable) => storable,
    };
    StoredPart {
        id: part_id(&content),
        content,
    }
}

/// `sent` with the escaped text at `range` unescaped, redacted and escaped again.
fn redact_escaped<'s>(
    sent: &'s Cow<'s, str>,
    range: Range<usize>,
    redactor: &Redactor,
) -> Cow<'s, str> {
    let Some(escaped) = sent.get(range.clone()) else {
        return Cow::Borrowed(sent.as_ref());
    };
    let Ok(text) = serde_json::from_str::<String>(&format!("\"{escaped}\"")) else {
        return Cow::Borrowed(sent.as_ref());
    };
    match redactor.text(&text) {
        Cow::Borrowed(_) => Cow::Borrowed(sent.as_ref()),
        Cow::Owned(redacted) => {
            let mut out = String::with_capacity(sent.len());
            out.push_str(&sent[..range.start]);
            out.push_str(&escape(&redacted));
            out.push_str(&sent[range.end..]);
            Cow::Owned(out)
        }
    }
}

/// The stored form of a response: storable, redacted.
pub fn stored_response(mut response: Value, redactor: &Redactor) -> Value {
    storable::json(&mut response);
    redactor.json(&mut response);
    response
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn redactor(patterns: &[&str]) -> Redactor {
        let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
        Redactor::new(&patterns).unwrap()
    }

    #[test]
    fn modes_parse_and_say_what_they_keep() {
        let full: RecordMode = serde_json::from_value(json!("full")).unwrap();
        assert!(full.hashes() && full.bodies());
        let hash: RecordMode = serde_json::from_value(json!("hash")).unwrap();
        assert!(hash.hashes() && !hash.bodies());
        let off: RecordMode = serde_json::from_value(json!("off")).unwrap();
        assert!(!off.hashes() && !off.bodies());
        assert!(serde_json::from_value::<RecordMode>(json!("all")).is_err());
        assert_eq!(RecordMode::default(), RecordMode::Full);
    }

    #[test]
    fn a_bad_pattern_names_itself() {
        let error = Redactor::new(&["ok".into(), "(".into()]).unwrap_err();
        assert_eq!(error.index, 1);
        assert!(
            error.to_string().contains("llm.record_redact[1]"),
            "{error}"
        );
    }

    #[test]
    fn a_part_without_redaction_is_the_bytes_sent() {
        let sent = br#",{"role":"user","content":"a \"b\" c"}"#;
        let part = stored_part(sent, Some(27..38), &Redactor::default());
        assert_eq!(part.content.as_bytes(), sent);
        assert_eq!(part.id, part_id(&part.content));
    }

    #[test]
    fn redaction_works_on_the_text_and_keeps_the_json_valid() {
        // The text is `key "sk-1"\nnext`: the pattern ends at the quote, which is `\"` in
        // the escaped form; replacing on the escaped form would cut the escape in half.
        let text = "key \"sk-1\"\nnext";
        let escaped = escape(text);
        let sent = format!(r#"{{"role":"user","content":"{escaped}"}}"#);
        let start = sent.find(&escaped).unwrap();
        let part = stored_part(
            sent.as_bytes(),
            Some(start..start + escaped.len()),
            &redactor(&["\"sk-[0-9]+\"", "(?m)^next$"]),
        );
        let value: Value = serde_json::from_str(&part.content).unwrap();
        assert_eq!(value["content"], "key [redacted]\n[redacted]");
        assert_eq!(value["role"], "user");
    }

    #[test]
    fn glue_is_not_redacted_and_nul_escapes_become_storable() {
        let glue = br#"{"model":"sk-1","messages":["#;
        let part = stored_part(glue, None, &redactor(&["sk-1"]));
        assert_eq!(part.content.as_bytes(), glue);
        let nul = br#""a\u0000b""#;
        let part = stored_part(nul, Some(1..9), &Redactor::default());
        assert_eq!(part.content, r#""a\ufffdb""#);
        let part = stored_part(nul, Some(1..9), &redactor(&["zzz"]));
        assert_eq!(part.content, r#""a\ufffdb""#);
    }

    #[test]
    fn responses_are_storable_and_redacted() {
        let response = json!({"choices": [{"message": {"content": "token sk-9\u{0}"}}],
                              "usage": {"prompt_tokens": 1}});
        let stored = stored_response(response, &redactor(&["sk-[0-9]"]));
        assert_eq!(
            stored["choices"][0]["message"]["content"],
            "token [redacted]\u{FFFD}"
        );
        assert_eq!(stored["usage"]["prompt_tokens"], 1);
    }
}
