//! Readers: where the queries of people and tools that only read go — the gateway's task
//! reads, lists and event history, `agentd trace`, `agentd tasks`, replay's selection, and
//! evaluation runs' selection (`lifecycle::evals`). With
//! `database.read_url` set they go to that read replica (a streaming standby of the
//! primary); without it, to the primary, as before. The worker never takes one: everything
//! it reads it must read from the primary.
//!
//! The rule is `core::read_route`; this adapter carries it out:
//!
//! - **Read-your-writes.** After a write this process made (the gateway calls
//!   [`Readers::note_write`] after every request that may write), it remembers the
//!   primary's WAL position; a read then goes to the replica only once the replica has
//!   replayed that far (one `pg_last_wal_replay_lsn()` query while it has not been seen
//!   to), else to the primary. Between processes (a task submitted by one gateway or by
//!   `agentd submit`, read by another process), [`Readers::find`] reads a row asked for by
//!   id from the primary when the replica does not have it yet.
//! - **A replica that is down** (cannot connect, database missing, refused) makes reads go
//!   to the primary until a probe, run beside them at most every
//!   `core::read_route::REPLICA_RETRY`, finds it again (no read waits for it), with one
//!   warning when it goes and one line when it is back; a query that fails on the
//!   replica for another reason (a conflict with recovery) is run again on the primary.
//!   Readers never fail because of the replica.
//!
//! [`ReadStats`] counts where reads went, for tests and diagnostics.

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::config::DatabaseSettings;
use crate::core::read_route::{self, Lsn, PrimaryReason, ReplicaView, Route};

/// How long a read waits for a replica connection before it counts the replica as down.
/// (sqlx retries a refused connection until then, so this is also what the first read
/// after a replica's loss costs.)
pub const REPLICA_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

/// The position of a write that could not be read: reads go to the primary until the
/// primary's position can be read again.
const UNKNOWN: Lsn = Lsn(u64::MAX);

/// Where readers read. Cheap to clone.
#[derive(Clone)]
pub struct Readers {
    inner: Arc<Inner>,
}

struct Inner {
    primary: PgPool,
    replica: Option<PgPool>,
    /// The primary's WAL position after this process's latest write (0: none yet).
    written: AtomicU64,
    view: Mutex<ReplicaView>,
    stats: ReadStats,
}

/// Reads served by each side; `primary` counts every read the primary served, by reason.
#[derive(Debug, Default)]
pub struct ReadStats {
    pub replica: AtomicU64,
    pub no_replica: AtomicU64,
    pub replica_down: AtomicU64,
    pub replica_behind: AtomicU64,
    pub replica_miss: AtomicU64,
    pub replica_error: AtomicU64,
}

impl ReadStats {
    fn count(&self, reason: PrimaryReason) {
        let counter = match reason {
            PrimaryReason::NoReplica => &self.no_replica,
            PrimaryReason::ReplicaDown => &self.replica_down,
            PrimaryReason::ReplicaBehind => &self.replica_behind,
            PrimaryReason::ReplicaMiss => &self.replica_miss,
            PrimaryReason::ReplicaError => &self.replica_error,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads the primary served, for any reason.
    pub fn primary(&self) -> u64 {
        [
            &self.no_replica,
            &self.replica_down,
            &self.replica_behind,
            &self.replica_miss,
            &self.replica_error,
        ]
        .iter()
        .map(|counter| counter.load(Ordering::Relaxed))
        .sum()
    }
}

impl Readers {
    /// Readers that read from the primary only.
    pub fn primary_only(primary: PgPool) -> Self {
        Self::with_replica(primary, None)
    }

    /// Readers for `database`: the replica of `database.read_url` when set (a pool of
    /// `size` connections, opened lazily: a replica that is down at start delays nothing),
    /// else the primary only. An unreadable read_url is an error that says so.
    pub fn new(primary: PgPool, database: &DatabaseSettings, size: u32) -> anyhow::Result<Self> {
        let Some(url) = database.read_url() else {
            return Ok(Self::primary_only(primary));
        };
        let options = PgConnectOptions::from_str(url).with_context(|| {
            format!(
                "database.read_url ({}) is not a PostgreSQL URL",
                crate::amqp::broker::mask_password(url)
            )
        })?;
        let replica = PgPoolOptions::new()
            .max_connections(size.max(1))
            .acquire_timeout(REPLICA_ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        Ok(Self::with_replica(primary, Some(replica)))
    }

    fn with_replica(primary: PgPool, replica: Option<PgPool>) -> Self {
        let inner = Inner {
            primary,
            replica,
            written: AtomicU64::new(0),
            view: Mutex::new(ReplicaView::default()),
            stats: ReadStats::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The primary (for writes, and for reads that must see everything).
    pub fn primary(&self) -> &PgPool {
        &self.inner.primary
    }

    /// Whether a replica is configured.
    pub fn has_replica(&self) -> bool {
        self.inner.replica.is_some()
    }

    /// Where reads went so far.
    pub fn stats(&self) -> &ReadStats {
        &self.inner.stats
    }

    /// Closes both pools.
    pub async fn close(&self) {
        if let Some(replica) = &self.inner.replica {
            replica.close().await;
        }
        self.inner.primary.close().await;
    }

    /// Remembers the primary's current WAL position as this process's latest write, so
    /// that later reads see it. Without a replica it does nothing; when the position
    /// cannot be read, reads go to the primary until one is seen (never a stale read).
    pub async fn note_write(&self) {
        if !self.has_replica() {
            return;
        }
        match current_lsn(&self.inner.primary).await {
            Ok(lsn) => self.remember(lsn),
            Err(err) => {
                tracing::warn!(error = %err, "could not read the primary's WAL position after a write; reading from the primary until it can be read");
                self.inner.written.store(UNKNOWN.0, Ordering::Release);
            }
        }
    }

    /// Raises the position of this process's latest write to `lsn` (replacing "unknown").
    fn remember(&self, lsn: Lsn) {
        let written = &self.inner.written;
        let _ = written.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
            Some(if old == UNKNOWN.0 {
                lsn.0
            } else {
                old.max(lsn.0)
            })
        });
    }

    /// The pool a read that may be a moment old should use now (no fallback on errors:
    /// prefer [`Readers::read`]).
    pub async fn pool(&self) -> PgPool {
        self.pick().await.0
    }

    /// Like [`Readers::pool`], also telling whether the pool is the replica's.
    pub async fn pick(&self) -> (PgPool, bool) {
        match self.choose().await {
            Some(replica) => (replica, true),
            None => (self.inner.primary.clone(), false),
        }
    }

    /// Runs `query` where the rule says; a failure on the replica runs it again on the
    /// primary.
    pub async fn read<T, F, Fut>(&self, query: F) -> sqlx::Result<T>
    where
        F: Fn(PgPool) -> Fut,
        Fut: Future<Output = sqlx::Result<T>>,
    {
        self.run(query, |_| false).await
    }

    /// Like [`Readers::read`] for a row asked for by id: when the replica does not have it
    /// (`None`), the primary is asked too (a row written a moment ago elsewhere).
    pub async fn find<T, F, Fut>(&self, query: F) -> sqlx::Result<Option<T>>
    where
        F: Fn(PgPool) -> Fut,
        Fut: Future<Output = sqlx::Result<Option<T>>>,
    {
        self.run(query, Option::is_none).await
    }

    async fn run<T, F, Fut>(&self, query: F, is_miss: impl Fn(&T) -> bool) -> sqlx::Result<T>
    where
        F: Fn(PgPool) -> Fut,
        Fut: Future<Output = sqlx::Result<T>>,
    {
        let Some(replica) = self.choose().await else {
            return query(self.inner.primary.clone()).await;
        };
        let reason = match query(replica).await {
            Ok(found) if !is_miss(&found) => {
                self.replica_answered();
                return Ok(found);
            }
            Ok(_) => {
                self.replica_answered();
                PrimaryReason::ReplicaMiss
            }
            Err(err) => self.replica_failed(&err),
        };
        self.inner.stats.count(reason);
        query(self.inner.primary.clone()).await
    }

    /// The replica's pool when the read should go there (counted), else None (the
    /// primary's read counted with its reason).
    async fn choose(&self) -> Option<PgPool> {
        let decided = self.decide().await;
        match decided {
            Ok(replica) => {
                self.inner.stats.replica.fetch_add(1, Ordering::Relaxed);
                Some(replica)
            }
            Err(reason) => {
                self.inner.stats.count(reason);
                None
            }
        }
    }

    async fn decide(&self) -> Result<PgPool, PrimaryReason> {
        let mut needed = Lsn(self.inner.written.load(Ordering::Acquire));
        if needed == UNKNOWN && self.inner.replica.is_some() {
            // A write whose position could not be read: the primary's position now covers it.
            match current_lsn(&self.inner.primary).await {
                Ok(lsn) => {
                    self.remember(lsn);
                    needed = lsn;
                }
                Err(_) => return Err(PrimaryReason::ReplicaBehind),
            }
        }
        let route = read_route::route(self.inner.replica.is_some(), &self.view(), needed);
        let replica = self.inner.replica.as_ref();
        match (route, replica) {
            (Route::Replica, Some(replica)) => Ok(replica.clone()),
            (Route::CheckReplica, Some(replica)) => match replayed_lsn(replica).await {
                Ok(replayed) => {
                    self.view().replayed(replayed);
                    match read_route::after_check(replayed, needed) {
                        Route::Primary(reason) => Err(reason),
                        _ => Ok(replica.clone()),
                    }
                }
                Err(err) => Err(self.replica_failed(&err)),
            },
            (Route::Primary(PrimaryReason::ReplicaDown), Some(replica)) => {
                self.probe_if_due(replica);
                Err(PrimaryReason::ReplicaDown)
            }
            (Route::Primary(reason), _) => Err(reason),
            (_, None) => Err(PrimaryReason::NoReplica),
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, ReplicaView> {
        // The view holds two plain values; one poisoned by a panic elsewhere is still right.
        self.inner
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a probe of the replica that is down, at most one per retry period; readers
    /// go on reading the primary meanwhile.
    fn probe_if_due(&self, replica: &PgPool) {
        if !self.view().probe_due(Instant::now()) {
            return;
        }
        let (readers, replica) = (self.clone(), replica.clone());
        tokio::spawn(async move {
            match sqlx::query("SELECT 1").execute(&replica).await {
                Ok(_) => readers.replica_answered(),
                Err(err) => {
                    readers.replica_failed(&err);
                }
            }
        });
    }

    fn replica_answered(&self) {
        if self.view().mark_up() {
            tracing::info!("the read replica answers again; readers read from it");
        }
    }

    /// Records a failure on the replica: one that says it cannot be reached marks it down.
    fn replica_failed(&self, err: &sqlx::Error) -> PrimaryReason {
        if !unreachable(err) {
            tracing::warn!(error = %err, "a read failed on the replica; reading from the primary");
            return PrimaryReason::ReplicaError;
        }
        if self.view().mark_down(Instant::now()) {
            tracing::warn!(
                error = %err,
                retry_secs = read_route::REPLICA_RETRY.as_secs(),
                "the read replica cannot be reached; readers read from the primary"
            );
        }
        PrimaryReason::ReplicaDown
    }
}

/// Whether `err` says the server cannot be used at all (rather than that one query failed).
pub fn unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolClosed | sqlx::Error::Configuration(_) => true,
        // 3D000 no such database, 28xxx authentication; the rest as for the primary.
        sqlx::Error::Database(db)
            if db
                .code()
                .is_some_and(|code| code == "3D000" || code.starts_with("28")) =>
        {
            true
        }
        sqlx::Error::Database(db) if db.code().as_deref() == Some("40001") => false,
        other => super::transient::sqlx_transient(other),
    }
}

/// The primary's current WAL write position.
async fn current_lsn(primary: &PgPool) -> sqlx::Result<Lsn> {
    let text: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(primary)
        .await?;
    parsed(&text)
}

/// How far the replica has replayed (a server that is not a standby: its own position).
async fn replayed_lsn(replica: &PgPool) -> sqlx::Result<Lsn> {
    let text: Option<String> = sqlx::query_scalar(
        "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                 ELSE pg_current_wal_lsn() END)::text",
    )
    .fetch_one(replica)
    .await?;
    text.as_deref().map_or(Ok(Lsn(0)), parsed)
}

fn parsed(text: &str) -> sqlx::Result<Lsn> {
    Lsn::parse(text).ok_or_else(|| sqlx::Error::Decode(format!("not an LSN: {text:?}").into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_cannot_be_used_is_told_from_a_query_that_failed() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(unreachable(&sqlx::Error::Io(refused)));
        assert!(unreachable(&sqlx::Error::PoolTimedOut));
        assert!(unreachable(&sqlx::Error::PoolClosed));
        assert!(!unreachable(&sqlx::Error::RowNotFound));
        assert!(!unreachable(&sqlx::Error::ColumnNotFound("x".into())));
    }

    #[test]
    fn positions_that_are_not_lsns_are_decode_errors() {
        assert_eq!(parsed("0/16B3748").ok(), Some(Lsn(0x016B_3748)));
        assert!(matches!(parsed("nonsense"), Err(sqlx::Error::Decode(_))));
    }
}
