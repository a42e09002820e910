//! The time partitions of the trace tables in PostgreSQL (issue 29): reading them from the
//! catalog, making them ahead of time ([`maintain`], repeated by [`keep`] in every worker),
//! and dropping whole ones for retention ([`retention`], called by `store::prune`). Which
//! ranges to make or drop is decided in `core::partitions`.
//!
//! Every row of `recursions`, `tool_calls`, `llm_calls`, `llm_request_parts` and `events`
//! carries `task_created_at`, its task's `tasks.created_at`, and lives in the partition of
//! that range; a default partition takes a row no range partition covers, so an insert never
//! fails, and the next maintenance moves such rows into a partition of their own. A query
//! by task_id names the key too where it can, `task_created_at = (SELECT created_at FROM
//! tasks WHERE task_id = $1)`, so that PostgreSQL reads one partition (run-time pruning).
//!
//! All partition DDL runs under one advisory lock ([`PARTITION_LOCK`]), so several workers
//! maintaining at once, or a maintenance and a prune, take turns; and with a `lock_timeout`,
//! so that a long query holding a trace table makes the DDL give up and retry later instead
//! of queueing every writer behind it.

pub mod maintain;
pub mod retention;

pub use maintain::{cover, keep, maintain};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::core::partitions::Range;

/// The partitioned tables, in the order the step statement writes them: DDL that locks
/// several takes them in this order.
pub const TRACE_TABLES: [&str; 5] = [
    "recursions",
    "tool_calls",
    "llm_calls",
    "llm_request_parts",
    "events",
];

/// The advisory lock key of partition DDL: "agentd-p" in ASCII.
pub const PARTITION_LOCK: i64 = 0x6167_656e_7464_2d70;

/// How long partition DDL waits for a table lock before it gives up until next time: a
/// partition is made days ahead, and a drop can wait for the next prune.
const DDL_LOCK_TIMEOUT: &str = "2s";

/// One partition of a trace table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// Its range; `None` for the default partition.
    pub range: Option<Range>,
}

/// Takes the partition lock for the rest of the transaction and bounds the waits for table
/// locks; timestamps are written and read in UTC.
pub(crate) async fn lock(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(
        "SELECT pg_advisory_xact_lock($1), set_config('lock_timeout', $2, true), \
                set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO', true)",
    )
    .bind(PARTITION_LOCK)
    .bind(DDL_LOCK_TIMEOUT)
    .execute(conn)
    .await?;
    Ok(())
}

/// A partition as the catalog query reads it: name, whether default, bounds (null when
/// unbounded).
type CatalogRow = (String, bool, Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// The partitions of `table` as the catalog has them (bounds read back from
/// `pg_get_expr(relpartbound)`, whose literals carry their offset).
pub async fn list(conn: &mut PgConnection, table: &str) -> sqlx::Result<Vec<Partition>> {
    let rows: Vec<CatalogRow> = sqlx::query_as(
        "SELECT c.relname::text, b.bound = 'DEFAULT', \
                    NULLIF(trim(BOTH '''' FROM (regexp_match(b.bound, 'FROM \\((.*?)\\) TO'))[1]), \
                           'MINVALUE')::timestamptz, \
                    NULLIF(trim(BOTH '''' FROM (regexp_match(b.bound, 'TO \\((.*?)\\)$'))[1]), \
                           'MAXVALUE')::timestamptz \
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b \
             WHERE i.inhparent = to_regclass($1) \
             ORDER BY 3 NULLS FIRST",
    )
    .bind(table)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(name, is_default, from, to)| Partition {
            name,
            range: (!is_default).then(|| Range {
                from: from.unwrap_or(DateTime::<Utc>::MIN_UTC),
                to: to.unwrap_or(DateTime::<Utc>::MAX_UTC),
            }),
        })
        .collect())
}

/// A range bound as a query parameter: `None` for an unbounded end.
pub(crate) fn sql_bound(at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (at != DateTime::<Utc>::MIN_UTC && at != DateTime::<Utc>::MAX_UTC).then_some(at)
}

/// A bound as DDL takes it: an RFC 3339 UTC literal, or MINVALUE / MAXVALUE.
fn bound(at: DateTime<Utc>) -> String {
    if at == DateTime::<Utc>::MIN_UTC {
        "MINVALUE".to_owned()
    } else if at == DateTime::<Utc>::MAX_UTC {
        "MAXVALUE".to_owned()
    } else {
        format!("'{}'", at.format("%Y-%m-%dT%H:%M:%SZ"))
    }
}

/// `FOR VALUES FROM (..) TO (..)` of a range.
fn for_values(range: &Range) -> String {
    format!(
        "FOR VALUES FROM ({}) TO ({})",
        bound(range.from),
        bound(range.to)
    )
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn bounds_are_utc_literals_or_unbounded() {
        let from = Utc.with_ymd_and_hms(2026, 11, 27, 0, 0, 0).unwrap();
        let range = Range {
            from,
            to: DateTime::<Utc>::MAX_UTC,
        };
        assert_eq!(
            for_values(&range),
            "FOR VALUES FROM ('2026-11-27T00:00:00Z') TO (MAXVALUE)"
        );
        assert_eq!(bound(DateTime::<Utc>::MIN_UTC), "MINVALUE");
    }
}
