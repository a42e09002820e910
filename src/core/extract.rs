//! Locating the reply object in a model's reply content. Models wrap it in ``` fences,
//! surround it with prose, put a `<think>` reasoning block before it (see `reasoning.rs`)
//! or write several objects despite the prompt, so:
//!
//! 1. the reasoning is cut off: the reply is what follows the last closing tag, unless that
//!    tag lies inside the reply object itself (a model mentioning `</think>` in its
//!    `thought`), in which case the cut moves back to one of the few previous tags;
//! 2. the rest is scanned for balanced top-level `{...}` spans (respecting JSON strings and
//!    escapes) and each is parsed;
//! 3. objects carrying a reply key are the reply objects: one (or several identical ones)
//!    is the reply; among several different ones, a single ANSWER wins (the model drafted,
//!    then concluded), anything else is rejected rather than acting on an arbitrary one.
//!
//! Never panics, and the work is linear: candidates never overlap and at most
//! `1 + EARLIER_CUTS` passes run over the content.

use serde_json::{Map, Value};

use crate::core::bounded::excerpt;
use crate::core::reasoning::ReasoningTags;

/// Why no usable object was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExtractError {
    /// The text after any reasoning has no `{` at all; `excerpt` is how that text begins.
    NoObject { excerpt: String },
    /// Candidates were found but none is valid JSON; the message describes the longest one
    /// (the one most likely meant as the reply), with serde's line and column.
    Invalid(String),
    /// Several different reply objects and not exactly one distinct ANSWER among them;
    /// `action_types` names the first few (see [`NAMED_REPLIES`]).
    SeveralReplies {
        count: usize,
        action_types: Vec<String>,
    },
    /// A reasoning block was opened and never closed: the content is all reasoning.
    UnclosedReasoning,
    /// Nothing but whitespace followed the reasoning.
    NothingAfterReasoning,
}

/// Keys that mark an object as the reply rather than some object quoted in prose.
const REPLY_KEYS: [&str; 3] = ["action", "observe", "thought"];

/// Previous closing tags tried when the text after the last one holds no reply object.
/// Bounds the passes over the content: a reply quoting the tag more than this is rare.
const EARLIER_CUTS: usize = 3;

/// How many action types a [`ExtractError::SeveralReplies`] names.
pub(crate) const NAMED_REPLIES: usize = 8;

/// Finds the reply object in `content` (see the module doc): the reply object; else, if a
/// candidate failed to parse, that failure; else the first valid object at all (tool
/// arguments echoed as content).
pub(crate) fn find_reply_object(content: &str) -> Result<Map<String, Value>, ExtractError> {
    let tags = ReasoningTags::find(content);
    if tags.unclosed() {
        return Err(ExtractError::UnclosedReasoning);
    }
    let Some(last) = tags.closings.last() else {
        return Scan::run(content, 0, 0).choose(content);
    };
    let after = content.get(last.end..).unwrap_or_default();
    let latest = Scan::run(content, last.end, last.end);
    if latest.replies.count > 0 {
        return latest.choose(after);
    }
    if let Some(scan) = reply_spanning_a_tag(content, &tags) {
        return scan.choose(content);
    }
    match after.trim().is_empty() {
        true => Err(ExtractError::NothingAfterReasoning),
        false => latest.choose(after),
    }
}

/// When the text after the last closing tag holds no reply object, that tag may lie inside
/// a string of the reply itself. Tries the cut before each of the few previous tags (the
/// content's start when no opening tag made it reasoning) and keeps a pass whose reply
/// object spans the tag after its cut; objects ending before that tag are reasoning and
/// ignored.
fn reply_spanning_a_tag(content: &str, tags: &ReasoningTags) -> Option<Scan> {
    let closings = &tags.closings;
    // With an opening tag, everything before the first closing tag is reasoning.
    let first_spanned = usize::from(tags.opened);
    (first_spanned..closings.len())
        .rev()
        .take(EARLIER_CUTS)
        .find_map(|spanned| {
            let tag = closings.get(spanned)?;
            let cut = match spanned.checked_sub(1) {
                Some(previous) => closings.get(previous)?.end,
                None => 0,
            };
            let scan = Scan::run(content, cut, tag.start + 1);
            scan.replies
                .first_start
                .is_some_and(|start| start < tag.start)
                .then_some(scan)
        })
}

/// Whether `map` carries any of the reply's keys (`action`, `observe`, `thought`).
pub(crate) fn looks_like_reply(map: &Map<String, Value>) -> bool {
    REPLY_KEYS.iter().any(|key| map.contains_key(*key))
}

/// What one pass over the content found.
#[derive(Debug, Default)]
struct Scan {
    replies: Replies,
    /// The first valid object without a reply key.
    first_other: Option<Map<String, Value>>,
    /// The longest candidate that is not valid JSON: its length and serde's description.
    longest_failure: Option<(usize, String)>,
}

impl Scan {
    /// Scans `content` from byte `from`, skipping candidates that end at or before
    /// `ignore_before` (the reasoning before a closing tag).
    fn run(content: &str, from: usize, ignore_before: usize) -> Self {
        let bytes = content.as_bytes();
        let mut scan = Self::default();
        let mut from = from;
        while let Some(offset) = content.get(from..).and_then(|rest| rest.find('{')) {
            let start = from + offset;
            let end = balanced_end(bytes, start).unwrap_or(bytes.len());
            if end > ignore_before {
                scan.take(start, content.get(start..end).unwrap_or_default());
            }
            from = end.max(start + 1);
        }
        scan
    }

    /// Parses one candidate, starting at byte `start`, and files it.
    fn take(&mut self, start: usize, candidate: &str) {
        match serde_json::from_str::<Value>(candidate) {
            Ok(Value::Object(map)) if looks_like_reply(&map) => self.replies.add(start, map),
            Ok(Value::Object(map)) => {
                self.first_other.get_or_insert(map);
            }
            Ok(_) => {}
            Err(error) => {
                if self
                    .longest_failure
                    .as_ref()
                    .is_none_or(|(len, _)| candidate.len() > *len)
                {
                    self.longest_failure = Some((candidate.len(), describe(&error)));
                }
            }
        }
    }

    /// The outcome of the pass; `text` is the scanned text, quoted when it has no `{`.
    fn choose(self, text: &str) -> Result<Map<String, Value>, ExtractError> {
        if let Some(chosen) = self.replies.choose() {
            return chosen;
        }
        match (self.longest_failure, self.first_other) {
            (Some((_, message)), _) => Err(ExtractError::Invalid(message)),
            (None, Some(map)) => Ok(map),
            (None, None) => Err(ExtractError::NoObject {
                excerpt: excerpt(text.trim(), 120),
            }),
        }
    }
}

/// The reply objects of one pass. Only the first reply and the first ANSWER are kept;
/// later ones are compared with them, so memory stays bounded by those two.
#[derive(Debug, Default)]
struct Replies {
    count: usize,
    /// Where the first reply object starts (byte offset in the content).
    first_start: Option<usize>,
    /// The action types of the first [`NAMED_REPLIES`] reply objects.
    action_types: Vec<String>,
    first: Option<Map<String, Value>>,
    /// Whether some reply object differs from the first.
    differ: bool,
    first_answer: Option<Map<String, Value>>,
    /// Whether some ANSWER object differs from the first ANSWER.
    answers_differ: bool,
}

impl Replies {
    fn add(&mut self, start: usize, map: Map<String, Value>) {
        self.count += 1;
        self.first_start.get_or_insert(start);
        let action_type = action_type_of(&map);
        if action_type == "ANSWER" {
            match &self.first_answer {
                None => self.first_answer = Some(map.clone()),
                Some(answer) if !self.answers_differ => self.answers_differ = *answer != map,
                Some(_) => {}
            }
        }
        if self.action_types.len() < NAMED_REPLIES {
            self.action_types.push(action_type);
        }
        match &self.first {
            None => self.first = Some(map),
            Some(first) if !self.differ => self.differ = *first != map,
            Some(_) => {}
        }
    }

    /// `None` without reply objects; else the reply, or why several are rejected.
    fn choose(self) -> Option<Result<Map<String, Value>, ExtractError>> {
        let first = self.first?;
        if !self.differ {
            return Some(Ok(first));
        }
        Some(match self.first_answer {
            Some(answer) if !self.answers_differ => Ok(answer),
            _ => Err(ExtractError::SeveralReplies {
                count: self.count,
                action_types: self.action_types,
            }),
        })
    }
}

/// How a reply object's action is named in errors: its canonical action_type (seed 000's
/// `action.result` nesting included), else what the model wrote, quoted.
fn action_type_of(reply: &Map<String, Value>) -> String {
    let action = present(reply.get("action"));
    let found = present(action.and_then(|a| a.get("action_type"))).or_else(|| {
        let result = present(action.and_then(|a| a.get("result")));
        present(result.and_then(|r| r.get("action_type")))
    });
    match found {
        Some(Value::String(text)) => canonical_action_type(text)
            .map_or_else(|| format!("{:?}", excerpt(text, 40)), str::to_owned),
        _ => "no action_type".to_owned(),
    }
}

/// `value` unless it is JSON null, which counts as absent (as in `fields.rs`).
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|value| !value.is_null())
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

/// The wire name of an action_type as models write it (any case, `-` or space for `_`,
/// `PLAN` and the unseparated spellings), or `None` when it is none of the four.
pub(crate) fn canonical_action_type(found: &str) -> Option<&'static str> {
    let normalized = found.trim().to_ascii_uppercase().replace(['-', ' '], "_");
    match normalized.as_str() {
        "CALL_TOOL" | "CALLTOOL" => Some("CALL_TOOL"),
        "RE_PLAN" | "REPLAN" | "PLAN" => Some("RE_PLAN"),
        "REFLECT" => Some("REFLECT"),
        "ANSWER" => Some("ANSWER"),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
