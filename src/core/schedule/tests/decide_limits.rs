//! The fire decisions' limits: the daily cap, triggers, batches of many due fires, DST
//! with an outage, and the contract's names.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::at;
use super::decide::{GRACE, ID, decided, pairs, policy, running, schedule};
use crate::core::schedule::{
    CatchUp, Decision, MAX_FIRES_PER_DECIDE, Overlap, Policy, PolicyError, Schedule, Seen, Timing,
    decide, fire_task_id, trigger,
};

#[test]
fn the_daily_cap_counts_enqueued_and_buffered_fires_per_utc_day() {
    let mut capped = policy(Overlap::Allow, CatchUp::All);
    capped.max_fires_per_day = Some(2);
    let s = schedule("10s", capped, "2026-05-01T23:59:30Z");
    let day = |d: u32| NaiveDate::from_ymd_opt(2026, 5, d).unwrap();
    let seen = Seen {
        fires_per_day: BTreeMap::from([(day(1), 1)]),
        ..Seen::default()
    };
    let d = decide(
        &s,
        &seen,
        at("2026-05-02T00:00:15Z"),
        TimeDelta::seconds(60),
    );
    assert_eq!(
        decided(&d),
        pairs(&[
            ("23:59:30", "enqueued"),
            ("23:59:40", "capped"),
            ("23:59:50", "capped"),
            ("00:00:00", "enqueued"),
            ("00:00:10", "enqueued"),
        ])
    );
    // Skipped fires do not count; buffered ones do.
    let mut one = policy(Overlap::BufferOne, CatchUp::All);
    one.max_fires_per_day = Some(1);
    let s = schedule("10s", one, "2026-05-01T12:00:00Z");
    let d = decide(&s, &running(), at("2026-05-01T12:00:25Z"), GRACE);
    assert_eq!(
        decided(&d),
        pairs(&[
            ("12:00:00", "buffered"),
            ("12:00:10", "capped"),
            ("12:00:20", "capped")
        ])
    );
    let s = Schedule {
        policy: Policy {
            overlap: Overlap::Skip,
            ..one
        },
        ..s
    };
    let d = decide(&s, &running(), at("2026-05-01T12:00:25Z"), GRACE);
    assert!(
        d.fires
            .iter()
            .all(|f| f.decision == Decision::SkippedOverlap)
    );
}

#[test]
fn a_trigger_fires_now_whatever_the_rules() {
    let now = at("2026-05-01T12:00:07.123456Z");
    let fire = trigger(ID, now);
    assert_eq!(fire.fire_at, at("2026-05-01T12:00:07.123Z"));
    assert_eq!(fire.decision, Decision::Triggered);
    assert_eq!(fire.task_id, Some(fire_task_id(ID, fire.fire_at)));
    assert!(!Decision::Triggered.counts_toward_cap());
}

#[test]
fn a_long_outage_is_decided_in_batches_that_end_before_a_missed_fire() {
    let mut s = schedule(
        "1s",
        policy(Overlap::Skip, CatchUp::Latest),
        "2026-05-01T10:00:00Z",
    );
    let now = at("2026-05-01T12:00:00.5Z");
    let mut all = Vec::new();
    let mut calls = 0;
    loop {
        let d = decide(&s, &Seen::default(), now, GRACE);
        calls += 1;
        assert!(d.fires.len() <= MAX_FIRES_PER_DECIDE + GRACE.num_seconds() as usize);
        all.extend(d.fires);
        s.next_fire_at = d.next_fire_at;
        if !d.more_due {
            break;
        }
    }
    assert_eq!(calls, 8);
    assert_eq!(all.len(), 7201, "10:00:00 to 12:00:00 inclusive");
    let expected: Vec<DateTime<Utc>> = (0..7201)
        .map(|i| at("2026-05-01T10:00:00Z") + TimeDelta::seconds(i))
        .collect();
    let got: Vec<DateTime<Utc>> = all.iter().map(|f| f.fire_at).collect();
    assert_eq!(got, expected);
    let runs: Vec<_> = all.iter().filter(|f| f.decision.makes_task()).collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].fire_at, at("2026-05-01T12:00:00Z"));
    assert_eq!(s.next_fire_at, Some(at("2026-05-01T12:00:01Z")));
}

#[test]
fn a_berlin_daily_0230_down_over_the_spring_change_runs_once() {
    let s = Schedule {
        schedule_id: ID,
        timing: Timing::cron("30 2 * * *", "Europe/Berlin").unwrap(),
        policy: Policy::default(),
        paused: false,
        next_fire_at: Some(at("2026-03-28T01:30:00Z")),
    };
    let d = decide(&s, &Seen::default(), at("2026-03-30T00:30:10Z"), GRACE);
    assert_eq!(
        decided(&d),
        pairs(&[("01:30:00", "skipped_missed"), ("00:30:00", "enqueued")])
    );
    assert_eq!(d.fires[1].fire_at, at("2026-03-30T00:30:00Z"));
    assert_eq!(d.next_fire_at, Some(at("2026-03-31T00:30:00Z")));
}

#[test]
fn decisions_and_policies_use_the_contract_names() {
    let names: Vec<&str> = Decision::ALL.iter().map(Decision::as_str).collect();
    assert_eq!(
        names,
        [
            "enqueued",
            "triggered",
            "skipped_overlap",
            "skipped_missed",
            "buffered",
            "capped"
        ]
    );
    for decision in Decision::ALL {
        assert_eq!(serde_json::to_value(decision).unwrap(), decision.as_str());
        assert_eq!(Decision::parse(decision.as_str()), Some(decision));
    }
    assert_eq!(Decision::parse("Enqueued"), None);
    let parsed = Policy::from_row("buffer_one", "all", 60, Some(24)).unwrap();
    assert_eq!(parsed.overlap, Overlap::BufferOne);
    assert_eq!(parsed.catch_up, CatchUp::All);
    assert_eq!(
        Policy::from_row("skip", "latest", 3600, None).unwrap(),
        Policy::default()
    );
    assert_eq!(
        Policy::from_row("queue", "all", 0, None),
        Err(PolicyError::Overlap("queue".into()))
    );
    assert_eq!(
        Policy::from_row("skip", "some", 0, None),
        Err(PolicyError::CatchUp("some".into()))
    );
    assert_eq!(
        Policy::from_row("skip", "all", -1, None),
        Err(PolicyError::Window(-1))
    );
    assert_eq!(
        Policy::from_row("skip", "all", 1, Some(0)),
        Err(PolicyError::MaxFires(0))
    );
    let text = PolicyError::Overlap("queue".into()).to_string();
    assert!(text.contains("skip, buffer_one or allow"), "{text}");
}
