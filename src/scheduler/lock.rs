//! Who runs the scheduler: the worker whose dedicated PostgreSQL session holds the session
//! advisory lock [`SCHEDULER_LOCK`]. Every worker keeps such a session and tries the lock
//! once per tick; the holder runs each tick **on that same session**, so a holder whose
//! session is gone can write nothing more. A holder killed with `kill -9` loses its socket
//! with its process, PostgreSQL ends the session and frees the lock, and another worker
//! takes it at its next try. A holder whose host vanishes without closing the socket is
//! noticed by TCP keepalives (set on the session, about 25 s). A lease row would need the
//! holder to renew it and the others to wait out its expiry; the lock needs neither.
//!
//! The session's `application_name` is `agentd scheduler pid=PID worker=WORKER_ID`, so
//! `SELECT application_name, client_addr FROM pg_stat_activity JOIN pg_locks USING (pid)
//! WHERE locktype = 'advisory' AND classid = 1634166126 AND objid = 1952722291` shows the
//! holder (the key's high and low 32 bits).

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use uuid::Uuid;

/// The advisory lock key of the scheduler: "agentd-s" in ASCII (`pg_locks.classid`
/// 1634166126 and `objid` 1952722291).
pub const SCHEDULER_LOCK: i64 = 0x6167_656e_7464_2d73;

/// A worker's scheduler session: connected, and holding the lock or not.
pub struct Session {
    conn: PgConnection,
    holds: bool,
}

impl Session {
    /// Opens the session (`database_url`), named for `pg_stat_activity`.
    pub async fn open(database_url: &str, worker_id: Uuid) -> anyhow::Result<Self> {
        let name = format!(
            "agentd scheduler pid={} worker={worker_id}",
            std::process::id()
        );
        let options: PgConnectOptions = database_url
            .parse::<PgConnectOptions>()
            .context("reading database.url")?
            .application_name(&name)
            // A vanished host frees the lock within about idle + interval * count.
            .options([
                ("tcp_keepalives_idle", "10"),
                ("tcp_keepalives_interval", "5"),
                ("tcp_keepalives_count", "3"),
            ])
            .disable_statement_logging();
        let conn = options
            .connect()
            .await
            .context("opening the scheduler's database session")?;
        Ok(Self { conn, holds: false })
    }

    /// Tries to take the lock (at once; false when another session holds it).
    pub async fn try_take(&mut self) -> sqlx::Result<bool> {
        if !self.holds {
            self.holds = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(SCHEDULER_LOCK)
                .fetch_one(&mut self.conn)
                .await?;
        }
        Ok(self.holds)
    }

    /// Whether this session holds the lock.
    pub fn holds(&self) -> bool {
        self.holds
    }

    /// The session, for the holder's ticks.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// Gives the lock up and closes the session (shutdown): another worker takes the
    /// scheduler over at its next try.
    pub async fn close(mut self) {
        if self.holds {
            let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(SCHEDULER_LOCK)
                .execute(&mut self.conn)
                .await;
            if let Err(err) = unlocked {
                tracing::warn!(error = %err, "could not release the scheduler lock; closing");
            }
        }
        // Closing ends the session, which frees the lock in any case.
        let _ = self.conn.close().await;
    }
}
