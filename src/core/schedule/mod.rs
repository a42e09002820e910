//! Schedules (CONTRACT v3 §14), pure: when a schedule fires, and what each fire decides.
//! No clock, no database: the driver passes `now` and what it read.
//!
//! # What the driver calls
//!
//! - **Create / PATCH** (CLI, gateway): [`Timing::cron`] (`--cron EXPR [--tz TZ]`, default
//!   time zone [`DEFAULT_TIME_ZONE`]) or [`Timing::every`] (`--every 30s`), and
//!   [`Policy::from_row`] for overlap / catch-up / window / cap; each refuses bad input with
//!   an error to print as it is. Store `next_fire_at` = [`first_next_fire_at`]`(timing, now)`.
//! - **Load a row**: [`Timing::from_row`]`(cron, every_secs, timezone)` and
//!   [`Policy::from_row`].
//! - **Each scheduler tick** (the one fleet-wide holder), per schedule: [`decide`] with the
//!   row ([`Schedule`]), what it reads ([`Seen`]: is the schedule's latest task unfinished,
//!   the buffered fire, fires per UTC day), `now` and the on-time grace
//!   ([`DEFAULT_ON_TIME_GRACE_SECS`] unless configured; see `decide.rs` for what is
//!   missed and what is due). Record every [`Fire`] in
//!   `schedule_fires` (upsert: a released buffered fire turns from `buffered` into
//!   `enqueued`), create a task for each fire whose `task_id` is `Some` (that id, with
//!   `schedule_id` and `fire_at` on the row; an existing task with that id means a crashed
//!   holder already made it), and store [`Decisions::next_fire_at`]; commit, and when
//!   [`Decisions::more_due`] is true call again at once.
//! - **Pause**: nothing to compute; [`decide`] makes no fire while `paused`.
//!   **Resume**: set `next_fire_at` = [`first_next_fire_at`]`(timing, now)`: fires that
//!   fell while paused are not caught up (a pause is deliberate, not an outage) and get no
//!   row. A fire buffered before the pause is released after the resume, once the
//!   previous task has ended.
//! - **Trigger**: [`trigger`] gives the fire to record (`triggered`) and its task id.
//!
//! A fire's task id is UUIDv5(schedule_id, fire_at as RFC 3339 UTC): [`fire_task_id`],
//! with the text pinned by [`fire_at_text`].
//!
//! Cron time zones and DST: see `zoned.rs` (a local time in a spring-forward gap is
//! skipped; one that repeats fires once, at its first occurrence). `every` intervals are
//! anchored at the Unix epoch and ignore the time zone: see `every.rs`.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

mod cron;
mod decide;
mod every;
mod fire_id;
mod policy;
mod zoned;

#[cfg(test)]
mod tests;

pub use cron::{CronError, CronExpr, CronField};
pub use decide::{
    DEFAULT_ON_TIME_GRACE_SECS, Decisions, Fire, MAX_FIRES_PER_DECIDE, Schedule, Seen, decide,
    first_next_fire_at, trigger,
};
pub use every::{Every, EveryError, MAX_EVERY_SECS, MIN_EVERY_SECS};
pub use fire_id::{fire_at_text, fire_task_id, trigger_fire_at};
pub use policy::{CatchUp, DEFAULT_CATCH_UP_WINDOW_SECS, Decision, Overlap, Policy, PolicyError};

/// The time zone of a cron schedule given none (`schedules.timezone` default).
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// When a schedule fires: a cron expression in a time zone, or a fixed interval.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// A 5-field cron expression evaluated in `tz`.
    Cron { expr: CronExpr, tz: Tz },
    /// A fixed interval anchored at the Unix epoch (no time zone).
    Every(Every),
}

/// Why a schedule's timing was refused; the Display text is what a CLI prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error(transparent)]
    Cron(#[from] CronError),
    #[error(transparent)]
    Every(#[from] EveryError),
    #[error("unknown time zone {name:?}{}: expected an IANA name such as Europe/Berlin, \
             America/New_York or UTC", suggestion.map(|s| format!(" (did you mean {s}?)")).unwrap_or_default())]
    UnknownTimeZone {
        name: String,
        suggestion: Option<&'static str>,
    },
    #[error("a schedule has either a cron expression or an every interval, not both")]
    Both,
    #[error("a schedule needs a cron expression or an every interval")]
    Neither,
}

/// The IANA time zone named `name` (exact spelling, as in the tz database: `Europe/Berlin`,
/// `UTC`). An unknown name is refused, with the closest known name when one is close.
pub fn parse_time_zone(name: &str) -> Result<Tz, TimingError> {
    Tz::from_str(name).map_err(|_| TimingError::UnknownTimeZone {
        name: name.to_owned(),
        suggestion: closest_time_zone(name),
    })
}

/// The known zone spelled like `name` but for case, else the most similar one.
fn closest_time_zone(name: &str) -> Option<&'static str> {
    let names = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
    if let Some(same) = names.clone().find(|known| known.eq_ignore_ascii_case(name)) {
        return Some(same);
    }
    let lower = name.to_ascii_lowercase();
    names
        .map(|known| {
            (
                strsim::jaro_winkler(&known.to_ascii_lowercase(), &lower),
                known,
            )
        })
        .filter(|(score, _)| *score >= 0.9)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, known)| known)
}

impl Timing {
    /// A cron schedule: `expression` (5 fields) in the time zone named `time_zone`.
    pub fn cron(expression: &str, time_zone: &str) -> Result<Self, TimingError> {
        let expr = CronExpr::parse(expression)?;
        let tz = parse_time_zone(time_zone)?;
        Ok(Self::Cron { expr, tz })
    }

    /// An interval schedule: `30s`, `5m`, `1h`, `1d`, `1h30m`...
    pub fn every(text: &str) -> Result<Self, TimingError> {
        Ok(Self::Every(Every::parse(text)?))
    }

    /// The timing a `schedules` row holds: exactly one of `cron` and `every_secs`; the
    /// time zone is checked for both (an `every` schedule ignores it).
    pub fn from_row(
        cron: Option<&str>,
        every_secs: Option<i64>,
        time_zone: &str,
    ) -> Result<Self, TimingError> {
        match (cron, every_secs) {
            (Some(expression), None) => Self::cron(expression, time_zone),
            (None, Some(secs)) => {
                parse_time_zone(time_zone)?;
                Ok(Self::Every(Every::from_secs(secs)?))
            }
            (Some(_), Some(_)) => Err(TimingError::Both),
            (None, None) => Err(TimingError::Neither),
        }
    }

    /// The first fire strictly after `after`; `None` when there is none (a cron
    /// expression with no fire in the next nine years, or past the calendar's end).
    pub fn next_fire(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Self::Cron { expr, tz } => zoned::next_cron_fire(expr, *tz, after),
            Self::Every(every) => every.next_fire(after),
        }
    }

    /// The fires strictly after `after` and at or before `until`, in order.
    pub fn fires(&self, after: DateTime<Utc>, until: DateTime<Utc>) -> Fires<'_> {
        Fires {
            timing: self,
            after,
            until,
        }
    }
}

/// The fire times of a [`Timing`] in a window; see [`Timing::fires`].
#[derive(Debug, Clone)]
pub struct Fires<'a> {
    timing: &'a Timing,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
}

impl Iterator for Fires<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<Self::Item> {
        let fire = self.timing.next_fire(self.after)?;
        if fire > self.until {
            return None;
        }
        self.after = fire;
        Some(fire)
    }
}
