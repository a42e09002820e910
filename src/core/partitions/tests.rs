//! The partition decisions across day boundaries, interval changes and strays.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};

use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("a test instant")
        .with_timezone(&Utc)
}

fn day(y: i32, m: u32, d: u32) -> Range {
    let from = Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap();
    Range {
        from,
        to: from + TimeDelta::days(1),
    }
}

fn daily() -> Layout {
    Layout::parse("1d", 3).expect("daily")
}

#[test]
fn intervals_are_whole_hours_dividing_a_day_or_whole_days() {
    for good in ["1h", "2h", "6h", "12h", "24h", "1d", "7d", "1w", " 2d "] {
        assert!(Layout::parse(good, 1).is_ok(), "{good}");
    }
    for bad in [
        "", "1", "d", "5h", "7h", "36h", "0d", "30m", "1.5d", "-1d", "1y",
    ] {
        assert!(Layout::parse(bad, 1).is_err(), "{bad}");
    }
    assert!(Layout::parse("1d", 0).is_err(), "nothing made ahead");
}

#[test]
fn slots_are_aligned_on_the_epoch() {
    let layout = daily();
    assert_eq!(
        layout.slot(at("2026-11-27T23:59:59Z")),
        Some(day(2026, 11, 27))
    );
    assert_eq!(
        layout.slot(at("2026-11-28T00:00:00Z")),
        Some(day(2026, 11, 28))
    );
    let six = Layout::parse("6h", 1).unwrap();
    let slot = six.slot(at("2026-11-27T13:10:00+02:00")).unwrap();
    assert_eq!(slot.from, at("2026-11-27T06:00:00Z"));
    assert_eq!(slot.to, at("2026-11-27T12:00:00Z"));
    // Before the epoch too (a created_at of 1969 still has a slot).
    let old = layout.slot(at("1969-12-31T12:00:00Z")).unwrap();
    assert_eq!(old.from, at("1969-12-31T00:00:00Z"));
}

#[test]
fn an_empty_database_gets_the_current_partition_and_those_ahead() {
    let made = daily().to_create(at("2026-11-27T10:00:00Z"), &[], &[]);
    assert_eq!(
        made,
        vec![
            day(2026, 11, 27),
            day(2026, 11, 28),
            day(2026, 11, 29),
            day(2026, 11, 30)
        ]
    );
}

#[test]
fn crossing_midnight_makes_exactly_one_more_partition() {
    let layout = daily();
    let before = at("2026-11-27T23:59:00Z");
    let existing = layout.to_create(before, &[], &[]);
    assert!(
        layout.to_create(before, &existing, &[]).is_empty(),
        "idempotent"
    );
    let after = at("2026-11-28T00:01:00Z");
    assert_eq!(
        layout.to_create(after, &existing, &[]),
        vec![day(2026, 12, 1)]
    );
}

#[test]
fn rows_in_the_default_partition_get_their_own_partition() {
    let layout = daily();
    let now = at("2026-11-27T10:00:00Z");
    let existing = layout.to_create(now, &[], &[]);
    let strays = [
        at("2026-10-01T08:00:00Z"),
        at("2026-10-01T20:00:00Z"),
        at("2027-03-05T00:00:00Z"),
    ];
    assert_eq!(
        layout.to_create(now, &existing, &strays),
        vec![day(2026, 10, 1), day(2027, 3, 5)]
    );
}

#[test]
fn a_changed_interval_fills_only_the_gaps() {
    // Daily partitions exist for the 27th and 28th; six-hour partitions are wanted now.
    let six = Layout::parse("6h", 8).unwrap();
    let existing = [day(2026, 11, 27), day(2026, 11, 28)];
    let made = six.to_create(at("2026-11-28T20:00:00Z"), &existing, &[]);
    assert_eq!(
        made.first().map(|r| r.from),
        Some(at("2026-11-29T00:00:00Z"))
    );
    assert!(made.iter().all(|r| r.to - r.from == TimeDelta::hours(6)));
    assert!(made.iter().all(|r| existing.iter().all(|e| !e.overlaps(r))));
    // Weekly after daily: the week's slot less the days that exist.
    let weekly = Layout::parse("1w", 1).unwrap();
    let made = weekly.to_create(at("2026-11-28T20:00:00Z"), &existing, &[]);
    assert!(made.iter().all(|r| existing.iter().all(|e| !e.overlaps(r))));
    assert!(made.iter().any(|r| r.from == at("2026-11-29T00:00:00Z")));
    assert!(made.iter().any(|r| r.to == at("2026-11-27T00:00:00Z")));
}

#[test]
fn a_past_span_is_covered_slot_by_slot() {
    let layout = daily();
    let existing = [day(2026, 11, 26)];
    let made = layout.to_cover(
        at("2026-11-24T18:00:00Z"),
        at("2026-11-27T00:00:00Z"),
        &existing,
    );
    assert_eq!(
        made,
        vec![day(2026, 11, 24), day(2026, 11, 25), day(2026, 11, 27)]
    );
    assert!(
        layout
            .to_cover(
                at("2026-11-26T01:00:00Z"),
                at("2026-11-26T02:00:00Z"),
                &existing
            )
            .is_empty()
    );
}

#[test]
fn unbounded_partitions_cover_everything_they_reach() {
    let legacy = Range {
        from: DateTime::<Utc>::MIN_UTC,
        to: at("2026-11-28T00:00:00Z"),
    };
    let made = daily().to_create(at("2026-11-27T10:00:00Z"), &[legacy], &[]);
    assert_eq!(made.first(), Some(&day(2026, 11, 28)));
    assert_eq!(made.len(), 3);
}

#[test]
fn names_carry_the_start_of_the_range() {
    assert_eq!(
        partition_name("events", &day(2026, 11, 27)),
        "events_p20261127"
    );
    let six = Layout::parse("6h", 1).unwrap();
    let slot = six.slot(at("2026-11-27T07:00:00Z")).unwrap();
    assert_eq!(
        partition_name("llm_request_parts", &slot),
        "llm_request_parts_p20261127_060000"
    );
    assert_eq!(default_partition_name("events"), "events_default");
}

#[test]
fn a_range_is_dropped_when_closed_past_the_cutoff_and_held_by_no_task() {
    let now = at("2026-12-30T10:00:00Z");
    let cutoff = now - TimeDelta::days(30);
    let old = Candidate {
        range: day(2026, 11, 25),
        held: false,
    };
    let held = Candidate {
        range: day(2026, 11, 26),
        held: true,
    };
    // Ends after the cutoff (2026-11-30T10:00): its tasks may be younger than 30 days.
    let young = Candidate {
        range: day(2026, 11, 30),
        held: false,
    };
    assert_eq!(to_drop(&[old, held, young], now, cutoff), vec![old.range]);
}

#[test]
fn a_short_age_never_drops_the_open_range_nor_one_just_closed() {
    let now = at("2026-11-28T00:30:00Z");
    let cutoff = now - TimeDelta::seconds(1);
    let today = Candidate {
        range: day(2026, 11, 28),
        held: false,
    };
    let yesterday = Candidate {
        range: day(2026, 11, 27),
        held: false,
    };
    assert!(
        to_drop(&[today, yesterday], now, cutoff).is_empty(),
        "yesterday closed 30 min ago, within the grace"
    );
    let later = now + DROP_GRACE;
    assert_eq!(
        to_drop(&[today, yesterday], later, later - TimeDelta::seconds(1)),
        vec![yesterday.range]
    );
    assert_eq!(drop_limit(now, cutoff), now - DROP_GRACE);
}
