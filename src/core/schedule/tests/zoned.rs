//! Cron fire times over time zones: month ends, leap days, the day rules, the DST changes
//! of Europe/Berlin and America/New_York, time zone names and fire ids.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::at;
use crate::core::schedule::{
    Timing, TimingError, fire_at_text, fire_task_id, parse_time_zone, trigger_fire_at,
};

fn cron(expression: &str, tz: &str) -> Timing {
    Timing::cron(expression, tz).expect("a valid schedule")
}

/// The fires after `from` up to `until`, as RFC 3339 text.
fn fires(timing: &Timing, from: &str, until: &str) -> Vec<String> {
    timing
        .fires(at(from), at(until))
        .map(|fire| fire.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .collect()
}

fn next(timing: &Timing, after: &str) -> Option<DateTime<Utc>> {
    timing.next_fire(at(after))
}

#[test]
fn next_fire_is_strictly_after_and_crosses_month_and_year_ends() {
    let daily = cron("0 0 * * *", "UTC");
    assert_eq!(
        next(&daily, "2026-01-31T00:00:00Z"),
        Some(at("2026-02-01T00:00:00Z"))
    );
    assert_eq!(
        next(&daily, "2026-01-30T23:59:59.9Z"),
        Some(at("2026-01-31T00:00:00Z"))
    );
    let the_31st = cron("0 12 31 * *", "UTC");
    assert_eq!(
        next(&the_31st, "2026-01-31T12:00:00Z"),
        Some(at("2026-03-31T12:00:00Z"))
    );
    assert_eq!(
        next(&the_31st, "2026-04-01T00:00:00Z"),
        Some(at("2026-05-31T12:00:00Z"))
    );
    let new_year = cron("30 0 1 jan *", "UTC");
    assert_eq!(
        next(&new_year, "2026-12-31T23:59:00Z"),
        Some(at("2027-01-01T00:30:00Z"))
    );
}

#[test]
fn leap_days() {
    let leap = cron("0 0 29 2 *", "UTC");
    assert_eq!(
        next(&leap, "2026-01-01T00:00:00Z"),
        Some(at("2028-02-29T00:00:00Z"))
    );
    // 2100 is not a leap year: eight years from 2096 to 2104.
    assert_eq!(
        next(&leap, "2096-03-01T00:00:00Z"),
        Some(at("2104-02-29T00:00:00Z"))
    );
    let end_of_feb = cron("0 6 28-29 2 *", "UTC");
    assert_eq!(
        fires(&end_of_feb, "2028-02-01T00:00:00Z", "2029-03-01T00:00:00Z"),
        [
            "2028-02-28T06:00:00Z",
            "2028-02-29T06:00:00Z",
            "2029-02-28T06:00:00Z"
        ]
    );
}

#[test]
fn day_of_month_or_day_of_week_when_both_are_restricted() {
    // Every Friday and every 13th.
    let either = cron("0 9 13 * fri", "UTC");
    let days: Vec<String> = fires(&either, "2026-11-01T00:00:00Z", "2026-12-31T00:00:00Z")
        .into_iter()
        .map(|fire| fire[5..10].to_owned())
        .collect();
    assert_eq!(
        days,
        [
            "11-06", "11-13", "11-20", "11-27", "12-04", "12-11", "12-13", "12-18", "12-25"
        ]
    );
    // A field that begins with `*` makes both conditions needed: odd-day Fridays.
    let both = cron("0 9 */2 * fri", "UTC");
    let days: Vec<String> = fires(&both, "2026-11-01T00:00:00Z", "2026-12-31T00:00:00Z")
        .into_iter()
        .map(|fire| fire[5..10].to_owned())
        .collect();
    assert_eq!(days, ["11-13", "11-27", "12-11", "12-25"]);
    let weekdays = cron("0 9 * * mon-fri", "UTC");
    assert_eq!(
        fires(&weekdays, "2026-11-27T10:00:00Z", "2026-12-01T10:00:00Z"),
        ["2026-11-30T09:00:00Z", "2026-12-01T09:00:00Z"]
    );
}

#[test]
fn berlin_spring_change_skips_the_missing_0230() {
    let daily = cron("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        fires(&daily, "2026-03-27T00:00:00Z", "2026-03-31T00:00:00Z"),
        [
            "2026-03-27T01:30:00Z",
            "2026-03-28T01:30:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    // Every 30 minutes: 02:00 and 02:30 local do not exist that night.
    let half_hourly = cron("*/30 * * * *", "Europe/Berlin");
    assert_eq!(
        fires(&half_hourly, "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z"),
        [
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST
            "2026-03-29T01:30:00Z",
            "2026-03-29T02:00:00Z",
        ]
    );
}

#[test]
fn berlin_autumn_change_fires_a_repeated_time_once_at_its_first_occurrence() {
    let daily = cron("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        fires(&daily, "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z"),
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ]
    );
    // 02:00 and 02:30 local fire once each, in summer time; not again in winter time.
    let half_hourly = cron("*/30 * * * *", "Europe/Berlin");
    assert_eq!(
        fires(&half_hourly, "2026-10-24T22:59:00Z", "2026-10-25T03:00:00Z"),
        [
            "2026-10-24T23:00:00Z", // 01:00 CEST
            "2026-10-24T23:30:00Z",
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:30:00Z", // 02:30 CEST; 02:00 and 02:30 CET do not fire
            "2026-10-25T02:00:00Z", // 03:00 CET
            "2026-10-25T02:30:00Z",
            "2026-10-25T03:00:00Z",
        ]
    );
    // Asked from inside the repeated hour's second pass, the next fire is 03:00 CET.
    assert_eq!(
        next(&half_hourly, "2026-10-25T01:10:00Z"),
        Some(at("2026-10-25T02:00:00Z"))
    );
}

#[test]
fn new_york_changes() {
    let daily = cron("30 2 * * *", "America/New_York");
    assert_eq!(
        fires(&daily, "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"),
        ["2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"]
    );
    let early = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        fires(&early, "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z"),
        [
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z"
        ]
    );
    let hourly = cron("0 * * * *", "America/New_York");
    assert_eq!(
        fires(&hourly, "2026-11-01T04:30:00Z", "2026-11-01T08:00:00Z"),
        [
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T07:00:00Z", // 02:00 EST (01:00 EST does not fire again)
            "2026-11-01T08:00:00Z",
        ]
    );
}

#[test]
fn the_time_zone_shifts_fires_and_defaults_nowhere_but_utc() {
    let tokyo = cron("0 9 * * *", "Asia/Tokyo");
    assert_eq!(
        next(&tokyo, "2026-06-01T00:00:00Z"),
        Some(at("2026-06-02T00:00:00Z"))
    );
    let kolkata = cron("0 9 * * *", "Asia/Kolkata");
    assert_eq!(
        next(&kolkata, "2026-06-01T00:00:00Z"),
        Some(at("2026-06-01T03:30:00Z"))
    );
    assert_eq!(parse_time_zone("UTC").unwrap().to_string(), "UTC");
}

#[test]
fn unknown_time_zones_are_refused_with_the_closest_name() {
    let suggestion = |name: &str| match parse_time_zone(name) {
        Err(TimingError::UnknownTimeZone { suggestion, .. }) => suggestion,
        other => panic!("{name}: expected an unknown zone, got {other:?}"),
    };
    assert_eq!(suggestion("europe/berlin"), Some("Europe/Berlin"));
    assert_eq!(suggestion("Europe/Berln"), Some("Europe/Berlin"));
    assert_eq!(suggestion("Mars/Olympus_Mons"), None);
    assert_eq!(suggestion(""), None);
    assert_eq!(suggestion("Europe/Berlin\0"), Some("Europe/Berlin"));
    let text = parse_time_zone("europe/berlin").unwrap_err().to_string();
    assert!(text.contains("did you mean Europe/Berlin?"), "{text}");
    assert!(Timing::cron("0 0 * * *", "CEST").is_err());
}

#[test]
fn a_row_has_exactly_one_timing() {
    assert_eq!(
        Timing::from_row(None, None, "UTC"),
        Err(TimingError::Neither)
    );
    assert_eq!(
        Timing::from_row(Some("0 0 * * *"), Some(60), "UTC"),
        Err(TimingError::Both)
    );
    assert!(matches!(
        Timing::from_row(None, Some(0), "UTC"),
        Err(TimingError::Every(_))
    ));
    assert!(matches!(
        Timing::from_row(None, Some(60), "Nowhere"),
        Err(TimingError::UnknownTimeZone { .. })
    ));
    assert!(matches!(
        Timing::from_row(Some("61 * * * *"), None, "UTC"),
        Err(TimingError::Cron(_))
    ));
    assert!(Timing::from_row(Some("0 0 * * *"), None, "Europe/Berlin").is_ok());
}

#[test]
fn fire_ids_are_uuidv5_of_the_pinned_fire_time_text() {
    let schedule = Uuid::parse_str("0192f5a8-7c1e-7d3a-9b2c-3f4e5d6c7b8a").unwrap();
    let fire_at = at("2026-03-29T04:30:00+02:00");
    assert_eq!(fire_at_text(fire_at), "2026-03-29T02:30:00Z");
    // Python: uuid.uuid5(UUID("0192f5a8-..."), "2026-03-29T02:30:00Z")
    assert_eq!(
        fire_task_id(schedule, fire_at).to_string(),
        "b0a8d4aa-9f0e-5aa2-8bf1-537ce37e0776"
    );
    let triggered = trigger_fire_at(at("2026-03-29T02:30:00.250999Z"));
    assert_eq!(fire_at_text(triggered), "2026-03-29T02:30:00.250Z");
    assert_eq!(
        fire_task_id(schedule, triggered).to_string(),
        "3b03dc1c-6102-5996-a40b-2c7bdd59ec7a"
    );
    assert_ne!(
        fire_task_id(Uuid::nil(), fire_at),
        fire_task_id(schedule, fire_at)
    );
}
