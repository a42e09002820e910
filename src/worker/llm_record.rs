//! The record of one model call attempt (CONTRACT v3 §12), made as the attempt ends and
//! written with its `llm_calls` row: `request_sha256` over the exact bytes the client sent,
//! `request_key` over the canonical form (`core::request_key`), and with `llm.record =
//! full` the body's parts (each stored once per task: the parts this run already wrote are
//! not sent to PostgreSQL again) and the response, made storable and redacted
//! (`core::call_record`). A part with the same bytes at the same place as in the previous
//! attempt (the template, the earlier history) keeps its id without being made storable,
//! redacted and hashed again: comparing bytes is cheaper than SHA-256 over them. For the
//! same reason `request_sha256` resumes from the hash state after the parts a body shares,
//! from its start, with the previous one (the input and the template up to the snapshot).

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::core::call_record::{RecordMode, Redactor, stored_part, stored_response};
use crate::core::request_key::KeyHead;
use crate::core::text::hex;
use crate::ports::BodyPart;
use crate::store::llm_record::CallRecord;

/// A task run's side of the record.
#[derive(Debug, Default)]
pub struct Recording {
    /// Parts this run has handed to a step already: a later step need not write them.
    stored: HashSet<Uuid>,
    /// The record of the attempt that just ended, for its `llm_calls` row.
    pending: Option<Box<CallRecord>>,
    /// The previous attempt's parts as sent, in order.
    previous: Vec<SentPart>,
    /// The request key's hash state after the head every request of the task shares.
    key_head: KeyHead,
}

impl Recording {
    /// The record of the attempt that just ended, if any.
    pub(super) fn take(&mut self) -> Option<Box<CallRecord>> {
        self.pending.take()
    }
}

/// A part of the previous attempt's body.
#[derive(Debug)]
struct SentPart {
    bytes: Bytes,
    /// The SHA-256 state after the body up to and with this part.
    state: Sha256,
    /// Its stored part's id (`llm.record = full`).
    id: Option<Uuid>,
}

/// How an attempt is recorded: `llm.record` and the compiled `llm.record_redact`.
pub(super) type Mode<'a> = (RecordMode, &'a Redactor);

impl Recording {
    /// Keeps the record of the attempt that `sent` the body and got `response`. `key` makes
    /// the canonical request key (CONTRACT §12) of the request, when one is recorded, from
    /// the hash state of the task's head.
    pub(super) fn keep(
        &mut self,
        (mode, redactor): Mode<'_>,
        key: impl FnOnce(&mut KeyHead) -> String,
        sent: &[BodyPart],
        response: Option<Value>,
    ) {
        self.pending = None;
        if !mode.hashes() || sent.is_empty() {
            return;
        }
        let mut parts: Vec<SentPart> = Vec::with_capacity(sent.len());
        // The hasher from the first part that is not the previous attempt's at the same
        // place; until then each part's state is the previous attempt's.
        let mut sha: Option<Sha256> = None;
        for (index, part) in sent.iter().enumerate() {
            let before = self.previous.get(index).filter(|b| b.bytes == part.bytes);
            let state = match (before, &mut sha) {
                (Some(before), None) => before.state.clone(),
                (_, sha) => {
                    let sha = sha.get_or_insert_with(|| {
                        parts.last().map_or_else(Sha256::new, |p| p.state.clone())
                    });
                    sha.update(&part.bytes);
                    sha.clone()
                }
            };
            parts.push(SentPart {
                bytes: part.bytes.clone(),
                state,
                // Same bytes, same redaction: the same stored part, stored already.
                id: before.and_then(|b| b.id),
            });
        }
        let digest = parts.last().map(|p| p.state.clone().finalize());
        let mut record = CallRecord {
            request_sha256: digest.map(|d| hex(&d)).unwrap_or_default(),
            request_key: key(&mut self.key_head),
            ..CallRecord::default()
        };
        if mode.bodies() {
            let mut ids = Vec::with_capacity(sent.len());
            for (part, kept) in sent.iter().zip(&mut parts) {
                let id = match kept.id {
                    Some(id) => id,
                    None => {
                        let stored = stored_part(&part.bytes, part.text.clone(), redactor);
                        let id = stored.id;
                        if self.stored.insert(id) {
                            record.new_parts.push(stored);
                        }
                        kept.id = Some(id);
                        id
                    }
                };
                ids.push(id);
            }
            record.parts = Some(ids);
            record.response = response.map(|r| stored_response(r, redactor).to_string());
        }
        self.previous = parts;
        self.pending = Some(Box::new(record));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::request_key::sha256_hex;

    fn body(parts: &[&'static str]) -> Vec<BodyPart> {
        parts
            .iter()
            .map(|part| BodyPart {
                bytes: Bytes::from_static(part.as_bytes()),
                text: None,
            })
            .collect()
    }

    fn keep(recording: &mut Recording, mode: RecordMode, sent: &[BodyPart]) -> CallRecord {
        let redactor = Redactor::default();
        recording.keep((mode, &redactor), |_| "key".into(), sent, None);
        *recording.take().expect("a record")
    }

    /// Each body's hash is of its bytes, whatever it shares with the one before; a part at
    /// the same place with the same bytes keeps its id and is not stored again.
    #[test]
    fn hashes_resume_after_the_shared_parts_and_parts_are_stored_once() {
        let bodies = [
            body(&["{\"head\":", "\"template\"", ",1", ",\"tail\"}"]),
            body(&["{\"head\":", "\"template\"", ",2", ",\"tail\"}"]),
            body(&["{\"head\":", "\"template\"", ",2", ",\"tail\"}"]),
            body(&["{\"other\":", "\"template\"", ",3", ",\"tail\"}", "!"]),
            body(&["{\"other\":"]),
            body(&["{\"head\":", "\"template\"", ",1", ",\"tail\"}"]),
        ];
        for mode in [RecordMode::Hash, RecordMode::Full] {
            let mut recording = Recording::default();
            let mut stored = 0;
            for sent in &bodies {
                let record = keep(&mut recording, mode, sent);
                let expected = sha256_hex(sent.iter().map(|p| &p.bytes[..]));
                assert_eq!(record.request_sha256, expected, "{mode:?} {sent:?}");
                stored += record.new_parts.len();
                if mode == RecordMode::Full {
                    let ids = record.parts.expect("parts");
                    assert_eq!(ids.len(), sent.len());
                    let stored_ids: Vec<Uuid> = sent
                        .iter()
                        .map(|p| stored_part(&p.bytes, None, &Redactor::default()).id)
                        .collect();
                    assert_eq!(ids, stored_ids);
                }
            }
            // Distinct parts: head, template, 1, tail, 2, other, 3, "!".
            let distinct = if mode == RecordMode::Full { 8 } else { 0 };
            assert_eq!(stored, distinct, "{mode:?}");
        }
        let mut off = Recording::default();
        let redactor = Redactor::default();
        off.keep(
            (RecordMode::Off, &redactor),
            |_| "key".into(),
            &bodies[0],
            None,
        );
        assert!(off.take().is_none());
    }
}
