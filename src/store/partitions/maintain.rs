//! Making partitions before they are needed: the current range and the next `ahead` of every
//! trace table, a default partition when there is none, and a partition of its own for rows
//! that landed in the default one (a task recorded with a creation time no partition
//! covered: a worker down for days, a clock far off, rows loaded by hand). [`keep`] repeats
//! it in every worker; the advisory lock makes concurrent runs take turns, and each finds
//! the work of the one before done.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use super::{Partition, TRACE_TABLES, for_values, list, lock};
use crate::core::partitions::{Layout, Range, default_partition_name, partition_name};

/// The most distinct ranges of default-partition rows rescued per table in one run.
const MAX_STRAY_SLOTS: i64 = 1000;

/// Makes what `layout` wants at `now` for every trace table, one transaction per table.
/// Returns the names of the partitions made.
pub async fn maintain(
    pool: &PgPool,
    layout: &Layout,
    now: DateTime<Utc>,
) -> sqlx::Result<Vec<String>> {
    make(pool, layout, Wanted::Upcoming(now)).await
}

/// Makes the partitions that every creation time from `from` to `to` needs (for rows
/// written into the past: the benchmark's preload), one transaction per table.
pub async fn cover(
    pool: &PgPool,
    layout: &Layout,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<String>> {
    make(pool, layout, Wanted::Span(from, to)).await
}

/// What a run makes partitions for.
#[derive(Clone, Copy)]
enum Wanted {
    /// The current range and those ahead, and the ranges of rows in the default partition.
    Upcoming(DateTime<Utc>),
    /// Every range from one instant to another.
    Span(DateTime<Utc>, DateTime<Utc>),
}

async fn make(pool: &PgPool, layout: &Layout, wanted: Wanted) -> sqlx::Result<Vec<String>> {
    let mut made = Vec::new();
    for table in TRACE_TABLES {
        let mut tx = pool.begin().await?;
        lock(&mut tx).await?;
        made.extend(make_table(&mut tx, table, layout, wanted).await?);
        tx.commit().await?;
    }
    Ok(made)
}

async fn make_table(
    conn: &mut PgConnection,
    table: &str,
    layout: &Layout,
    wanted: Wanted,
) -> sqlx::Result<Vec<String>> {
    let partitions = list(conn, table).await?;
    let existing: Vec<Range> = partitions.iter().filter_map(|p| p.range).collect();
    let mut made = Vec::new();
    let default = match partitions.iter().find(|p| p.range.is_none()) {
        Some(Partition { name, .. }) => name.clone(),
        None => {
            let name = default_partition_name(table);
            sqlx::query(&format!("CREATE TABLE {name} PARTITION OF {table} DEFAULT"))
                .execute(&mut *conn)
                .await?;
            made.push(name.clone());
            name
        }
    };
    let strays = stray_slots(conn, &default, layout.interval()).await?;
    let ranges = match wanted {
        Wanted::Upcoming(now) => layout.to_create(now, &existing, &strays),
        Wanted::Span(from, to) => layout.to_cover(from, to, &existing),
    };
    for range in ranges {
        let name = partition_name(table, &range);
        let waiting = !strays.is_empty() && holds_rows(conn, &default, &range).await?;
        if waiting {
            create_with_rows(conn, table, &name, &default, &range).await?;
        } else {
            sqlx::query(&format!(
                "CREATE TABLE {name} PARTITION OF {table} {}",
                for_values(&range)
            ))
            .execute(&mut *conn)
            .await?;
        }
        made.push(name);
    }
    Ok(made)
}

/// One creation time per range of `interval` that has rows in the default partition.
async fn stray_slots(
    conn: &mut PgConnection,
    default: &str,
    interval: TimeDelta,
) -> sqlx::Result<Vec<DateTime<Utc>>> {
    sqlx::query_scalar(&format!(
        "SELECT min(task_created_at) FROM {default} \
         GROUP BY floor(extract(epoch FROM task_created_at) / $1) LIMIT $2"
    ))
    .bind(interval.num_seconds() as f64)
    .bind(MAX_STRAY_SLOTS)
    .fetch_all(conn)
    .await
}

async fn holds_rows(conn: &mut PgConnection, default: &str, range: &Range) -> sqlx::Result<bool> {
    sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {default} \
                        WHERE task_created_at >= $1 AND task_created_at < $2)"
    ))
    .bind(range.from)
    .bind(range.to)
    .fetch_one(conn)
    .await
}

/// Makes a partition for a range that has rows in the default partition: PostgreSQL refuses
/// a new partition while the default one holds rows of its range, so the default partition
/// is detached, the partition made, the rows moved into it and the default attached again,
/// in the caller's transaction.
async fn create_with_rows(
    conn: &mut PgConnection,
    table: &str,
    name: &str,
    default: &str,
    range: &Range,
) -> sqlx::Result<()> {
    sqlx::query(&format!("ALTER TABLE {table} DETACH PARTITION {default}"))
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!(
        "CREATE TABLE {name} PARTITION OF {table} {}",
        for_values(range)
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(&format!(
        "WITH moved AS (DELETE FROM {default} \
                        WHERE task_created_at >= $1 AND task_created_at < $2 RETURNING *) \
         INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM moved"
    ))
    .bind(range.from)
    .bind(range.to)
    .execute(&mut *conn)
    .await?;
    sqlx::query(&format!(
        "ALTER TABLE {table} ATTACH PARTITION {default} DEFAULT"
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Maintains the partitions at once and then every `every` until `stop` fires (a worker's
/// sidecar). A failed run (a lock not granted in time, the database away) is logged and
/// retried at the next one.
pub async fn keep(pool: PgPool, layout: Layout, every: Duration, stop: CancellationToken) {
    loop {
        let run = tokio::select! {
            () = stop.cancelled() => return,
            run = maintain(&pool, &layout, Utc::now()) => run,
        };
        match run {
            Ok(made) if !made.is_empty() => {
                tracing::info!(partitions = ?made, "made trace table partitions");
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "partition maintenance failed; retrying next time");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}
