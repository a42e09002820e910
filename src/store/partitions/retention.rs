//! Retention by partition: the part of `agentd prune` that drops whole partitions. A range
//! whose every task is ended and selected by the prune (status, finished before the
//! cutoff), and which closed before the cutoff (`core::partitions::to_drop`), loses its
//! tasks rows and the partitions of every trace table at once, in one transaction; what a
//! prune selects elsewhere is deleted row by row as before (`store::prune`). A task that ran
//! across a boundary has all its rows in its creation range, so it goes whole either way.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::{TRACE_TABLES, list, lock, sql_bound};
use crate::core::partitions::{Candidate, Range, drop_limit, to_drop};

/// PostgreSQL's SQLSTATE for "lock not available" (a `lock_timeout` expired).
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The tasks a prune selects, and its clock.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// Ended statuses.
    pub statuses: &'a [String],
    pub finished_before: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// What dropping whole ranges removed, or would remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dropped {
    /// The ranges dropped whole.
    pub ranges: Vec<Range>,
    /// Their `tasks` rows.
    pub tasks: u64,
    /// Rows per trace table (the request parts are not counted).
    pub rows: BTreeMap<&'static str, u64>,
}

impl Dropped {
    fn add(&mut self, other: Dropped) {
        self.ranges.extend(other.ranges);
        self.tasks += other.tasks;
        for (table, rows) in other.rows {
            *self.rows.entry(table).or_default() += rows;
        }
    }
}

/// The partitions of one range across the trace tables: `(table, partition)`.
#[derive(Debug, Clone)]
struct Whole {
    range: Range,
    parts: Vec<(&'static str, String)>,
}

/// Tasks created in the range (`$1`, `$2`: its bounds, null when unbounded).
const IN_RANGE: &str = "($1::timestamptz IS NULL OR created_at >= $1) \
     AND ($2::timestamptz IS NULL OR created_at < $2)";

/// A task the prune selects (`$3` statuses, `$4` finished before); the ended statuses are
/// repeated on purpose, as in `store::prune`.
const SELECTED: &str = "status = ANY($3) \
     AND status IN ('completed', 'failed', 'cancelled', 'rejected') \
     AND finished_at IS NOT NULL AND finished_at < $4";

/// Whether a task created in `range` keeps it: not ended, or not selected.
async fn held(
    conn: &mut PgConnection,
    range: &Range,
    selection: Selection<'_>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE {IN_RANGE} AND NOT ({SELECTED}))"
    ))
    .bind(sql_bound(range.from))
    .bind(sql_bound(range.to))
    .bind(selection.statuses)
    .bind(selection.finished_before)
    .fetch_one(conn)
    .await
}

/// The ranges `selection` may drop whole, each with its partitions.
async fn doomed(pool: &PgPool, selection: Selection<'_>) -> sqlx::Result<Vec<Whole>> {
    let mut conn = pool.acquire().await?;
    let mut by_range: BTreeMap<Range, Vec<(&'static str, String)>> = BTreeMap::new();
    for table in TRACE_TABLES {
        for partition in list(&mut conn, table).await? {
            if let Some(range) = partition.range {
                by_range
                    .entry(range)
                    .or_default()
                    .push((table, partition.name));
            }
        }
    }
    let limit = drop_limit(selection.now, selection.finished_before);
    let old: Vec<Range> = by_range.keys().copied().filter(|r| r.to <= limit).collect();
    let mut candidates = Vec::new();
    for range in old {
        let held = held(&mut conn, &range, selection).await?;
        candidates.push(Candidate { range, held });
    }
    let ranges = to_drop(&candidates, selection.now, selection.finished_before);
    Ok(ranges
        .into_iter()
        .filter_map(|range| {
            let parts = by_range.remove(&range)?;
            Some(Whole { range, parts })
        })
        .collect())
}

/// The rows of a range's partitions and its tasks.
async fn count(pool: &PgPool, whole: &Whole) -> sqlx::Result<Dropped> {
    let mut counts = Dropped {
        ranges: vec![whole.range],
        ..Dropped::default()
    };
    for (table, name) in &whole.parts {
        if *table == "llm_request_parts" {
            continue;
        }
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {name}"))
            .fetch_one(pool)
            .await?;
        counts.rows.insert(table, u64::try_from(rows).unwrap_or(0));
    }
    let tasks: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM tasks WHERE {IN_RANGE}"))
        .bind(sql_bound(whole.range.from))
        .bind(sql_bound(whole.range.to))
        .fetch_one(pool)
        .await?;
    counts.tasks = u64::try_from(tasks).unwrap_or(0);
    Ok(counts)
}

/// What dropping the ranges `selection` may drop whole would remove (`--dry-run`).
pub async fn preview(pool: &PgPool, selection: Selection<'_>) -> sqlx::Result<Dropped> {
    let mut total = Dropped::default();
    for whole in doomed(pool, selection).await? {
        total.add(count(pool, &whole).await?);
    }
    Ok(total)
}

/// Drops the ranges `selection` may drop whole and returns what went. A range whose table
/// locks are not granted in time is left to the row-by-row prune (and, emptied, to a later
/// prune's drop).
pub async fn drop_whole(pool: &PgPool, selection: Selection<'_>) -> sqlx::Result<Dropped> {
    let mut total = Dropped::default();
    for whole in doomed(pool, selection).await? {
        match drop_range(pool, &whole, selection).await {
            Ok(Some(dropped)) => total.add(dropped),
            Ok(None) => {}
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                tracing::warn!(from = %whole.range.from, to = %whole.range.to,
                    "a trace table was busy: this range is pruned row by row this time");
            }
            Err(err) => return Err(err),
        }
    }
    Ok(total)
}

/// One range in one transaction: its tasks rows deleted, then its partitions dropped, unless
/// a task holds it now or another prune dropped it first (`None`).
async fn drop_range(
    pool: &PgPool,
    whole: &Whole,
    selection: Selection<'_>,
) -> sqlx::Result<Option<Dropped>> {
    // Counted before any lock: the rows of ended tasks no longer change.
    let mut counts = count(pool, whole).await?;
    let mut tx = pool.begin().await?;
    lock(&mut tx).await?;
    let mut present = Vec::new();
    for (table, name) in &whole.parts {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(name.as_str())
            .fetch_one(&mut *tx)
            .await?;
        if exists {
            present.push(name.as_str());
        } else {
            counts.rows.remove(table);
        }
    }
    if present.is_empty() {
        return Ok(None);
    }
    let deleted = sqlx::query(&format!(
        "DELETE FROM tasks WHERE {IN_RANGE} AND {SELECTED}"
    ))
    .bind(sql_bound(whole.range.from))
    .bind(sql_bound(whole.range.to))
    .bind(selection.statuses)
    .bind(selection.finished_before)
    .execute(&mut *tx)
    .await?;
    if held(&mut tx, &whole.range, selection).await? {
        tx.rollback().await?;
        return Ok(None);
    }
    counts.tasks = deleted.rows_affected();
    // The parents in the order writers lock them, so that no writer waits in a cycle with us.
    sqlx::query(&format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        TRACE_TABLES.join(", ")
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!("DROP TABLE {}", present.join(", ")))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(counts))
}
