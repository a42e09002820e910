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
            // 08xxx connection exceptions; 53xxx insufficient resources (disk full, out of
            // memory, too many connections); 57P01-57P03 admin/crash shutdown, cannot
            // connect now; 40001/40P01 serialization failure, deadlock.
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(
                    code.as_ref(),
                    "57P01" | "57P02" | "57P03" | "40001" | "40P01"
                )
        }),
        _ => false,
    }
}

/// Whether PostgreSQL refused text because of a NUL: in `text` ("invalid byte sequence
/// for encoding", SQLSTATE 22021) or as a `\u0000` escape in `jsonb` ("unsupported Unicode
/// escape sequence", 22P05). Text that entered agentd is made storable where it entered
/// (`core::storable`); this tells the last defence, at the step write, that something
/// slipped through.
pub fn refuses_nul(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("22021" | "22P05"))
        }
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

    /// A database error with only a SQLSTATE, as PostgreSQL sends it.
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Coded {}

    impl sqlx::error::DatabaseError for Coded {
        fn message(&self) -> &str {
            self.0
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn coded(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Coded(code)))
    }

    #[test]
    fn outages_and_lack_of_resources_wait_refusals_do_not() {
        // Connection gone, shutting down, disk full, out of memory, too many connections.
        for code in ["08006", "57P01", "53100", "53200", "53300", "40P01"] {
            assert!(sqlx_transient(&coded(code)), "{code}");
            assert!(!refuses_nul(&coded(code)), "{code}");
        }
        // A check constraint, a cardinality violation, NUL in text and in jsonb.
        for code in ["23514", "21000", "22021", "22P05"] {
            assert!(!sqlx_transient(&coded(code)), "{code}");
        }
        assert!(refuses_nul(&coded("22021")) && refuses_nul(&coded("22P05")));
        assert!(!refuses_nul(&coded("23514")) && !refuses_nul(&sqlx::Error::PoolTimedOut));
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
