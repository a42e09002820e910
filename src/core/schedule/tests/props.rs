//! Property tests: over random cron expressions, time zones with DST (including half-hour
//! shifts and a skipped day) and starting instants, the fires in a window are exactly the
//! UTC minutes whose local time matches the fields and occurs there for the first time —
//! so they are strictly increasing, never in a DST gap, and never twice for one local
//! time. `every` fires are the next multiple of the interval.

use chrono::{DateTime, TimeDelta, TimeZone, Timelike, Utc};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::Config;

use crate::core::schedule::{CronExpr, Every, Timing};

/// Zones with DST both ways, a 30-minute DST shift (Lord Howe), half-hour offsets,
/// DST at midnight (Santiago) and a day that never happened (Apia, 2011-12-30).
const ZONES: [&str; 9] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/St_Johns",
    "America/Santiago",
    "Pacific/Apia",
    "Europe/London",
];

/// Cases per property, with no failure files written into the source tree.
fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// How far the brute-force oracle looks.
const WINDOW: TimeDelta = TimeDelta::days(2);

/// One comma-separated item of a field with values `low..=high`.
fn item(low: u32, high: u32) -> impl Strategy<Value = String> {
    let value = low..=high;
    prop_oneof![
        Just("*".to_owned()),
        (1..=high).prop_map(|step| format!("*/{step}")),
        value.clone().prop_map(|v| v.to_string()),
        (value.clone(), value, 1..=high, any::<bool>()).prop_map(|(a, b, step, stepped)| {
            let (a, b) = (a.min(b), a.max(b));
            if stepped {
                format!("{a}-{b}/{step}")
            } else {
                format!("{a}-{b}")
            }
        }),
    ]
}

/// A field: mostly `*` for days and months so that windows see fires.
fn field(low: u32, high: u32, star_weight: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        star_weight => Just("*".to_owned()),
        3 => vec(item(low, high), 1..=3).prop_map(|items| items.join(",")),
    ]
}

fn expression() -> impl Strategy<Value = String> {
    (
        field(0, 59, 1),
        field(0, 23, 1),
        field(1, 31, 6),
        field(1, 12, 6),
        field(0, 7, 4),
    )
        .prop_map(|(m, h, dom, mon, dow)| format!("{m} {h} {dom} {mon} {dow}"))
}

/// An instant between 2000 and 2090, with a random fraction of a second.
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    (946_684_800i64..3_786_912_000, 0u32..1_000_000_000)
        .prop_map(|(secs, nanos)| DateTime::from_timestamp(secs, nanos).unwrap_or_default())
}

/// The first change of `tz`'s UTC offset within 200 days after `start` (hour precision is
/// enough: the window starts well before it), or `start` in a zone without one.
fn next_offset_change(tz: chrono_tz::Tz, start: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::Offset;
    let offset = |t: DateTime<Utc>| tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    let before = offset(start);
    (1..24 * 200)
        .map(|hours| start + TimeDelta::hours(hours))
        .find(|t| offset(*t) != before)
        .unwrap_or(start)
}

/// Whether `t` is a fire: its local time matches and this is its first occurrence.
fn is_fire(expr: &CronExpr, tz: chrono_tz::Tz, t: DateTime<Utc>) -> bool {
    let local = t.with_timezone(&tz).naive_local();
    expr.day_matches(local.date())
        && local.second() == 0
        && expr.time_matches(local.hour(), local.minute())
        && tz
            .from_local_datetime(&local)
            .earliest()
            .map(|first| first.to_utc())
            == Some(t)
}

/// Every fire in `(after, after + WINDOW]`, by trying each UTC minute.
fn brute_force(expr: &CronExpr, tz: chrono_tz::Tz, after: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let first_minute = (after.timestamp().div_euclid(60) + 1) * 60;
    let end = after + WINDOW;
    (0..)
        .filter_map(|i| DateTime::from_timestamp(first_minute + 60 * i, 0))
        .take_while(|t| *t <= end)
        .filter(|t| is_fire(expr, tz, *t))
        .collect()
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn cron_fires_are_exactly_the_first_occurrences_of_matching_local_times(
        expression in expression(),
        zone in 0..ZONES.len(),
        start in instant(),
        // Most windows hold a DST change: they start up to 40 hours before one.
        before_change in prop_oneof![1 => Just(None), 4 => (0i64..40 * 60).prop_map(Some)],
    ) {
        let after = match before_change {
            Some(minutes) => {
                let tz: chrono_tz::Tz = ZONES[zone].parse().unwrap_or(chrono_tz::UTC);
                next_offset_change(tz, start) - TimeDelta::minutes(minutes)
            }
            None => start,
        };
        let Ok(timing) = Timing::cron(&expression, ZONES[zone]) else {
            // Only an expression that can never fire is refused.
            let refused = CronExpr::parse(&expression);
            prop_assert!(matches!(refused, Err(crate::core::schedule::CronError::NeverFires { .. })),
                "{expression}: {refused:?}");
            return Ok(());
        };
        let Timing::Cron { expr, tz } = &timing else { unreachable!("a cron timing") };
        let fires: Vec<_> = timing.fires(after, after + WINDOW).collect();
        let expected = brute_force(expr, *tz, after);
        // The first difference, not two lists of thousands of minutes.
        let differ = fires.iter().zip(&expected).position(|(a, b)| a != b);
        prop_assert!(
            differ.is_none() && fires.len() == expected.len(),
            "{} in {} after {}: first difference at {:?}: {:?} vs {:?}; {} fires, {} expected",
            expression, ZONES[zone], after, differ,
            differ.map(|i| fires[i]), differ.map(|i| expected[i]), fires.len(), expected.len()
        );
        prop_assert!(fires.windows(2).all(|w| w[0] < w[1]));
        if let Some(next) = timing.next_fire(after) {
            prop_assert!(next > after);
            prop_assert!(is_fire(expr, *tz, next), "{} in {}: {}", expression, ZONES[zone], next);
            prop_assert!(fires.first().is_none_or(|first| *first == next));
        }
    }

    #[test]
    fn every_fires_at_the_next_multiple_of_the_interval(
        secs in 1i64..200_000,
        after in instant(),
    ) {
        let every = Every::from_secs(secs).unwrap();
        let next = every.next_fire(after).unwrap();
        prop_assert!(next > after);
        prop_assert!(next - after <= TimeDelta::seconds(secs));
        prop_assert_eq!(next.timestamp() % secs, 0);
        prop_assert_eq!(next.nanosecond(), 0);
    }
}
