//! A cron expression evaluated over an IANA time zone, with the DST rule of CONTRACT §14:
//! **a local time that does not exist (spring forward) is skipped; one that repeats (fall
//! back) fires once, at its first occurrence.**
//!
//! The rule holds per local wall-clock time, so it applies to sub-hourly expressions too:
//! `*/30 * * * *` in Europe/Berlin fires at 02:00 and 02:30 local once each on
//! 2026-10-25 (at 00:00Z and 00:30Z, still in summer time) and not again when the clock
//! shows 02:00 and 02:30 a second time; its next fire is 03:00 CET (02:00Z), 90 minutes
//! later. A schedule that wants a steady interval in real time uses `every`.
//!
//! How: walk local dates from the local date of `after`, and on each matching date the
//! matching times in order; map each local time to its earliest instant (none in a gap)
//! and take the first instant strictly after `after`. Mapping local times to their
//! earliest instant never goes backwards, so the first match found is the next fire.

use chrono::{DateTime, NaiveDate, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use super::cron::CronExpr;

/// How many local days [`next_cron_fire`] looks ahead: a February 29 can be eight years
/// away (2096, then 2104).
const SEARCH_DAYS: u32 = 366 * 9;

/// The first fire of `expr` in `tz` strictly after `after`; `None` if none comes within
/// nine years (an expression that can never fire is refused when parsed).
pub(super) fn next_cron_fire(
    expr: &CronExpr,
    tz: Tz,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let local = after.with_timezone(&tz).naive_local();
    let mut date = local.date();
    // Local times before `after`'s own local minute map to instants not after it.
    let mut from = (local.hour(), local.minute());
    for _ in 0..SEARCH_DAYS {
        if expr.day_matches(date)
            && let Some(fire) = fire_on(expr, tz, date, from, after)
        {
            return Some(fire);
        }
        date = date.succ_opt()?;
        from = (0, 0);
    }
    None
}

/// The first fire on local `date` at or after local time `from` (hour, minute) and
/// strictly after `after`.
fn fire_on(
    expr: &CronExpr,
    tz: Tz,
    date: NaiveDate,
    from: (u32, u32),
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    for hour in from.0..24 {
        let first_minute = if hour == from.0 { from.1 } else { 0 };
        for minute in first_minute..60 {
            if !expr.time_matches(hour, minute) {
                continue;
            }
            let Some(instant) = local_instant(tz, date, hour, minute) else {
                continue;
            };
            if instant > after {
                return Some(instant);
            }
        }
    }
    None
}

/// The instant local time `date hour:minute` in `tz` first occurs; `None` in a DST gap.
pub(super) fn local_instant(
    tz: Tz,
    date: NaiveDate,
    hour: u32,
    minute: u32,
) -> Option<DateTime<Utc>> {
    let naive = date.and_hms_opt(hour, minute, 0)?;
    tz.from_local_datetime(&naive)
        .earliest()
        .map(|instant| instant.with_timezone(&Utc))
}
