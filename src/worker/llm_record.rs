//! The record of one model call attempt (CONTRACT v3 §12), made as the attempt ends and
//! written with its `llm_calls` row: `request_sha256` over the exact bytes the client sent,
//! `request_key` over the canonical form (`core::request_key`), and with `llm.record =
//! full` the body's parts (each stored once per task: the parts this run already wrote are
//! not sent to PostgreSQL again) and the response, made storable and redacted
//! (`core::call_record`). A part with the same bytes at the same place as in the previous
//! attempt (the template, the earlier history) keeps its id without being made storable,
//! redacted and hashed again: comparing bytes is cheaper than SHA-256 over them.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::Value;
use uuid::Uuid;

use crate::core::call_record::{RecordMode, Redactor, stored_part, stored_response};
use crate::core::request_key::{KeyHead, sha256_hex};
use crate::ports::BodyPart;
use crate::store::llm_record::CallRecord;

/// A task run's side of the record.
#[derive(Debug, Default)]
pub struct Recording {
    /// Parts this run has handed to a step already: a later step need not write them.
    stored: HashSet<Uuid>,
    /// The record of the attempt that just ended, for its `llm_calls` row.
    pending: Option<Box<CallRecord>>,
    /// The previous attempt's parts as sent, in order, with their ids.
    previous: Vec<(Bytes, Uuid)>,
    /// The request key's hash state after the head every request of the task shares.
    key_head: KeyHead,
}

impl Recording {
    /// The record of the attempt that just ended, if any.
    pub(super) fn take(&mut self) -> Option<Box<CallRecord>> {
        self.pending.take()
    }
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
        let mut record = CallRecord {
            request_sha256: sha256_hex(sent.iter().map(|part| &part.bytes[..])),
            request_key: key(&mut self.key_head),
            ..CallRecord::default()
        };
        if mode.bodies() {
            let mut ids = Vec::with_capacity(sent.len());
            let mut parts = Vec::with_capacity(sent.len());
            for (index, part) in sent.iter().enumerate() {
                let id = match self.previous.get(index) {
                    // Same bytes, same redaction: the same stored part, stored already.
                    Some((bytes, id)) if *bytes == part.bytes => *id,
                    _ => {
                        let stored = stored_part(&part.bytes, part.text.clone(), redactor);
                        let id = stored.id;
                        if self.stored.insert(id) {
                            record.new_parts.push(stored);
                        }
                        id
                    }
                };
                ids.push(id);
                parts.push((part.bytes.clone(), id));
            }
            self.previous = parts;
            record.parts = Some(ids);
            record.response = response.map(|r| stored_response(r, redactor).to_string());
        }
        self.pending = Some(Box::new(record));
    }
}
