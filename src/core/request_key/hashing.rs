//! The canonical text of a request written straight into SHA-256 ([`Hashing`]), through
//! a buffer reused for one key ([`Scratch`]), and the hash state after a task's fixed head
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

    /// Writes `value` as JSON.
    pub(super) fn json(&mut self, value: &impl serde::Serialize) {
        // Writing into a hasher cannot fail, nor can serializing a `Value` or a `&str`.
        let _ = serde_json::to_writer(self, value);
    }

    /// Writes `text` as the contents of a JSON string (escaped, without the quotes).
    pub(super) fn escaped(&mut self, text: &str) {
        put_escaped(text.as_bytes(), self);
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

/// The buffer a JSON value is written into before it is escaped, reused for one key.
#[derive(Default)]
pub(super) struct Scratch {
    value: Vec<u8>,
}

impl Scratch {
    /// Writes `value`'s JSON text as the contents of a JSON string.
    pub(super) fn escaped_json(&mut self, value: &Value, out: &mut Hashing) {
        self.value.clear();
        let _ = serde_json::to_writer(&mut self.value, value);
        put_escaped(&self.value, out);
    }
}

/// Writes `text` escaped as `serde_json` escapes a string's contents (`"` and `\` with a
/// backslash, control characters as `\n` or `\u001f`, everything else as it is), the
/// runs between escapes straight into `out`. Escaping goes byte by byte, so pieces escaped
/// one by one make the escaped whole.
fn put_escaped(text: &[u8], out: &mut Hashing) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run = 0;
    for (at, byte) in text.iter().enumerate() {
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x0c => b'f',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x00..=0x1f => 0,
            _ => continue,
        };
        out.put(&text[run..at]);
        match short {
            0 => out.put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
            short => out.put(&[b'\\', short]),
        }
        run = at + 1;
    }
    out.put(&text[run..]);
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn hashed(write: impl FnOnce(&mut Hashing)) -> Vec<u8> {
        let mut out = Hashing::new(Sha256::new(), 0, None);
        write(&mut out);
        out.finish().to_vec()
    }

    proptest! {
        /// Escaping into the hasher writes what `serde_json` writes inside a string's
        /// quotes, for any text (every control character, NUL and quotes included).
        #[test]
        fn escaping_is_serde_json_s(text in "(\\PC|[\\x00-\\x1f\\x7f\"\\\\])*") {
            let expected = Sha256::digest(escape(&text).as_bytes()).to_vec();
            prop_assert_eq!(hashed(|out| out.escaped(&text)), expected);
            let value = Value::String(text.clone());
            let inner = escape(&value.to_string());
            let expected = Sha256::digest(inner.as_bytes()).to_vec();
            prop_assert_eq!(hashed(|out| Scratch::default().escaped_json(&value, out)), expected);
        }
    }
}
