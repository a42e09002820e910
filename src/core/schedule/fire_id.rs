//! A fire's task id, the same on every worker and after any crash: UUIDv5 with the
//! schedule's id as the namespace and the fire time as the name (CONTRACT §14), so a fire
//! makes at most one task.
//!
//! The name is the fire time as RFC 3339 in UTC with `Z` and no fraction when the time is
//! a whole second (`2026-03-29T02:30:00Z`), which every clock fire is; a manual trigger's
//! fire time keeps milliseconds (`2026-03-29T02:30:00.250Z`, three digits) so that two
//! triggers, or a trigger and a clock fire, in one second stay distinct fires. Both survive
//! a round trip through PostgreSQL's microsecond `timestamptz` unchanged.

use chrono::{DateTime, DurationRound, SecondsFormat, TimeDelta, Utc};
use uuid::Uuid;

/// The fire time as the UUIDv5 name: RFC 3339, UTC, `Z`, fraction only when not zero
/// (3, 6 or 9 digits).
pub fn fire_at_text(fire_at: DateTime<Utc>) -> String {
    fire_at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The task id of schedule `schedule_id`'s fire at `fire_at`.
pub fn fire_task_id(schedule_id: Uuid, fire_at: DateTime<Utc>) -> Uuid {
    Uuid::new_v5(&schedule_id, fire_at_text(fire_at).as_bytes())
}

/// The fire time of a manual trigger at `now`: `now` cut to the millisecond.
pub fn trigger_fire_at(now: DateTime<Utc>) -> DateTime<Utc> {
    now.duration_trunc(TimeDelta::milliseconds(1))
        .unwrap_or(now)
}
