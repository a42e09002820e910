//! Outside text quoted in a reason, an AMQP header or a log line, bounded. A reason is
//! copied into places with limits of their own: RabbitMQ closes the whole connection of a
//! client whose message header does not fit in one frame (128 KiB by default), so one bad
//! 200 KB `task_id` quoted whole in `x-agentd-reason` cut every task of its worker. Whatever
//! comes from outside is therefore quoted through [`quote`] (a few hundred characters, then
//! the size), and every reason is cut by [`reason`] before it goes into a header, a row or
//! a log line.

use std::borrow::Cow;

/// Characters of an outside value quoted in a reason before it is cut.
pub const QUOTE_CHARS: usize = 200;

/// Bytes of a whole reason kept before it is cut.
pub const REASON_BYTES: usize = 2048;

/// `value` quoted as Rust's `{:?}` does (control characters escaped), at most
/// [`QUOTE_CHARS`] characters of it, followed by `… (N bytes)` when it was longer.
pub fn quote(value: &str) -> String {
    match value.char_indices().nth(QUOTE_CHARS) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &value[..end], value.len()),
    }
}

/// `text` cut at a character boundary to at most about [`REASON_BYTES`] bytes, followed by
/// `… (N bytes)` when it was longer; borrowed when it fits.
pub fn reason(text: &str) -> Cow<'_, str> {
    if text.len() <= REASON_BYTES {
        return Cow::Borrowed(text);
    }
    let mut end = REASON_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &text[..end], text.len()))
}

/// [`reason`], owned.
pub fn reason_owned(text: String) -> String {
    match reason(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cut) => cut,
    }
}

/// The first `max_chars` characters of `text`, with `…` when cut.
pub fn excerpt(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(quote("abc"), "\"abc\"");
        assert_eq!(quote("a\0b"), "\"a\\0b\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn long_values_are_cut_and_their_size_said() {
        let value = "x".repeat(200_000);
        let quoted = quote(&value);
        assert!(quoted.len() < QUOTE_CHARS + 40, "{}", quoted.len());
        assert!(quoted.ends_with("… (200000 bytes)"), "{quoted}");
        // Multi-byte characters are cut at a character, never inside one.
        let wide = "数".repeat(QUOTE_CHARS + 1);
        let quoted = quote(&wide);
        assert!(quoted.starts_with(&format!("\"{}\"", "数".repeat(QUOTE_CHARS))));
        assert!(quoted.ends_with(&format!("({} bytes)", wide.len())));
    }

    #[test]
    fn a_reason_is_cut_at_a_character_boundary() {
        assert!(matches!(reason("fits"), Cow::Borrowed("fits")));
        let long = format!("a{}", "é".repeat(REASON_BYTES));
        let cut = reason(&long);
        assert!(cut.len() <= REASON_BYTES + 32, "{}", cut.len());
        assert!(cut.ends_with(&format!("… ({} bytes)", long.len())));
        assert_eq!(reason_owned("same".to_owned()), "same");
    }

    #[test]
    fn excerpt_cuts_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 2), "hé…");
        assert_eq!(excerpt("hi", 5), "hi");
    }
}
