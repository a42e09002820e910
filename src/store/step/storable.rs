//! The last defence of a step write against text PostgreSQL refuses: what entered agentd was
//! made storable where it entered (`core::inbound`, `core::storable`), so this runs only when
//! the database refused a step because of a NUL that slipped through; the step is then
//! written again once with every text made storable by the same rule.

use super::{Progress, StepWrite};
use crate::core::{inbound, storable};

impl StepWrite {
    /// Replaces every NUL in the step's texts and JSON texts (U+FFFD; `\ufffd` in JSON).
    /// Returns whether anything changed.
    pub fn make_storable(&mut self) -> bool {
        let mut changed = false;
        for record in &mut self.records {
            changed |= inbound::make_record_storable(record);
        }
        changed |= progress(&mut self.progress);
        for call in &mut self.started {
            changed |= text(&mut call.tool_call_id) | text(&mut call.name);
            changed |= json_text(&mut call.arguments);
            changed |= call.idempotency_key.as_mut().is_some_and(text);
        }
        for meta in &mut self.tool_meta {
            changed |= meta.idempotency_key.as_mut().is_some_and(text);
        }
        for row in &mut self.llm_rows {
            changed |= text(&mut row.status) | text(&mut row.model);
            changed |= row.error.as_mut().is_some_and(text);
        }
        changed
    }
}

fn progress(progress: &mut Progress) -> bool {
    match progress {
        Progress::Touch => false,
        Progress::Checkpoint {
            plan, checkpoint, ..
        }
        | Progress::Wait {
            plan, checkpoint, ..
        } => json_text(plan) | json_text(checkpoint),
        Progress::Finish(end) => {
            json_text(&mut end.plan)
                | end.answer.as_mut().is_some_and(text)
                | end.error.as_mut().is_some_and(text)
        }
    }
}

/// Makes `value` storable in place; whether it changed.
fn text(value: &mut String) -> bool {
    if storable::is_storable(value) {
        return false;
    }
    *value = storable::owned(std::mem::take(value));
    true
}

/// Makes the JSON text `value` storable in place; whether it changed.
fn json_text(value: &mut String) -> bool {
    match storable::json_text(value) {
        std::borrow::Cow::Borrowed(_) => false,
        std::borrow::Cow::Owned(replaced) => {
            *value = replaced;
            true
        }
    }
}
