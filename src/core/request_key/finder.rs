//! Whether a string holds one of a request's ids ([`IdFinder`]), answered in one pass over
//! the string with nothing to build but a 1,024-bit table: the first bytes of every id
//! (eight, or the shortest id's length) are hashed into the table, each window of that
//! width in the string is looked up, and only a window whose bit is set is compared with
//! the ids that begin with it.
//!
//! The finder is made for every request, whose ids differ from the last one's (a new trace
//! id at least), so building it must cost next to nothing. An Aho-Corasick automaton over a
//! dozen ids cost more to build than all the searches it served (4 % of a worker's CPU at
//! 50 tasks at once), and so did `aho-corasick`'s packed (Teddy) searcher:
//! `cargo bench --bench core -- record` put the key of recursion 1 (head kept) at 23.1 µs
//! with the packed searcher and 9.8 µs with this table (23.8 µs with the automaton).

/// Bits in the table of id heads.
const TABLE_BITS: u32 = 10;

/// Finds whether a string holds any of a fixed list of non-empty ids.
#[derive(Debug)]
pub(super) struct IdFinder {
    /// Bytes of an id's head (1 to 8): the shortest id's length, at most 8.
    width: usize,
    /// The shortest id's length: a shorter string holds none.
    shortest: usize,
    /// Which head hashes occur.
    table: [u64; 1 << (TABLE_BITS - 6)],
    /// Each id's head, with the id's index, sorted by head.
    heads: Vec<(u64, usize)>,
}

impl IdFinder {
    /// The finder over `ids`; `None` when there is none (no string holds an id). Empty ids
    /// are left out (an empty id is never registered).
    pub(super) fn new(ids: &[String]) -> Option<Self> {
        let shortest = ids.iter().map(String::len).filter(|len| *len > 0).min()?;
        let width = shortest.min(8);
        let mut finder = Self {
            width,
            shortest,
            table: [0; 1 << (TABLE_BITS - 6)],
            heads: Vec::with_capacity(ids.len()),
        };
        for (index, id) in ids.iter().enumerate().filter(|(_, id)| !id.is_empty()) {
            let head = finder.window(id.as_bytes(), 0);
            let slot = slot(head);
            finder.table[slot / 64] |= 1 << (slot % 64);
            finder.heads.push((head, index));
        }
        finder.heads.sort_unstable();
        Some(finder)
    }

    /// Whether `text` holds any of `ids` (the list this finder was made for).
    pub(super) fn holds(&self, ids: &[String], text: &str) -> bool {
        let bytes = text.as_bytes();
        if bytes.len() < self.shortest {
            return false;
        }
        (0..=bytes.len() - self.width).any(|at| {
            let head = self.window(bytes, at);
            let slot = slot(head);
            self.table[slot / 64] & (1 << (slot % 64)) != 0 && self.starts_one(ids, bytes, at, head)
        })
    }

    /// Whether one of the ids whose head is `head` begins at `at`.
    fn starts_one(&self, ids: &[String], bytes: &[u8], at: usize, head: u64) -> bool {
        let first = self.heads.partition_point(|(h, _)| *h < head);
        self.heads[first..]
            .iter()
            .take_while(|(h, _)| *h == head)
            .any(|(_, index)| {
                ids.get(*index)
                    .is_some_and(|id| bytes[at..].starts_with(id.as_bytes()))
            })
    }

    /// The `width` bytes of `bytes` from `at` as a number (the caller keeps `at + width`
    /// within `bytes`).
    fn window(&self, bytes: &[u8], at: usize) -> u64 {
        let mut word = [0u8; 8];
        match bytes.get(at..at + 8) {
            Some(eight) => word.copy_from_slice(eight),
            None => {
                let rest = &bytes[at..];
                word[..rest.len()].copy_from_slice(rest);
            }
        }
        let value = u64::from_le_bytes(word);
        match self.width {
            8 => value,
            width => value & ((1u64 << (8 * width)) - 1),
        }
    }
}

/// The table slot of a head.
fn slot(head: u64) -> usize {
    // Fibonacci hashing: the top bits of the product.
    usize::try_from(head.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn list(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn finds_an_id_anywhere_and_nothing_else() {
        let ids = list(&["aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "call_1", "call_12"]);
        let finder = IdFinder::new(&ids).unwrap();
        assert!(finder.holds(&ids, "call_1"));
        assert!(finder.holds(&ids, "x call_12"));
        assert!(finder.holds(&ids, "trace aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa went well"));
        assert!(!finder.holds(&ids, "call_"));
        assert!(!finder.holds(&ids, "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaa"));
        assert!(!finder.holds(&ids, ""));
        // Many ids sharing their first bytes.
        let many: Vec<String> = (0..200).map(|n| format!("id-{n:04}")).collect();
        let finder = IdFinder::new(&many).unwrap();
        assert!(finder.holds(&many, "see id-0199."));
        assert!(!finder.holds(&many, "see id-0200."));
        assert!(IdFinder::new(&[]).is_none());
        assert!(IdFinder::new(&list(&[""])).is_none());
    }

    proptest! {
        /// The finder answers what searching for every id answers, on any text (NUL and
        /// any Unicode included), ids of any length among them.
        #[test]
        fn holds_is_contains_any(
            ids in prop::collection::vec("(\\PC|\\x00){1,12}", 1..12),
            text in "(\\PC|\\x00){0,80}",
            quote in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
        ) {
            let finder = IdFinder::new(&ids).unwrap();
            let expected = ids.iter().any(|id| text.contains(id.as_str()));
            prop_assert_eq!(finder.holds(&ids, &text), expected);
            // The same text with one id put inside it.
            let id = quote.get(&ids);
            let cut = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect::<Vec<_>>();
            let cut = *at.get(&cut);
            let quoted = format!("{}{id}{}", &text[..cut], &text[cut..]);
            prop_assert!(finder.holds(&ids, &quoted));
        }
    }
}
