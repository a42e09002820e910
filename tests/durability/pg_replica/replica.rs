//! The streaming replica of `scripts/pg-replica.sh`, driven from the test: started fresh (a
//! leftover of a killed run is stopped first), its replay paused and resumed, waited on
//! until it has replayed the primary's current position, and stopped by a Drop guard
//! whatever the test's outcome. Only the replica's own data directory and port are used;
//! the primary gets, at most, the replication line in its pg_hba.conf (once).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// How long the replica may take to replay what the primary wrote (a loaded 2-core host).
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);

/// A running replica; dropping it stops the server and deletes its directory.
pub struct Replica {
    dir: PathBuf,
    pub port: u16,
}

fn script_path() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg-replica.sh")
}

/// Runs the script with `args`: its stdout, or its stderr as the error.
fn script(dir: &PathBuf, port: u16, args: &[&str]) -> Result<String, String> {
    let output = Command::new("bash")
        .arg(script_path())
        .args(args)
        .env("AGENTD_REPLICA_DIR", dir)
        .env("AGENTD_REPLICA_PORT", port.to_string())
        .output()
        .map_err(|err| format!("pg-replica.sh {args:?}: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "pg-replica.sh {args:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Why the replica cannot be started on this machine, if it cannot: the script runs the
/// server as the postgres OS user, so it needs root (or postgres) and PostgreSQL's tools.
pub fn missing_prerequisite() -> Option<String> {
    let user = Command::new("id").arg("-un").output().ok()?;
    let user = String::from_utf8_lossy(&user.stdout).trim().to_owned();
    if user != "root" && user != "postgres" {
        return Some(format!(
            "scripts/pg-replica.sh runs the replica as the postgres OS user: run as root or postgres, not {user}"
        ));
    }
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.flatten()
                .any(|dir| dir.path().join("bin/pg_basebackup").exists())
        })
        .unwrap_or(false);
    (!found).then(|| "no /usr/lib/postgresql/*/bin/pg_basebackup".to_owned())
}

/// A port nothing listens on now (the replica's, so a busy 5433 fails no run).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

impl Replica {
    /// Takes a base backup of the primary and starts the replica (blocking: a few seconds).
    pub fn start() -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pg-replica");
        let port = std::env::var("AGENTD_REPLICA_PORT")
            .ok()
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(free_port);
        script(&dir, port, &["stop"]).expect("stopping a leftover replica");
        let replica = Self { dir, port };
        // From here on, a failure still stops what was started (Drop).
        script(&replica.dir, port, &["start"]).expect("the replica starts");
        replica
    }

    /// `database.read_url` for the database named in the primary URL `primary_url`.
    pub fn url_for(&self, primary_url: &str) -> String {
        let name = primary_url.rsplit('/').next().unwrap_or("agentd");
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// A small pool on the replica's `postgres` database (replay control).
    pub async fn admin(&self) -> PgPool {
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .expect("connecting to the replica")
    }

    /// Starts it again after [`Replica::stop`]: a new base backup, the same port.
    pub fn start_again(&self) {
        script(&self.dir, self.port, &["start"]).expect("the replica starts again");
    }

    /// Stops the replica now (a replica that goes away); its directory is deleted.
    pub fn stop(&self) {
        script(&self.dir, self.port, &["stop"]).expect("the replica stops");
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // No panic here: this also runs while a failed test unwinds.
        if let Err(err) = script(&self.dir, self.port, &["stop"]) {
            eprintln!("pg-replica.sh stop failed: {err}; see {:?}", self.dir);
        }
    }
}

/// Pauses (true) or resumes (false) WAL replay on the replica.
pub async fn set_paused(admin: &PgPool, paused: bool) {
    let call = match paused {
        true => "SELECT pg_wal_replay_pause()",
        false => "SELECT pg_wal_replay_resume()",
    };
    sqlx::query(call).execute(admin).await.expect(call);
    if paused {
        // The pause is requested; wait until replay has actually stopped.
        let deadline = Instant::now() + CATCH_UP_LIMIT;
        loop {
            let state: String = sqlx::query_scalar("SELECT pg_get_wal_replay_pause_state()")
                .fetch_one(admin)
                .await
                .expect("pause state");
            if state == "paused" {
                return;
            }
            assert!(Instant::now() < deadline, "replay did not pause: {state}");
            tokio::time::sleep(crate::support::wait::POLL).await;
        }
    }
}

/// Waits until the replica has replayed everything the primary had written when called;
/// returns how long that took.
pub async fn caught_up(primary: &PgPool, admin: &PgPool) -> Duration {
    let began = Instant::now();
    let target: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(primary)
        .await
        .expect("the primary's position");
    loop {
        let behind: bool = sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() < $1::pg_lsn")
            .bind(&target)
            .fetch_one(admin)
            .await
            .expect("the replica's position");
        if !behind {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < CATCH_UP_LIMIT,
            "the replica did not replay up to {target} within {CATCH_UP_LIMIT:?}"
        );
        tokio::time::sleep(crate::support::wait::POLL).await;
    }
}
