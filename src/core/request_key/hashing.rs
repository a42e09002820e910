//! The canonical text of a request written straight into SHA-256 ([`Hashing`]), through
//! buffers reused for one key ([`Scratch`]), and the hash state after a task's fixed head
//! kept between its requests ([`KeyHead`]).
//!
//! The head is what every request of a task begins with: `{"messages":[`, the user's input
//! (message 0, kept verbatim), then the system prompt's template up to its first
//! placeholder (the shipped template has 15,023 of its 15,241 bytes there). A request whose
//! input is the same text and whose prompt comes from the same template parts (the same
//! `Arc`) starts from the state saved after those bytes; the bytes are still produced (the
//! input escaped, the template's part borrowed), only not hashed again.

use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::core::text::{TemplateParts, Text, escape};
use crate::core::types::{ChatMessage, Role};

/// A SHA-256 being fed, which may skip the bytes of a head already hashed and may save its
/// state once a given number of bytes went in.
pub(super) struct Hashing {
    sha: Sha256,
    /// Bytes written so far, skipped ones included.
    offset: usize,
    /// Bytes still to skip (their hash is the state this started from).
    skip: usize,
    /// Where to save the state (the end of the head), and the state saved there.
    save_at: Option<usize>,
    saved: Option<Sha256>,
}

impl Hashing {
    fn new(sha: Sha256, skip: usize, save_at: Option<usize>) -> Self {
        Self {
            sha,
            offset: 0,
            skip,
            save_at,
            saved: None,
        }
    }

    pub(super) fn put(&mut self, bytes: &[u8]) {
        self.offset += bytes.len();
        let skipped = self.skip.min(bytes.len());
        self.skip -= skipped;
        self.sha.update(&bytes[skipped..]);
        if self.save_at == Some(self.offset) {
            self.saved = Some(self.sha.clone());
        }
    }

    pub(super) fn finish(self) -> sha2::digest::Output<Sha256> {
        self.sha.finalize()
    }
}

impl std::io::Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.put(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Buffers reused while one key is written.
#[derive(Default)]
pub(super) struct Scratch {
    value: Vec<u8>,
    quoted: Vec<u8>,
}

impl Scratch {
    /// Writes `value` as JSON.
    pub(super) fn json(&mut self, value: &impl serde::Serialize, out: &mut Hashing) {
        // Writing into a hasher cannot fail, nor can serializing a `Value` or a `&str`.
        let _ = serde_json::to_writer(&mut *out, value);
    }

    /// Writes `text` as the contents of a JSON string (escaped, without the quotes).
    /// Escaping goes character by character, so pieces escaped one by one make the
    /// escaped whole.
    pub(super) fn escaped(&mut self, text: &str, out: &mut Hashing) {
        self.quoted.clear();
        let _ = serde_json::to_writer(&mut self.quoted, text);
        if let Some(inner) = self.quoted.get(1..self.quoted.len().saturating_sub(1)) {
            out.put(inner);
        }
    }

    /// Writes `value`'s JSON text as the contents of a JSON string.
    pub(super) fn escaped_json(&mut self, value: &Value, out: &mut Hashing) {
        self.value.clear();
        let _ = serde_json::to_writer(&mut self.value, value);
        let text = std::mem::take(&mut self.value);
        // serde_json writes valid UTF-8.
        self.escaped(std::str::from_utf8(&text).unwrap_or_default(), out);
        self.value = text;
    }
}

/// The hash state after a task's head, for its next request (see the module doc).
#[derive(Default)]
pub struct KeyHead {
    /// The input and template it was made for.
    input: String,
    parts: Option<Arc<TemplateParts>>,
    /// The head's length in bytes and the state after it.
    len: usize,
    state: Option<Sha256>,
}

impl std::fmt::Debug for KeyHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyHead")
            .field("len", &self.len)
            .field("kept", &self.state.is_some())
            .finish()
    }
}

/// The input and the template parts of a request that has a head: a user message in plain
/// text, then the system prompt rendered from a template.
fn head_of(messages: &[ChatMessage]) -> Option<(&str, &Arc<TemplateParts>)> {
    let [first, second, ..] = messages else {
        return None;
    };
    match (first.role, &first.content, second.role, &second.content) {
        (Role::User, Text::Plain(input), Role::System, Text::Prompt { parts, .. }) => {
            Some((input, parts))
        }
        _ => None,
    }
}

impl KeyHead {
    /// The hasher for `messages`: resumed after the head when this head is theirs, or new
    /// (saving its state at the end of their head, if they have one).
    pub(super) fn start(&self, messages: &[ChatMessage]) -> Hashing {
        let Some((input, parts)) = head_of(messages) else {
            return Hashing::new(Sha256::new(), 0, None);
        };
        let same =
            self.input == input && self.parts.as_ref().is_some_and(|p| Arc::ptr_eq(p, parts));
        match (&self.state, same) {
            (Some(state), true) => Hashing::new(state.clone(), self.len, None),
            _ => {
                // `{"messages":[{"content":"` input `","role":"user"},{"content":"` template
                let len = 25 + escape(input).len() + 29 + parts.escaped_head().len();
                Hashing::new(Sha256::new(), 0, Some(len))
            }
        }
    }

    /// Keeps the state `out` saved at the end of `messages`' head, if it saved one.
    pub(super) fn keep(&mut self, out: &mut Hashing, messages: &[ChatMessage]) {
        let (Some(state), Some((input, parts))) = (out.saved.take(), head_of(messages)) else {
            return;
        };
        self.input.clear();
        self.input.push_str(input);
        self.parts = Some(Arc::clone(parts));
        self.len = out.save_at.unwrap_or_default();
        self.state = Some(state);
    }
}
