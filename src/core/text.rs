//! The text of a chat message. Most messages are one string; the system prompt is the
//! template's fixed parts, shared by every request of every task, with the state snapshot
//! between them. Keeping it in parts means a thousand requests in flight hold one copy of
//! the template (about 15 KB) instead of a thousand, and the template's JSON-escaped form is
//! made once, so a request body is assembled from shared pieces instead of escaping the
//! whole prompt again for every call.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The fixed parts of a prompt template, as text and JSON-escaped (without quotes).
#[derive(Debug, PartialEq, Eq)]
pub struct TemplateParts {
    /// The text between placeholders; one more part than placeholders.
    raw: Vec<Arc<str>>,
    /// Each part as the contents of a JSON string.
    escaped: Vec<Arc<str>>,
    /// Bytes of the parts together.
    fixed_len: usize,
    /// [`CharCounts`] of the parts together, counted once.
    fixed_counts: CharCounts,
}

/// ASCII bytes and other characters of a text (what the token estimate is made of).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CharCounts {
    pub ascii: usize,
    pub other: usize,
}

impl CharCounts {
    /// Counts `text`.
    pub fn of(text: &str) -> Self {
        let mut counts = Self::default();
        for byte in text.bytes() {
            if byte.is_ascii() {
                counts.ascii += 1;
            } else if byte >= 0xC0 {
                // A UTF-8 leading byte: one non-ASCII character.
                counts.other += 1;
            }
        }
        counts
    }

    fn add(self, other: Self, times: usize) -> Self {
        Self {
            ascii: self.ascii + other.ascii * times,
            other: self.other + other.other * times,
        }
    }
}

impl TemplateParts {
    /// Splits `text` around `placeholder`.
    pub fn split(text: &str, placeholder: &str) -> Self {
        let raw: Vec<Arc<str>> = text.split(placeholder).map(Arc::from).collect();
        let escaped = raw.iter().map(|part| Arc::from(escape(part))).collect();
        let fixed_len = raw.iter().map(|part| part.len()).sum();
        let fixed_counts = raw.iter().fold(CharCounts::default(), |all, part| {
            all.add(CharCounts::of(part), 1)
        });
        Self {
            raw,
            escaped,
            fixed_len,
            fixed_counts,
        }
    }

    /// These parts with `section` inserted verbatim into the first part at byte `at` (a
    /// char boundary): nothing in `section` is taken for a placeholder.
    pub fn inserted(&self, at: usize, section: &str) -> Self {
        let mut raw: Vec<String> = self.raw.iter().map(|part| part.to_string()).collect();
        if let Some(first) = raw.first_mut() {
            first.insert_str(at.min(first.len()), section);
        }
        let raw: Vec<Arc<str>> = raw.into_iter().map(Arc::from).collect();
        let escaped = raw.iter().map(|part| Arc::from(escape(part))).collect();
        let fixed_len = raw.iter().map(|part| part.len()).sum();
        let fixed_counts = raw.iter().fold(CharCounts::default(), |all, part| {
            all.add(CharCounts::of(part), 1)
        });
        Self {
            raw,
            escaped,
            fixed_len,
            fixed_counts,
        }
    }

    /// The text before the first placeholder.
    pub fn head(&self) -> &str {
        self.raw.first().map_or("", |part| part)
    }

    /// The text before the first placeholder, JSON-escaped (without quotes).
    pub fn escaped_head(&self) -> &str {
        self.escaped.first().map_or("", |part| part)
    }

    /// How many placeholders the template has.
    pub fn holes(&self) -> usize {
        self.raw.len().saturating_sub(1)
    }
}

/// `text` as the contents of a JSON string (escaped, without the quotes).
pub fn escape(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_default()
        .to_owned()
}

/// Lowercase hex of `bytes` (digests, signatures).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

/// A piece of a message's text, as the request body needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Shared, already JSON-escaped text (a template part).
    Escaped(&'a Arc<str>),
    /// Text to escape.
    Raw(&'a str),
}

/// The text of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    Plain(String),
    /// The template's parts with `fill` (the state snapshot) in every placeholder.
    Prompt {
        parts: Arc<TemplateParts>,
        fill: String,
    },
}

impl Text {
    /// The template `parts` filled with `fill`.
    pub fn prompt(parts: Arc<TemplateParts>, fill: String) -> Self {
        Self::Prompt { parts, fill }
    }

    /// The text in order, without copying.
    pub fn chunks(&self) -> impl Iterator<Item = &str> {
        let (parts, fill, plain): (&[Arc<str>], &str, Option<&str>) = match self {
            Self::Plain(text) => (&[], "", Some(text)),
            Self::Prompt { parts, fill } => (&parts.raw, fill, None),
        };
        let templated = parts.iter().enumerate().flat_map(move |(i, part)| {
            let filler = (i > 0).then_some(fill);
            filler.into_iter().chain(std::iter::once(&**part))
        });
        plain.into_iter().chain(templated)
    }

    /// The pieces for a JSON body: template parts already escaped, the rest raw.
    pub fn pieces(&self) -> Vec<Piece<'_>> {
        match self {
            Self::Plain(text) => vec![Piece::Raw(text)],
            Self::Prompt { parts, fill } => {
                let mut pieces = Vec::with_capacity(parts.escaped.len() * 2);
                for (i, part) in parts.escaped.iter().enumerate() {
                    if i > 0 {
                        pieces.push(Piece::Raw(fill));
                    }
                    pieces.push(Piece::Escaped(part));
                }
                pieces
            }
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Plain(text) => text.len(),
            Self::Prompt { parts, fill } => parts.fixed_len + parts.holes() * fill.len(),
        }
    }

    /// Its [`CharCounts`] (the template's are counted once, not per request).
    pub fn counts(&self) -> CharCounts {
        match self {
            Self::Plain(text) => CharCounts::of(text),
            Self::Prompt { parts, fill } => {
                parts.fixed_counts.add(CharCounts::of(fill), parts.holes())
            }
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole text (copied only when it is in parts).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Self::Plain(text) => Cow::Borrowed(text),
            Self::Prompt { .. } => Cow::Owned(self.to_string()),
        }
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.chunks().try_for_each(|chunk| f.write_str(chunk))
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        let mut rest = *other;
        for chunk in self.chunks() {
            match rest.strip_prefix(chunk) {
                Some(tail) => rest = tail,
                None => return false,
            }
        }
        rest.is_empty()
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        Self::Plain(text)
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Self::Plain(text.to_owned())
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::Plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(template: &str, fill: &str) -> Text {
        Text::prompt(
            Arc::new(TemplateParts::split(template, "{{x}}")),
            fill.to_owned(),
        )
    }

    #[test]
    fn a_prompt_reads_as_its_template_filled() {
        let text = prompt("a \"{{x}}\" b {{x}}", "S");
        assert_eq!(text.to_string(), "a \"S\" b S");
        assert_eq!(text.len(), text.to_string().len());
        assert_eq!(text, "a \"S\" b S");
        assert_ne!(text, "a \"S\" b");
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""a \"S\" b S""#);
    }

    #[test]
    fn pieces_escape_the_template_once_and_leave_the_fill_raw() {
        let text = prompt("q\"{{x}}\n", "{\"k\":1}");
        let pieces = text.pieces();
        assert_eq!(pieces.len(), 3);
        assert!(matches!(pieces[0], Piece::Escaped(p) if &**p == "q\\\""));
        assert_eq!(pieces[1], Piece::Raw("{\"k\":1}"));
        assert!(matches!(pieces[2], Piece::Escaped(p) if &**p == "\\n"));
        assert_eq!(Text::from("x").pieces(), vec![Piece::Raw("x")]);
    }
}
