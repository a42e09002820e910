//! `every` intervals: parsing, refusal and the epoch anchor.

use super::at;
use crate::core::schedule::{Every, EveryError, MAX_EVERY_SECS, Timing};

fn secs(text: &str) -> u32 {
    Every::parse(text).expect("a valid interval").secs()
}

#[test]
fn units_and_combinations() {
    assert_eq!(secs("30s"), 30);
    assert_eq!(secs("5m"), 300);
    assert_eq!(secs("1h"), 3_600);
    assert_eq!(secs("1d"), 86_400);
    assert_eq!(secs("1h30m"), 5_400);
    assert_eq!(secs("1d2h3m4s"), 93_784);
    assert_eq!(secs("90s"), 90);
    assert_eq!(secs(" 2H "), 7_200);
    assert_eq!(Every::parse("1h30m").unwrap().to_string(), "1h30m");
    assert_eq!(Every::parse("90s").unwrap().to_string(), "1m30s");
    assert_eq!(Every::parse("86400s").unwrap().to_string(), "1d");
}

#[test]
fn bad_intervals_say_what_is_wrong() {
    let cases = [
        ("", "it is empty"),
        ("30", "a number without a unit"),
        ("5x", "unknown unit"),
        ("m", "expected a number"),
        ("-5m", "expected a number"),
        ("1m1h", "largest first"),
        ("1m2m", "largest first"),
        ("1h 30m", "expected a number"),
        ("99999999999999999999s", "too large"),
        ("1.5h", "unknown unit"),
    ];
    for (text, expected) in cases {
        let error = Every::parse(text).unwrap_err();
        assert!(matches!(error, EveryError::Syntax { .. }), "{text}");
        assert!(error.to_string().contains(expected), "{text}: {error}");
    }
    for text in ["0s", "0m0s", "24856d"] {
        assert!(
            matches!(Every::parse(text), Err(EveryError::OutOfRange { .. })),
            "{text}"
        );
    }
    assert_eq!(
        Every::from_secs(i64::from(MAX_EVERY_SECS)).unwrap().secs(),
        MAX_EVERY_SECS
    );
    assert!(Every::from_secs(-1).is_err());
    assert!(Every::from_secs(i64::from(MAX_EVERY_SECS) + 1).is_err());
}

#[test]
fn fires_are_multiples_of_the_interval_since_the_epoch() {
    let every = Every::parse("5m").unwrap();
    assert_eq!(
        every.next_fire(at("2026-03-29T02:31:10Z")),
        Some(at("2026-03-29T02:35:00Z"))
    );
    // Strictly after: a fire time gives the next one; a fraction past it too.
    assert_eq!(
        every.next_fire(at("2026-03-29T02:35:00Z")),
        Some(at("2026-03-29T02:40:00Z"))
    );
    assert_eq!(
        every.next_fire(at("2026-03-29T02:34:59.999Z")),
        Some(at("2026-03-29T02:35:00Z"))
    );
    let week = Every::parse("7d").unwrap();
    assert_eq!(
        week.next_fire(at("2026-11-26T12:00:00Z")),
        Some(at("2026-12-03T00:00:00Z")),
        "7d falls on Thursdays 00:00 UTC, as 1970-01-01 did"
    );
    assert_eq!(
        Every::parse("1s")
            .unwrap()
            .next_fire(at("1969-12-31T23:59:58.5Z")),
        Some(at("1969-12-31T23:59:59Z"))
    );
}

#[test]
fn the_same_fires_whatever_the_starting_point_and_time_zone() {
    // Two workers that start at different moments agree on every fire after both started.
    let timing = Timing::from_row(None, Some(7 * 60 + 3), "Europe/Berlin").unwrap();
    let end = at("2026-10-26T00:00:00Z");
    let from_a: Vec<_> = timing.fires(at("2026-10-24T22:13:07Z"), end).collect();
    let from_b: Vec<_> = timing.fires(at("2026-10-25T01:00:00Z"), end).collect();
    assert!(from_a.ends_with(&from_b));
    assert!(
        from_a
            .windows(2)
            .all(|w| (w[1] - w[0]).num_seconds() == 423)
    );
    assert!(from_a.iter().all(|f| f.timestamp() % 423 == 0));
}
