//! Time partitions of the trace tables (issue 29): the pure decisions behind their upkeep.
//!
//! `recursions`, `tool_calls`, `llm_calls`, `llm_request_parts` and `events` are partitioned
//! by range of `task_created_at`, the creation time of the task a row belongs to, so every
//! row of a task lives in the partition of its task's creation, however long the task runs.
//! Given the clock, this module decides which ranges need a partition (the current one, the
//! next `ahead`, and any range whose rows sit in the default partition), what a partition is
//! called, and which ranges a prune may drop whole. The store carries the decisions out
//! (`store::partitions`); nothing here reads a clock or a database.

use chrono::{DateTime, TimeDelta, Utc};

#[cfg(test)]
mod tests;

/// How long after its range ends a partition may be dropped at the earliest: a task's
/// `created_at` can come from a worker's clock (the time its message arrived), so a worker
/// whose clock is behind may still record a task in a range that just ended.
pub const DROP_GRACE: TimeDelta = TimeDelta::hours(1);

/// The shortest partition interval: finer partitions would multiply the partitions every
/// query by task_id alone plans over, for no retention gain.
const MIN_INTERVAL: TimeDelta = TimeDelta::hours(1);

const DAY_SECS: i64 = 86_400;

/// A half-open range of task creation times `[from, to)`: one partition's bounds.
/// `DateTime::<Utc>::MIN_UTC` / `MAX_UTC` stand for PostgreSQL's MINVALUE / MAXVALUE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Range {
    /// Whether `at` falls in the range.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.to
    }

    /// Whether the two ranges share an instant.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.from < other.to && other.from < self.to
    }

    /// What is left of `self` once every range of `taken` is cut out, in order.
    fn minus(self, taken: &[Range]) -> Vec<Range> {
        let mut pieces = vec![self];
        for cut in taken {
            pieces = pieces
                .into_iter()
                .flat_map(|piece| {
                    if !piece.overlaps(cut) {
                        return vec![piece];
                    }
                    let left = (piece.from < cut.from).then_some(Range {
                        from: piece.from,
                        to: cut.from,
                    });
                    let right = (cut.to < piece.to).then_some(Range {
                        from: cut.to,
                        to: piece.to,
                    });
                    left.into_iter().chain(right).collect()
                })
                .collect();
        }
        pieces
    }
}

/// How the trace tables are cut: one partition per `interval` of task creation time,
/// aligned on the Unix epoch (so daily partitions start at 00:00 UTC), made `ahead`
/// intervals before they are needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    interval: TimeDelta,
    ahead: u32,
}

impl Layout {
    /// A layout of `interval` (a whole number of hours that divides a day, or whole days)
    /// with `ahead` partitions made before they are needed (at least 1).
    pub fn new(interval: TimeDelta, ahead: u32) -> Result<Self, String> {
        let secs = interval.num_seconds();
        let whole_hours = interval >= MIN_INTERVAL && secs % 3600 == 0;
        if !whole_hours || (DAY_SECS % secs != 0 && secs % DAY_SECS != 0) {
            return Err(format!(
                "a partition interval must be whole hours that divide a day (1h, 2h, 3h, 4h, \
                 6h, 8h, 12h) or whole days or weeks (1d, 7d, 1w); got {secs} s"
            ));
        }
        if ahead == 0 {
            return Err("at least one partition must be made ahead".to_owned());
        }
        Ok(Self { interval, ahead })
    }

    /// Parses `interval` as `6h`, `1d` or `1w` (a whole number and one unit).
    pub fn parse(interval: &str, ahead: u32) -> Result<Self, String> {
        let text = interval.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("'{text}' has no unit (use h, d or w, e.g. 1d)"))?;
        let (number, unit) = text.split_at(split);
        let amount: i64 = number
            .parse()
            .map_err(|_| format!("'{text}' does not start with a whole number"))?;
        let interval = match unit {
            "h" => TimeDelta::try_hours(amount),
            "d" => TimeDelta::try_days(amount),
            "w" => TimeDelta::try_weeks(amount),
            _ => return Err(format!("'{text}': unknown unit '{unit}' (use h, d or w)")),
        }
        .ok_or_else(|| format!("'{text}' is too long"))?;
        Self::new(interval, ahead)
    }

    /// The interval of one partition.
    pub fn interval(&self) -> TimeDelta {
        self.interval
    }

    /// How many partitions are made ahead of the current one.
    pub fn ahead(&self) -> u32 {
        self.ahead
    }

    /// The partition range `at` falls in (None at the ends of time).
    pub fn slot(&self, at: DateTime<Utc>) -> Option<Range> {
        let step = self.interval.num_seconds();
        let start = at.timestamp().div_euclid(step).checked_mul(step)?;
        let from = DateTime::from_timestamp(start, 0)?;
        let to = from.checked_add_signed(self.interval)?;
        Some(Range { from, to })
    }

    /// The ranges to make partitions for at `now`: the current slot and the next `ahead`,
    /// and the slot of each row waiting in the default partition (`strays`), less what the
    /// `existing` partitions cover (a slot partly covered, after an interval change, gets
    /// the uncovered pieces). Sorted, without duplicates.
    pub fn to_create(
        &self,
        now: DateTime<Utc>,
        existing: &[Range],
        strays: &[DateTime<Utc>],
    ) -> Vec<Range> {
        let upcoming = (0..=self.ahead).filter_map(|n| {
            let shift = self.interval.checked_mul(i32::try_from(n).ok()?)?;
            self.slot(now.checked_add_signed(shift)?)
        });
        let wanted = upcoming.chain(strays.iter().filter_map(|at| self.slot(*at)));
        Self::uncovered(wanted, existing)
    }

    /// The ranges to make so that every creation time from `from` to `to` has a partition
    /// (rows loaded into the past, such as the benchmark's preload), less what exists.
    pub fn to_cover(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        existing: &[Range],
    ) -> Vec<Range> {
        let slots = std::iter::successors(self.slot(from), |slot| {
            (slot.to <= to).then(|| self.slot(slot.to)).flatten()
        });
        Self::uncovered(slots, existing)
    }

    fn uncovered(wanted: impl Iterator<Item = Range>, existing: &[Range]) -> Vec<Range> {
        let mut pieces: Vec<Range> = wanted.flat_map(|slot| slot.minus(existing)).collect();
        pieces.sort();
        pieces.dedup();
        pieces
    }
}

/// The name of `table`'s partition for `range`: `events_p20261127` for a range starting at
/// midnight UTC, `events_p20261127_060000` otherwise.
pub fn partition_name(table: &str, range: &Range) -> String {
    let from = range.from;
    if from.timestamp().rem_euclid(DAY_SECS) == 0 {
        format!("{table}_p{}", from.format("%Y%m%d"))
    } else {
        format!("{table}_p{}", from.format("%Y%m%d_%H%M%S"))
    }
}

/// The name of `table`'s default partition (rows no range partition takes).
pub fn default_partition_name(table: &str) -> String {
    format!("{table}_default")
}

/// A partition that a prune might drop, with whether a task created in its range holds it:
/// one that has not ended, or that the prune does not select (status, age).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub range: Range,
    pub held: bool,
}

/// Ranges ending at or before this may be dropped by a prune of tasks that ended before
/// `cutoff`: a range must be past the prune's age and closed for new tasks.
pub fn drop_limit(now: DateTime<Utc>, cutoff: DateTime<Utc>) -> DateTime<Utc> {
    let closed = now.checked_sub_signed(DROP_GRACE).unwrap_or(now);
    cutoff.min(closed)
}

/// The ranges a prune drops whole: every task created in them is ended and selected by the
/// prune (no task holds them), and they ended by [`drop_limit`]. The prune deletes the
/// selected tasks of every other range row by row, as before partitions; a range that a task
/// still holds is dropped by a later prune, once that task has ended and aged too.
pub fn to_drop(candidates: &[Candidate], now: DateTime<Utc>, cutoff: DateTime<Utc>) -> Vec<Range> {
    let limit = drop_limit(now, cutoff);
    let mut ranges: Vec<Range> = candidates
        .iter()
        .filter(|c| !c.held && c.range.to <= limit)
        .map(|c| c.range)
        .collect();
    ranges.sort();
    ranges.dedup();
    ranges
}
