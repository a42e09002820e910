//! Retention: removes tasks that ended long ago together with their whole trace (recursions,
//! tool_calls, llm_calls, events). Only ended tasks (completed, failed, cancelled, rejected)
//! whose `finished_at` is older than the cutoff are touched, never pending or running ones.
//! First, every time range of the partitioned trace tables whose tasks are all selected is
//! dropped whole (`store::partitions::retention`); the selected tasks of other ranges then
//! go in batches, one short transaction each, taking rows with `FOR UPDATE SKIP LOCKED` so
//! that concurrent prunes (several workers) share the work instead of waiting.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::partitions;
use super::partitions::retention::{Dropped, Selection};
use super::tasks::status;

/// The statuses of ended tasks: the only ones a prune may remove.
pub const ENDED_STATUSES: [&str; 4] = [
    status::COMPLETED,
    status::FAILED,
    status::CANCELLED,
    status::REJECTED,
];

/// The tables a task's trace lives in, children first. `llm_request_parts` holds the parts
/// of the recorded requests (CONTRACT §12); its rows are not counted.
const TRACE_TABLES: [&str; 5] = [
    "events",
    "llm_request_parts",
    "llm_calls",
    "tool_calls",
    "recursions",
];

/// Parses an age such as `30d`, `12h`, `90m`, `45s` or `2w` (a whole number and one unit).
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit (use s, m, h, d or w, e.g. 30d)"))?;
    let (number, unit) = text.split_at(split);
    let amount: i64 = number
        .parse()
        .map_err(|_| format!("'{text}' does not start with a whole number"))?;
    let age = match unit {
        "s" => Duration::try_seconds(amount),
        "m" => Duration::try_minutes(amount),
        "h" => Duration::try_hours(amount),
        "d" => Duration::try_days(amount),
        "w" => Duration::try_weeks(amount),
        _ => {
            return Err(format!(
                "'{text}': unknown unit '{unit}' (use s, m, h, d or w)"
            ));
        }
    };
    age.filter(|age| *age > Duration::zero())
        .ok_or_else(|| format!("'{text}' must be a positive age"))
}

/// Checks that `statuses` is a non-empty list of ended statuses.
pub fn check_statuses(statuses: &[String]) -> Result<(), String> {
    if statuses.is_empty() {
        return Err("no status given".to_owned());
    }
    match statuses
        .iter()
        .find(|s| !ENDED_STATUSES.contains(&s.as_str()))
    {
        Some(bad) => Err(format!(
            "'{bad}' is not an ended status (allowed: {})",
            ENDED_STATUSES.join(", ")
        )),
        None => Ok(()),
    }
}

/// What to remove.
#[derive(Debug, Clone)]
pub struct PruneRequest {
    /// Tasks that finished before this instant.
    pub finished_before: DateTime<Utc>,
    /// With one of these (ended) statuses.
    pub statuses: Vec<String>,
    /// Tasks per transaction.
    pub batch_size: u32,
    /// The clock of the prune: a partition is dropped whole only once its range has closed
    /// (`core::partitions::drop_limit`).
    pub now: DateTime<Utc>,
}

impl PruneRequest {
    /// What retention by partition selects.
    fn selection(&self) -> Selection<'_> {
        Selection {
            statuses: &self.statuses,
            finished_before: self.finished_before,
            now: self.now,
        }
    }

    /// A request for tasks that ended more than `older_than` ago.
    pub fn older_than(older_than: Duration, statuses: Vec<String>, batch_size: u32) -> Self {
        let now = Utc::now();
        Self {
            finished_before: now - older_than,
            statuses,
            batch_size: batch_size.max(1),
            now,
        }
    }
}

/// Rows removed (or, for a dry run, that would be removed), per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PruneCounts {
    pub tasks: u64,
    pub recursions: u64,
    pub tool_calls: u64,
    pub llm_calls: u64,
    pub events: u64,
    /// Time ranges whose partitions were dropped whole (their rows are counted above).
    pub partitions: u64,
}

impl PruneCounts {
    /// `(table, rows)` in a stable order, for printing.
    pub fn rows(&self) -> [(&'static str, u64); 5] {
        [
            ("tasks", self.tasks),
            ("recursions", self.recursions),
            ("tool_calls", self.tool_calls),
            ("llm_calls", self.llm_calls),
            ("events", self.events),
        ]
    }

    /// The counts of the ranges dropped whole.
    fn of_dropped(dropped: &Dropped) -> Self {
        let mut counts = PruneCounts {
            tasks: dropped.tasks,
            partitions: u64::try_from(dropped.ranges.len()).unwrap_or(u64::MAX),
            ..PruneCounts::default()
        };
        for (table, rows) in &dropped.rows {
            counts.set(table, *rows);
        }
        counts
    }

    fn add(&mut self, other: &PruneCounts) {
        self.tasks += other.tasks;
        self.recursions += other.recursions;
        self.tool_calls += other.tool_calls;
        self.llm_calls += other.llm_calls;
        self.events += other.events;
        self.partitions += other.partitions;
    }

    fn set(&mut self, table: &str, rows: u64) {
        match table {
            "recursions" => self.recursions = rows,
            "tool_calls" => self.tool_calls = rows,
            "llm_calls" => self.llm_calls = rows,
            "events" => self.events = rows,
            "llm_request_parts" => {}
            _ => self.tasks = rows,
        }
    }
}

/// The ended tasks a request selects (the status check is repeated in SQL on purpose).
const SELECT_DOOMED: &str = "SELECT task_id, created_at FROM tasks \
     WHERE status = ANY($1) \
       AND status IN ('completed', 'failed', 'cancelled', 'rejected') \
       AND finished_at < $2";

/// Removes what `request` selects, whole partitions first, then batch after batch, and
/// returns the rows removed.
pub async fn prune(pool: &PgPool, request: &PruneRequest) -> sqlx::Result<PruneCounts> {
    let dropped = partitions::retention::drop_whole(pool, request.selection()).await?;
    let mut total = PruneCounts::of_dropped(&dropped);
    loop {
        let batch = prune_batch(pool, request).await?;
        total.add(&batch);
        if batch.tasks < u64::from(request.batch_size) {
            return Ok(total);
        }
    }
}

/// One transaction: takes up to `batch_size` selected tasks and deletes their rows.
async fn prune_batch(pool: &PgPool, request: &PruneRequest) -> sqlx::Result<PruneCounts> {
    let mut tx = pool.begin().await?;
    let doomed: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(&format!(
        "{SELECT_DOOMED} ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED"
    ))
    .bind(&request.statuses)
    .bind(request.finished_before)
    .bind(i64::from(request.batch_size))
    .fetch_all(&mut *tx)
    .await?;
    let mut counts = PruneCounts::default();
    let (Some(first), Some(last)) = (
        doomed.iter().map(|d| d.1).min(),
        doomed.iter().map(|d| d.1).max(),
    ) else {
        return Ok(counts);
    };
    let ids: Vec<Uuid> = doomed.iter().map(|d| d.0).collect();
    for table in TRACE_TABLES {
        // The batch's creation times name the partitions to visit.
        let rows = sqlx::query(&format!(
            "DELETE FROM {table} WHERE task_id = ANY($1) \
                                   AND task_created_at BETWEEN $2 AND $3"
        ))
        .bind(&ids)
        .bind(first)
        .bind(last)
        .execute(&mut *tx)
        .await?;
        counts.set(table, rows.rows_affected());
    }
    let tasks = sqlx::query("DELETE FROM tasks WHERE task_id = ANY($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    counts.tasks = tasks.rows_affected();
    tx.commit().await?;
    Ok(counts)
}

/// Counts what [`prune`] would remove, removing nothing (`--dry-run`).
pub async fn preview(pool: &PgPool, request: &PruneRequest) -> sqlx::Result<PruneCounts> {
    let dropped = partitions::retention::preview(pool, request.selection()).await?;
    let mut counts = PruneCounts::of_dropped(&dropped);
    // The selected tasks outside the ranges dropped whole go row by row.
    let ranges = &dropped.ranges;
    let los: Vec<_> = ranges
        .iter()
        .map(|r| partitions::sql_bound(r.from))
        .collect();
    let his: Vec<_> = ranges.iter().map(|r| partitions::sql_bound(r.to)).collect();
    let rest = format!(
        "SELECT task_id FROM ({SELECT_DOOMED}) d WHERE NOT EXISTS ( \
             SELECT 1 FROM UNNEST($3::timestamptz[], $4::timestamptz[]) r (lo, hi) \
             WHERE (r.lo IS NULL OR d.created_at >= r.lo) \
               AND (r.hi IS NULL OR d.created_at < r.hi))"
    );
    let tasks: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM ({rest}) rest"))
        .bind(&request.statuses)
        .bind(request.finished_before)
        .bind(&los)
        .bind(&his)
        .fetch_one(pool)
        .await?;
    counts.tasks += u64::try_from(tasks).unwrap_or(0);
    let mut rows = PruneCounts::default();
    for table in TRACE_TABLES {
        let count: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} WHERE task_id IN ({rest})"
        ))
        .bind(&request.statuses)
        .bind(request.finished_before)
        .bind(&los)
        .bind(&his)
        .fetch_one(pool)
        .await?;
        rows.set(table, u64::try_from(count).unwrap_or(0));
    }
    counts.add(&rows);
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_have_one_unit() {
        assert_eq!(parse_age("30d"), Ok(Duration::days(30)));
        assert_eq!(parse_age(" 12h "), Ok(Duration::hours(12)));
        assert_eq!(parse_age("90m"), Ok(Duration::minutes(90)));
        assert_eq!(parse_age("45s"), Ok(Duration::seconds(45)));
        assert_eq!(parse_age("2w"), Ok(Duration::weeks(2)));
        for bad in [
            "",
            "30",
            "d",
            "0d",
            "-1d",
            "1.5d",
            "30 days",
            "1y",
            "99999999999999999w",
        ] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_ended_statuses_may_be_pruned() {
        let list = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert!(check_statuses(&list(&["completed", "rejected"])).is_ok());
        assert!(check_statuses(&list(&[])).is_err());
        let error = check_statuses(&list(&["completed", "running"])).unwrap_err();
        assert!(error.contains("'running'"), "{error}");
        assert!(check_statuses(&list(&["pending"])).is_err());
    }

    #[test]
    fn counts_add_up_and_print_in_order() {
        let mut total = PruneCounts::default();
        let mut batch = PruneCounts::default();
        for (i, table) in ["tasks", "recursions", "tool_calls", "llm_calls", "events"]
            .into_iter()
            .enumerate()
        {
            batch.set(table, i as u64 + 1);
        }
        total.add(&batch);
        total.add(&batch);
        let rows = total.rows();
        assert_eq!(rows[0], ("tasks", 2));
        assert_eq!(rows[4], ("events", 10));
    }
}
