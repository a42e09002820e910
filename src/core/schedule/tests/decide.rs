//! The fire decisions: on-time fires, pause, overlap, buffering and catch-up; the helpers
//! the other decision tests share.

use chrono::TimeDelta;
use uuid::Uuid;

use super::at;
use crate::core::schedule::{
    CatchUp, Decision, Decisions, Overlap, Policy, Schedule, Seen, Timing, decide, fire_task_id,
    first_next_fire_at,
};

pub(super) const ID: Uuid = Uuid::from_u128(0x0192_f5a8_7c1e_7d3a_9b2c_3f4e_5d6c_7b8a);
pub(super) const GRACE: TimeDelta = TimeDelta::seconds(30);

pub(super) fn policy(overlap: Overlap, catch_up: CatchUp) -> Policy {
    Policy {
        overlap,
        catch_up,
        ..Policy::default()
    }
}

pub(super) fn schedule(every: &str, policy: Policy, next_fire_at: &str) -> Schedule {
    Schedule {
        schedule_id: ID,
        timing: Timing::every(every).expect("a valid interval"),
        policy,
        paused: false,
        next_fire_at: Some(at(next_fire_at)),
    }
}

pub(super) fn running() -> Seen {
    Seen {
        previous_running: true,
        ..Seen::default()
    }
}

/// `(HH:MM:SS of the fire, decision)` for each fire, checking each task id on the way.
pub(super) fn decided(decisions: &Decisions) -> Vec<(String, &'static str)> {
    decisions
        .fires
        .iter()
        .map(|fire| {
            let expected = fire
                .decision
                .makes_task()
                .then(|| fire_task_id(ID, fire.fire_at));
            assert_eq!(fire.task_id, expected, "{fire:?}");
            (
                fire.fire_at.format("%H:%M:%S").to_string(),
                fire.decision.as_str(),
            )
        })
        .collect()
}

pub(super) fn pairs(expected: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
    expected.iter().map(|(t, d)| (t.to_string(), *d)).collect()
}

#[test]
fn an_on_time_fire_is_enqueued_and_the_next_one_stored() {
    let s = schedule("1m", Policy::default(), "2026-05-01T12:00:00Z");
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:00:01Z"), GRACE);
    assert_eq!(decided(&d), pairs(&[("12:00:00", "enqueued")]));
    assert_eq!(d.next_fire_at, Some(at("2026-05-01T12:01:00Z")));
    assert!(!d.more_due);
    // Before it is due: nothing, and next_fire_at unchanged.
    let d = decide(&s, &Seen::default(), at("2026-05-01T11:59:59Z"), GRACE);
    assert!(d.fires.is_empty());
    assert_eq!(d.next_fire_at, Some(at("2026-05-01T12:00:00Z")));
}

#[test]
fn a_new_or_resumed_schedule_starts_from_its_next_fire_after_now() {
    let mut s = schedule("1h", Policy::default(), "2026-05-01T00:00:00Z");
    s.next_fire_at = None;
    let now = at("2026-05-01T12:34:56Z");
    let d = decide(&s, &Seen::default(), now, GRACE);
    assert!(d.fires.is_empty());
    assert_eq!(d.next_fire_at, Some(at("2026-05-01T13:00:00Z")));
    assert_eq!(first_next_fire_at(&s.timing, now), d.next_fire_at);
}

#[test]
fn a_paused_schedule_decides_nothing_and_releases_nothing() {
    let mut s = schedule(
        "1m",
        policy(Overlap::BufferOne, CatchUp::All),
        "2026-05-01T12:00:00Z",
    );
    s.paused = true;
    let seen = Seen {
        buffered: Some(at("2026-05-01T11:59:00Z")),
        ..Seen::default()
    };
    let d = decide(&s, &seen, at("2026-05-01T13:00:00Z"), GRACE);
    assert_eq!(
        d,
        Decisions {
            fires: vec![],
            next_fire_at: None,
            more_due: false
        }
    );
}

#[test]
fn overlap_skip_and_allow_while_the_previous_task_runs() {
    let now = at("2026-05-01T12:00:05Z");
    let skip = schedule(
        "1m",
        policy(Overlap::Skip, CatchUp::Latest),
        "2026-05-01T12:00:00Z",
    );
    assert_eq!(
        decided(&decide(&skip, &running(), now, GRACE)),
        pairs(&[("12:00:00", "skipped_overlap")])
    );
    let allow = schedule(
        "1m",
        policy(Overlap::Allow, CatchUp::Latest),
        "2026-05-01T12:00:00Z",
    );
    assert_eq!(
        decided(&decide(&allow, &running(), now, GRACE)),
        pairs(&[("12:00:00", "enqueued")])
    );
}

#[test]
fn several_on_time_fires_in_one_tick_see_the_task_the_first_one_made() {
    // A tick 25 s late for a 10 s schedule: three fires, all on time.
    let now = at("2026-05-01T12:00:25Z");
    let skip = schedule(
        "10s",
        policy(Overlap::Skip, CatchUp::Latest),
        "2026-05-01T12:00:00Z",
    );
    let d = decide(&skip, &Seen::default(), now, GRACE);
    assert_eq!(
        decided(&d),
        pairs(&[
            ("12:00:00", "enqueued"),
            ("12:00:10", "skipped_overlap"),
            ("12:00:20", "skipped_overlap"),
        ])
    );
    assert_eq!(d.next_fire_at, Some(at("2026-05-01T12:00:30Z")));
    let allow = Schedule {
        policy: policy(Overlap::Allow, CatchUp::None),
        ..skip
    };
    let d = decide(&allow, &Seen::default(), now, GRACE);
    assert!(d.fires.iter().all(|f| f.decision == Decision::Enqueued));
    assert_eq!(d.fires.len(), 3);
}

#[test]
fn buffer_one_keeps_the_first_fire_until_the_previous_task_ends() {
    let buffer = policy(Overlap::BufferOne, CatchUp::Latest);
    let s = schedule("10s", buffer, "2026-05-01T12:00:00Z");
    let d = decide(&s, &running(), at("2026-05-01T12:00:15Z"), GRACE);
    assert_eq!(
        decided(&d),
        pairs(&[("12:00:00", "buffered"), ("12:00:10", "skipped_overlap")])
    );
    // Still running next tick: the buffer is full.
    let seen = Seen {
        buffered: Some(at("2026-05-01T12:00:00Z")),
        ..running()
    };
    let s = schedule("10s", buffer, "2026-05-01T12:00:20Z");
    let d = decide(&s, &seen, at("2026-05-01T12:00:21Z"), GRACE);
    assert_eq!(decided(&d), pairs(&[("12:00:20", "skipped_overlap")]));
    // The previous task ended: the buffered fire runs first, and the next due fire waits
    // for the task it made.
    let seen = Seen {
        previous_running: false,
        ..seen
    };
    let s = schedule("10s", buffer, "2026-05-01T12:00:30Z");
    let d = decide(&s, &seen, at("2026-05-01T12:00:31Z"), GRACE);
    assert_eq!(
        decided(&d),
        pairs(&[("12:00:00", "enqueued"), ("12:00:30", "buffered")])
    );
    // Released with nothing due.
    let s = schedule("10s", buffer, "2026-05-01T12:00:40Z");
    let d = decide(&s, &seen, at("2026-05-01T12:00:33Z"), GRACE);
    assert_eq!(decided(&d), pairs(&[("12:00:00", "enqueued")]));
    assert_eq!(d.next_fire_at, Some(at("2026-05-01T12:00:40Z")));
}

#[test]
fn latest_after_an_outage_runs_only_the_latest_fire() {
    // Down from 12:00 to 12:10:05; the 12:10 fire is on time.
    let s = schedule(
        "1m",
        policy(Overlap::Skip, CatchUp::Latest),
        "2026-05-01T12:00:00Z",
    );
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:10:05Z"), GRACE);
    let mut expected: Vec<(String, &str)> = (0..10)
        .map(|m| (format!("12:{m:02}:00"), "skipped_missed"))
        .collect();
    expected.push(("12:10:00".into(), "enqueued"));
    assert_eq!(decided(&d), expected);
    assert_eq!(d.next_fire_at, Some(at("2026-05-01T12:11:00Z")));
    // Up at 12:10:45: the latest fire was missed too, and runs within the window...
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:10:45Z"), GRACE);
    assert_eq!(
        d.fires.iter().filter(|f| f.decision.makes_task()).count(),
        1
    );
    assert_eq!(d.fires[10].decision, Decision::Enqueued);
    // ...but not outside it.
    let mut narrow = s.clone();
    narrow.policy.catch_up_window_secs = 40;
    let d = decide(&narrow, &Seen::default(), at("2026-05-01T12:10:45Z"), GRACE);
    assert!(
        d.fires
            .iter()
            .all(|f| f.decision == Decision::SkippedMissed)
    );
    assert_eq!(d.fires.len(), 11);
}

#[test]
fn latest_after_an_outage_skips_the_on_time_fires_before_the_latest_too() {
    // Every 10 s, down for five minutes; the last three fires are within the grace, but the
    // outage still costs one run only.
    let s = schedule(
        "10s",
        policy(Overlap::Allow, CatchUp::Latest),
        "2026-05-01T12:00:00Z",
    );
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:05:25Z"), GRACE);
    assert_eq!(d.fires.len(), 33);
    let runs: Vec<_> = d.fires.iter().filter(|f| f.decision.makes_task()).collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].fire_at, at("2026-05-01T12:05:20Z"));
    // Without an outage (a late tick), every on-time fire may run.
    let s = schedule(
        "10s",
        policy(Overlap::Allow, CatchUp::Latest),
        "2026-05-01T12:05:00Z",
    );
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:05:25Z"), GRACE);
    assert!(d.fires.iter().all(|f| f.decision == Decision::Enqueued));
    assert_eq!(d.fires.len(), 3);
}

#[test]
fn none_skips_every_missed_fire_but_runs_an_on_time_one() {
    let s = schedule(
        "1m",
        policy(Overlap::Allow, CatchUp::None),
        "2026-05-01T12:00:00Z",
    );
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:10:05Z"), GRACE);
    assert_eq!(d.fires.len(), 11);
    assert!(
        d.fires[..10]
            .iter()
            .all(|f| f.decision == Decision::SkippedMissed)
    );
    assert_eq!(d.fires[10].decision, Decision::Enqueued);
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:10:45Z"), GRACE);
    assert!(
        d.fires
            .iter()
            .all(|f| f.decision == Decision::SkippedMissed)
    );
}

#[test]
fn all_runs_each_missed_fire_within_the_window() {
    let mut all = policy(Overlap::Allow, CatchUp::All);
    all.catch_up_window_secs = 300;
    let s = schedule("1m", all, "2026-05-01T12:00:00Z");
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:10:05Z"), GRACE);
    let runs: Vec<_> = d.fires.iter().map(|f| f.decision).collect();
    // 12:05:00 is 305 s old: outside the window.
    assert_eq!(runs[..6], [Decision::SkippedMissed; 6]);
    assert_eq!(runs[6..], [Decision::Enqueued; 5]);
    // With skip, the first run makes the others overlap.
    let s = Schedule {
        policy: Policy {
            overlap: Overlap::Skip,
            ..all
        },
        ..s
    };
    let d = decide(&s, &Seen::default(), at("2026-05-01T12:10:05Z"), GRACE);
    assert_eq!(d.fires[6].decision, Decision::Enqueued);
    assert!(
        d.fires[7..]
            .iter()
            .all(|f| f.decision == Decision::SkippedOverlap)
    );
}
