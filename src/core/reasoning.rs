//! The `<think>…</think>` reasoning blocks that reasoning models (DeepSeek-R1, Qwen3, …)
//! write before their reply. The reasoning may quote JSON, even drafts of the reply, so the
//! reply is only looked for after it. This module finds the tags; where the reply starts
//! when there are several closing tags is decided in `extract.rs`, which can see whether a
//! tag lies inside the reply object itself.
//!
//! Tags are `<think>` / `<thinking>` and their closing forms, in any case. A reasoning block
//! only opens at the start of the content (after whitespace); a closing tag anywhere ends
//! reasoning, because some providers strip the opening tag and leave only `</think>`.

use std::ops::Range;

/// The tag names that open and close a reasoning block, lowercase.
const TAG_NAMES: [&str; 2] = ["think", "thinking"];

/// The reasoning tags of one reply's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReasoningTags {
    /// Whether the content opens with `<think>` or `<thinking>`.
    pub opened: bool,
    /// Every closing tag (`</think>`, `</thinking>`), in order, as byte ranges.
    pub closings: Vec<Range<usize>>,
}

impl ReasoningTags {
    /// Finds the tags in `content`, in linear time.
    pub(crate) fn find(content: &str) -> Self {
        // ASCII lowercasing keeps every byte offset, so ranges found here index `content`.
        let lower = content.to_ascii_lowercase();
        let head = lower.trim_start();
        let opened = TAG_NAMES.iter().any(|name| {
            head.strip_prefix('<')
                .and_then(|h| h.strip_prefix(name))
                .is_some_and(|h| h.starts_with('>'))
        });
        let closings = lower
            .match_indices("</think")
            .filter_map(|(start, _)| closing_tag_at(&lower, start))
            .collect();
        Self { opened, closings }
    }

    /// Whether the content opened a reasoning block that no closing tag ends: all of it is
    /// reasoning, there is no reply in it.
    pub(crate) fn unclosed(&self) -> bool {
        self.opened && self.closings.is_empty()
    }
}

/// The range of the closing tag that starts at `start` (where `</think` was found), if it
/// is `</think>` or `</thinking>`.
fn closing_tag_at(lower: &str, start: usize) -> Option<Range<usize>> {
    let rest = lower.get(start + "</think".len()..)?;
    let tail = [">", "ing>"]
        .into_iter()
        .find(|tail| rest.starts_with(tail))?;
    Some(start..start + "</think".len() + tail.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(content: &str) -> Vec<usize> {
        ReasoningTags::find(content)
            .closings
            .iter()
            .map(|tag| tag.end)
            .collect()
    }

    #[test]
    fn leading_opening_tags_in_any_case_are_found() {
        for content in ["<think>x", "  \n<THINK>x", "<Thinking>x", "\t<thinking>"] {
            let tags = ReasoningTags::find(content);
            assert!(tags.opened, "{content:?}");
            assert!(tags.unclosed(), "{content:?}");
        }
        for content in ["x <think>", "<thinker>", "<think", "< think>", "{}"] {
            assert!(!ReasoningTags::find(content).opened, "{content:?}");
        }
    }

    #[test]
    fn closing_tags_are_found_with_their_ends() {
        assert_eq!(ends("<think>a</think>b"), vec![16]);
        assert_eq!(ends("a</THINKING>b</Think>"), vec![12, 21]);
        assert_eq!(ends("</thinker> </think </think"), Vec::<usize>::new());
        assert!(!ReasoningTags::find("<think>a</think>").unclosed());
    }

    #[test]
    fn multibyte_text_keeps_offsets_right() {
        let content = "<think>思考</think>{}";
        let end = ends(content)[0];
        assert_eq!(&content[end..], "{}");
    }
}
