//! Which database errors are worth waiting out (PostgreSQL restarting, the network gone, the
//! pool exhausted) and the backoff used while waiting: tasks pause instead of failing.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Whether `err` (anywhere in its chain) is a database failure that may go away by itself.
pub fn is_transient(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
        .any(sqlx_transient)
}

/// Whether this database error may go away by itself (see [`is_transient`]).
pub fn sqlx_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => true,
        sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // A database that exists but refuses connections for now (ALLOW_CONNECTIONS false,
        // a maintenance window) answers 55000 with this message.
        sqlx::Error::Database(db)
            if db.code().as_deref() == Some("55000")
                && db.message().contains("not currently accepting connections") =>
        {
            true
        }
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08xxx connection exceptions; 57P01-57P03 admin/crash shutdown, cannot connect now;
            // 53300 too many connections; 40001/40P01 serialization failure, deadlock.
            code.starts_with("08")
                || matches!(
                    code.as_ref(),
                    "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01"
                )
        }),
        _ => false,
    }
}

/// Delays between attempts while the database is away: 200 ms doubling to 5 s, forever.
pub fn delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_are_transient_and_constraint_violations_are_not() {
        let io = anyhow::Error::new(sqlx::Error::Io(std::io::Error::other("reset")));
        assert!(is_transient(&io.context("committing a step")));
        assert!(is_transient(&anyhow::Error::new(sqlx::Error::PoolTimedOut)));
        assert!(!is_transient(&anyhow::Error::new(sqlx::Error::RowNotFound)));
        assert!(!is_transient(&anyhow::anyhow!("not a database error")));
    }

    #[test]
    fn delays_grow_and_cap() {
        let delays: Vec<u128> = delays().take(8).map(|d| d.as_millis()).collect();
        assert_eq!(delays[0], 200);
        assert_eq!(delays[1], 400);
        assert_eq!(delays[2], 800);
        assert_eq!(delays[7], 5000);
    }
}
