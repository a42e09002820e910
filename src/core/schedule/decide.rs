//! What each due fire of a schedule decides at a scheduler tick (CONTRACT §14), as a pure
//! function of the schedule's row, what the driver read and `now`.
//!
//! **Due** fires are the timing's fires from the stored `next_fire_at` up to `now`. A due
//! fire is **on time** when `now - fire_at <= on_time_grace` (the scheduler saw it
//! promptly, or within a holder's hand-over), **missed** when older (no worker ran, or the
//! scheduler stalled longer than the grace). The batch has had an **outage** when its first
//! due fire was missed.
//!
//! Catch-up decides which due fires may run (the others are `skipped_missed`):
//! - `latest`: with no outage every due fire may run; after an outage only the latest due
//!   fire runs (if it is on time or within `catch_up_window_secs`), so an outage costs one
//!   run, not one per missed fire;
//! - `none`: missed fires never run, on-time ones do;
//! - `all`: every due fire runs unless missed and older than the window.
//!
//! A fire that may run is then checked, in order: the daily cap (`capped` when the fire's
//! UTC day already counts `max_fires_per_day` fires), then overlap while the schedule's
//! previous task has not ended (`skipped_overlap`, `buffered`, or `enqueued` under
//! `allow`). A fire that makes a task is that task's start, so later fires of the same
//! tick see a task that has not ended.
//!
//! Before the due fires, a buffered fire is released (`enqueued`, same fire time and task
//! id) once the previous task has ended. A paused schedule decides nothing and has no
//! `next_fire_at`; see the module root for resume.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::Timing;
use super::fire_id::{fire_task_id, trigger_fire_at};
use super::policy::{CatchUp, Decision, Overlap, Policy};

/// The default on-time grace: a holder killed with `kill -9` is replaced within seconds,
/// and fires due meanwhile should run as on time rather than as missed.
pub const DEFAULT_ON_TIME_GRACE_SECS: u32 = 30;

/// At most about this many fires are decided per call; the rest are left for the next
/// call ([`Decisions::more_due`]). A batch only ends before a missed fire, so the next
/// batch knows it follows an outage.
pub const MAX_FIRES_PER_DECIDE: usize = 1000;

/// A schedule as its `schedules` row holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub schedule_id: Uuid,
    pub timing: Timing,
    pub policy: Policy,
    pub paused: bool,
    /// The first fire not decided yet; `None` for a new or resumed schedule (the next fire
    /// after `now` is then computed and nothing fires).
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// What the driver read about a schedule before deciding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The schedule's latest task (clock or trigger) is `pending`, `running` or `waiting`.
    pub previous_running: bool,
    /// The fire kept by `buffer_one`: the `schedule_fires` row with decision `buffered`.
    pub buffered: Option<DateTime<Utc>>,
    /// Per UTC day, the fires already recorded that count toward the cap
    /// ([`Decision::counts_toward_cap`]); days absent count 0. Only days on which a due
    /// fire may run matter: from `now - catch_up_window - grace` to `now`.
    pub fires_per_day: BTreeMap<NaiveDate, u32>,
}

/// One decided fire, to record in `schedule_fires`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fire {
    pub fire_at: DateTime<Utc>,
    pub decision: Decision,
    /// The task to create: `Some` exactly when the decision makes a task.
    pub task_id: Option<Uuid>,
}

/// What one [`decide`] call decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decisions {
    /// In fire-time order, a released buffered fire first.
    pub fires: Vec<Fire>,
    /// The schedule's new `next_fire_at`; `None` while paused or when it never fires again.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// More fires are due: commit and call again at once.
    pub more_due: bool,
}

/// Decides the schedule's due fires at `now`; see the module doc for the rules.
pub fn decide(
    schedule: &Schedule,
    seen: &Seen,
    now: DateTime<Utc>,
    on_time_grace: TimeDelta,
) -> Decisions {
    if schedule.paused {
        return Decisions {
            fires: Vec::new(),
            next_fire_at: None,
            more_due: false,
        };
    }
    let mut run = Run::new(schedule, seen);
    run.release_buffered();
    let Some(first) = schedule.next_fire_at else {
        return run.finish(first_next_fire_at(&schedule.timing, now), false);
    };
    let clock = Clock {
        now,
        grace: on_time_grace,
        window: TimeDelta::seconds(i64::from(schedule.policy.catch_up_window_secs)),
    };
    // `first` itself is due when it is a fire (fire times are whole seconds).
    let from = first
        .checked_sub_signed(TimeDelta::nanoseconds(1))
        .unwrap_or(first);
    let mut due = schedule.timing.fires(from, now).peekable();
    let outage = due.peek().is_some_and(|fire_at| clock.missed(*fire_at));
    let mut last = None;
    while let Some(fire_at) = due.next() {
        let later = due.peek().copied();
        if clock.may_run(schedule.policy.catch_up, fire_at, outage, later.is_none()) {
            run.may_run(fire_at);
        } else {
            run.push(fire_at, Decision::SkippedMissed);
        }
        last = Some(fire_at);
        if run.fires.len() >= MAX_FIRES_PER_DECIDE && later.is_some_and(|l| clock.missed(l)) {
            return run.finish(later, true);
        }
    }
    let next_fire_at = match last {
        Some(last) => schedule.timing.next_fire(last),
        None => Some(first),
    };
    run.finish(next_fire_at, false)
}

/// A manual trigger at `now`: a task right away, whatever the pause, overlap and cap (a
/// person asked for it), not counted toward the cap. Its fire time is `now` cut to the
/// millisecond; if a fire with that time is already recorded, that fire is this one.
pub fn trigger(schedule_id: Uuid, now: DateTime<Utc>) -> Fire {
    let fire_at = trigger_fire_at(now);
    Fire {
        fire_at,
        decision: Decision::Triggered,
        task_id: Some(fire_task_id(schedule_id, fire_at)),
    }
}

/// The `next_fire_at` to store when a schedule is created, resumed or its timing changed:
/// its first fire after `now` (nothing before `now` is caught up).
pub fn first_next_fire_at(timing: &Timing, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    timing.next_fire(now)
}

/// `now` and the two ages that classify a due fire.
struct Clock {
    now: DateTime<Utc>,
    grace: TimeDelta,
    window: TimeDelta,
}

impl Clock {
    fn missed(&self, fire_at: DateTime<Utc>) -> bool {
        self.now - fire_at > self.grace
    }

    /// Whether catch-up lets a due fire run; `latest_due`: no later fire is due.
    fn may_run(
        &self,
        catch_up: CatchUp,
        fire_at: DateTime<Utc>,
        outage: bool,
        latest_due: bool,
    ) -> bool {
        let in_window = !self.missed(fire_at) || self.now - fire_at <= self.window;
        match catch_up {
            CatchUp::All => in_window,
            CatchUp::None => !self.missed(fire_at),
            CatchUp::Latest => !outage || (latest_due && in_window),
        }
    }
}

/// The decisions of one call and the state they change as they are made.
struct Run<'a> {
    schedule: &'a Schedule,
    running: bool,
    buffered: Option<DateTime<Utc>>,
    fires_per_day: BTreeMap<NaiveDate, u32>,
    fires: Vec<Fire>,
}

impl<'a> Run<'a> {
    fn new(schedule: &'a Schedule, seen: &Seen) -> Self {
        Self {
            schedule,
            running: seen.previous_running,
            buffered: seen.buffered,
            fires_per_day: seen.fires_per_day.clone(),
            fires: Vec::new(),
        }
    }

    /// The buffered fire runs once the previous task has ended (it already counts).
    fn release_buffered(&mut self) {
        if !self.running
            && let Some(fire_at) = self.buffered.take()
        {
            self.push(fire_at, Decision::Enqueued);
            self.running = true;
        }
    }

    /// A fire catch-up lets run: the daily cap, then overlap.
    fn may_run(&mut self, fire_at: DateTime<Utc>) {
        let day = fire_at.date_naive();
        let counted = self.fires_per_day.get(&day).copied().unwrap_or(0);
        if self
            .schedule
            .policy
            .max_fires_per_day
            .is_some_and(|max| counted >= max)
        {
            self.push(fire_at, Decision::Capped);
            return;
        }
        let decision = match (self.schedule.policy.overlap, self.running) {
            (_, false) | (Overlap::Allow, true) => Decision::Enqueued,
            (Overlap::Skip, true) => Decision::SkippedOverlap,
            (Overlap::BufferOne, true) if self.buffered.is_none() => {
                self.buffered = Some(fire_at);
                Decision::Buffered
            }
            (Overlap::BufferOne, true) => Decision::SkippedOverlap,
        };
        if decision.counts_toward_cap() {
            *self.fires_per_day.entry(day).or_default() += 1;
        }
        self.running |= decision == Decision::Enqueued;
        self.push(fire_at, decision);
    }

    fn push(&mut self, fire_at: DateTime<Utc>, decision: Decision) {
        let task_id = decision
            .makes_task()
            .then(|| fire_task_id(self.schedule.schedule_id, fire_at));
        self.fires.push(Fire {
            fire_at,
            decision,
            task_id,
        });
    }

    fn finish(self, next_fire_at: Option<DateTime<Utc>>, more_due: bool) -> Decisions {
        Decisions {
            fires: self.fires,
            next_fire_at,
            more_due,
        }
    }
}
