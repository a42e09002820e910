//! The streamed tokens of one recursion kept as `llm.delta` events, within bounds. Every
//! `llm.delta` is a committed row and a published message, so an endless token stream
//! would otherwise fill the `events` table (the probe saw 32,661 events, 163 MiB, for one
//! task in a minute). A recursion keeps at most `llm.max_delta_bytes` of content in at most
//! `llm.max_delta_events` events, over all its attempts; the last event kept says
//! `truncated: true`, and later tokens are dropped (the reply itself is still assembled
//! whole by the client, within `llm.max_response_bytes`, and stored with the recursion).

use crate::contract::events::LlmDelta;

/// Streamed tokens are published as soon as this many bytes are waiting (else by time).
pub(super) const DELTA_FLUSH_BYTES: usize = 1024;

/// The `llm.delta` budget of one recursion and the tokens waiting to be published.
#[derive(Debug)]
pub(super) struct DeltaBudget {
    pending: String,
    kept_bytes: usize,
    kept_events: usize,
    max_bytes: usize,
    max_events: usize,
    /// A bound was reached: nothing more is kept for this recursion.
    cut: bool,
}

impl DeltaBudget {
    /// A fresh budget for one recursion.
    pub(super) fn new(max_bytes: usize, max_events: usize) -> Self {
        Self {
            pending: String::new(),
            kept_bytes: 0,
            kept_events: 0,
            max_bytes,
            max_events,
            cut: max_bytes == 0 || max_events == 0,
        }
    }

    /// Buffers streamed `text`; dropped once the budget is spent.
    pub(super) fn push(&mut self, text: &str) {
        if !self.cut {
            self.pending.push_str(text);
        }
    }

    /// Whether enough is waiting to publish at once.
    pub(super) fn is_full(&self) -> bool {
        self.pending.len() >= DELTA_FLUSH_BYTES
    }

    /// The next event to publish, if anything waits: all of it, or what is left of the
    /// budget, marked `truncated` when this event spends the budget.
    pub(super) fn take(&mut self, attempt: u32) -> Option<LlmDelta> {
        if self.pending.is_empty() || self.cut {
            self.pending.clear();
            return None;
        }
        let mut content = std::mem::take(&mut self.pending);
        let room = self.max_bytes - self.kept_bytes;
        let last_event = self.kept_events + 1 >= self.max_events;
        if content.len() >= room || last_event {
            content.truncate(floor_char_boundary(&content, room));
            self.cut = true;
        }
        self.kept_bytes += content.len();
        self.kept_events += 1;
        Some(LlmDelta {
            content,
            attempt,
            truncated: self.cut.then_some(true),
        })
    }
}

/// The largest index <= `at` that is a char boundary of `text`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    (0..=at)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(budget: &mut DeltaBudget, pushes: &[&str]) -> Vec<LlmDelta> {
        let mut events = Vec::new();
        for text in pushes {
            budget.push(text);
            events.extend(budget.take(1));
        }
        events
    }

    #[test]
    fn within_the_budget_everything_is_kept() {
        let mut budget = DeltaBudget::new(100, 10);
        let events = drain(&mut budget, &["ab", "cd"]);
        let kept: Vec<_> = events
            .iter()
            .map(|e| (e.content.as_str(), e.truncated))
            .collect();
        assert_eq!(kept, [("ab", None), ("cd", None)]);
    }

    #[test]
    fn the_byte_bound_cuts_on_a_char_boundary_and_marks_the_last_event() {
        let mut budget = DeltaBudget::new(5, 100);
        let events = drain(&mut budget, &["abc", "déf", "ghi"]);
        let kept: Vec<_> = events
            .iter()
            .map(|e| (e.content.as_str(), e.truncated))
            .collect();
        assert_eq!(kept, [("abc", None), ("d", Some(true))]);
        budget.push("more");
        assert!(budget.take(1).is_none(), "nothing after the cut");
        assert!(!budget.is_full());
    }

    #[test]
    fn the_event_bound_marks_the_last_event() {
        let mut budget = DeltaBudget::new(1000, 3);
        let events = drain(&mut budget, &["a", "b", "c", "d", "e"]);
        let marks: Vec<_> = events.iter().map(|e| e.truncated).collect();
        assert_eq!(marks, [None, None, Some(true)]);
    }
}
