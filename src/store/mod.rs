//! The PostgreSQL adapter: connecting (the worker, `migrate`, `dev` and `serve` create the
//! database when missing; other commands say it is missing), migrations, and
//! the queries behind the trace tables of CONTRACT §4. Every query is parameterized.

pub mod agents;
pub mod api_tokens;
pub mod approvals;
pub mod children;
pub mod claim;
pub mod conversations;
pub mod detail;
pub mod evals;
pub mod events;
pub mod fork;
pub mod ledger;
pub mod llm_record;
pub mod operator_actions;
pub mod outbox;
pub mod owners;
pub mod partitions;
pub mod prune;
pub mod rate_limit;
pub mod readers;
pub mod reconcile;
pub mod replay;
pub mod replies;
pub mod reruns;
pub mod schedules;
pub mod steering;
pub mod step;
pub mod task_list;
pub mod tasks;
pub mod tenants;
pub mod trace;
pub mod transient;
pub mod unheld;
pub mod versions;

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

/// Opens a pool of `size` connections. A database that does not exist is an error that
/// says how to create it: only `agentd migrate`, `worker`, `dev` and `serve` create one
/// ([`prepare`]), so that a misspelled URL never makes a new, empty database.
pub async fn connect(url: &str, size: u32) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .map_err(|err| connect_error(url, err))
}

/// PostgreSQL's SQLSTATE for "database does not exist".
const INVALID_CATALOG_NAME: &str = "3D000";

/// The error of a failed connection; a missing database is told plainly.
fn connect_error(url: &str, err: sqlx::Error) -> anyhow::Error {
    let missing = matches!(&err, sqlx::Error::Database(db)
        if db.code().as_deref() == Some(INVALID_CATALOG_NAME));
    if !missing {
        return anyhow::Error::new(err).context("connecting to PostgreSQL");
    }
    let name = database_name(url);
    anyhow::anyhow!(
        "the database {name} does not exist (database.url {}); create it with `agentd \
         migrate` (given the same --config and AGENTD__ variables), or fix database.url",
        crate::amqp::broker::mask_password(url)
    )
}

/// The database named by a PostgreSQL URL (its path), for messages.
fn database_name(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or(url);
    let after_scheme = without_query
        .split_once("://")
        .map_or(without_query, |(_, rest)| rest);
    match after_scheme.split_once('/') {
        Some((_, name)) if !name.is_empty() => format!("`{name}`"),
        _ => "named by database.url".to_owned(),
    }
}

/// Connects to an existing database and applies pending migrations: what the commands
/// other than `migrate`, `worker`, `dev` and `serve` do (they never create the database).
pub async fn open(url: &str, size: u32) -> anyhow::Result<PgPool> {
    let pool = connect(url, size).await?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Applies every pending migration (safe to run from several workers at once).
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .context("applying database migrations")
}

/// Creates the database if needed, connects and migrates: what `agentd worker`, `migrate`,
/// `dev` and `serve` do at start (and only they).
pub async fn prepare(url: &str, size: u32) -> anyhow::Result<PgPool> {
    ensure_database(url).await?;
    let pool = connect(url, size).await?;
    migrate(&pool).await?;
    Ok(pool)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_missing_database_is_named_without_the_password() {
        let name = super::database_name("postgres://u:pw@h:5432/agentd_typo?sslmode=disable");
        assert_eq!(name, "`agentd_typo`");
        assert_eq!(
            super::database_name("postgres://h"),
            "named by database.url"
        );
    }
}
