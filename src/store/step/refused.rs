//! A step PostgreSQL refused for a reason that will not go away by itself (a constraint, a
//! value it cannot store, a cardinality violation): writing it again would fail again, so
//! its task cannot go on (see `worker::unstored`).

use super::{Progress, StepWrite};

/// A step the database refused for good, with what it held and the database's reason.
#[derive(Debug, thiserror::Error)]
#[error("PostgreSQL refused to store {what}{detail}: {reason}")]
pub struct StepRefused {
    /// What the step held: `recursion 3`, `the task's end`, ...
    pub what: String,
    /// ` (table recursions, constraint c, SQLSTATE 23514)`, as far as the database says.
    pub detail: String,
    /// The database's message.
    pub reason: String,
    #[source]
    pub source: sqlx::Error,
}

impl StepRefused {
    /// `write` was refused with `source`.
    pub fn new(write: &StepWrite, source: sqlx::Error) -> Self {
        let (detail, reason) = match &source {
            sqlx::Error::Database(db) => {
                let named = [
                    db.table().map(|t| format!("table {t}")),
                    db.constraint().map(|c| format!("constraint {c}")),
                    db.code().map(|code| format!("SQLSTATE {code}")),
                ];
                let named: Vec<String> = named.into_iter().flatten().collect();
                let detail = match named.is_empty() {
                    true => String::new(),
                    false => format!(" ({})", named.join(", ")),
                };
                (detail, db.message().to_owned())
            }
            other => (String::new(), other.to_string()),
        };
        Self {
            what: what(write),
            detail,
            reason,
            source,
        }
    }
}

/// What a step holds, as the task's error names it.
fn what(write: &StepWrite) -> String {
    let iterations: Vec<u32> = write.records.iter().map(|r| r.iteration).collect();
    match iterations.as_slice() {
        [] => match write.progress {
            Progress::Touch => "the task's events".to_owned(),
            Progress::Checkpoint { .. } => "the task's checkpoint".to_owned(),
            Progress::Finish(_) => "the task's end".to_owned(),
            Progress::Wait { .. } => "the task's wait".to_owned(),
        },
        [one] => format!("recursion {one}"),
        [first, .., last] => format!("recursions {first} to {last}"),
    }
}
