//! What a run costs PostgreSQL beyond CPU: transactions committed, rows written and WAL
//! bytes, read from the bench database's own statistics (`pg_stat_database` counts only
//! this database) and the server's WAL position (cluster-wide: run on a quiet server).
//! Read before the load and again after the workers have stopped, when every backend has
//! flushed its statistics.

use anyhow::Context as _;
use serde_json::{Value, json};
use sqlx::PgPool;

/// A reading of the counters.
#[derive(Debug, Clone, Copy)]
pub struct DbCounters {
    commits: i64,
    inserted: i64,
    updated: i64,
    deleted: i64,
    wal_lsn_bytes: f64,
    database_bytes: i64,
}

impl DbCounters {
    /// Reads them now. Clears this backend's statistics snapshot first, so two readings in
    /// one session are not the same cached one.
    pub async fn read(pool: &PgPool) -> anyhow::Result<Self> {
        let mut conn = pool
            .acquire()
            .await
            .context("a connection for statistics")?;
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut *conn)
            .await
            .context("clearing the statistics snapshot")?;
        let row: (i64, i64, i64, i64, f64, i64) = sqlx::query_as(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, \
                    (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8, \
                    pg_database_size(current_database()) \
             FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&mut *conn)
        .await
        .context("reading pg_stat_database")?;
        Ok(Self {
            commits: row.0,
            inserted: row.1,
            updated: row.2,
            deleted: row.3,
            wal_lsn_bytes: row.4,
            database_bytes: row.5,
        })
    }

    /// Waits until the backends of the stopped workers have flushed their statistics: two
    /// readings a few hundred milliseconds apart that agree (at most ten seconds).
    pub async fn settled(pool: &PgPool) -> anyhow::Result<Self> {
        let mut last = Self::read(pool).await?;
        for _ in 0..20 {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let now = Self::read(pool).await?;
            if now.commits == last.commits && now.inserted == last.inserted {
                return Ok(now);
            }
            last = now;
        }
        Ok(last)
    }

    /// The figures per recursion from `before` to `self`.
    pub fn per_recursion(&self, before: &Self, recursions: u64) -> Value {
        let per = |after: f64, before: f64| {
            let value = (after - before) / (recursions.max(1) as f64);
            (value * 100.0).round() / 100.0
        };
        let count = |after: i64, before: i64| per(after as f64, before as f64);
        json!({
            "commits": count(self.commits, before.commits),
            "rows_inserted": count(self.inserted, before.inserted),
            "rows_updated": count(self.updated, before.updated),
            "rows_deleted": count(self.deleted, before.deleted),
            "wal_bytes": per(self.wal_lsn_bytes, before.wal_lsn_bytes),
            "database_bytes": count(self.database_bytes, before.database_bytes),
        })
    }
}
