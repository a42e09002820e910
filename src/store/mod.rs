//! The PostgreSQL adapter: connecting (creating the database when missing), migrations, and
//! the queries behind the trace tables of CONTRACT §4. Every query is parameterized.

pub mod agents;
pub mod approvals;
pub mod children;
pub mod conversations;
pub mod detail;
pub mod events;
pub mod fork;
pub mod ledger;
pub mod outbox;
pub mod prune;
pub mod rate_limit;
pub mod reconcile;
pub mod replay;
pub mod replies;
pub mod step;
pub mod tasks;
pub mod trace;
pub mod transient;
pub mod unheld;

use std::time::Duration;

use anyhow::Context;
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The migrations of `migrations/`, embedded at compile time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Creates the database named in `url` when it does not exist yet.
pub async fn ensure_database(url: &str) -> anyhow::Result<()> {
    let exists = sqlx::Postgres::database_exists(url)
        .await
        .context("checking whether the database exists")?;
    if !exists {
        if let Err(err) = sqlx::Postgres::create_database(url).await {
            // Another worker may have created it at the same moment.
            let exists_now = sqlx::Postgres::database_exists(url).await.unwrap_or(false);
            if !exists_now {
                return Err(err).context("creating the database");
            }
        }
        tracing::info!("created the database");
    }
    Ok(())
}

/// Opens a pool of `size` connections.
pub async fn connect(url: &str, size: u32) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .context("connecting to PostgreSQL")
}

/// Applies every pending migration (safe to run from several workers at once).
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .context("applying database migrations")
}

/// Creates the database if needed, connects and migrates: what `agentd worker` does at start.
pub async fn prepare(url: &str, size: u32) -> anyhow::Result<PgPool> {
    ensure_database(url).await?;
    let pool = connect(url, size).await?;
    migrate(&pool).await?;
    Ok(pool)
}
