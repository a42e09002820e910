//! Where a reader's query goes when a read replica is configured (`database.read_url`):
//! the rule, without I/O. The adapter (`store::readers`) asks [`route`] before each read
//! and reports back what it learnt (the replica's replayed position, a failed connection).
//!
//! - No replica: the primary.
//! - The replica failed to connect: the primary, until a probe finds it again. Readers never
//!   wait for a replica that is down: the probe runs beside them, at most once per
//!   [`REPLICA_RETRY`] ([`ReplicaView::probe_due`]).
//! - This process wrote at WAL position `needed` (read-your-writes) and the replica is not
//!   known to have replayed that far: ask the replica how far it has replayed
//!   ([`Route::CheckReplica`]); if it is still behind, the primary ([`after_check`]).
//! - Otherwise the replica.
//!
//! Positions are PostgreSQL LSNs (`pg_lsn`, written `X/Y` in hex), compared as u64.

use std::fmt;
use std::time::{Duration, Instant};

/// How long a replica that failed to connect is left alone before it is tried again.
pub const REPLICA_RETRY: Duration = Duration::from_secs(5);

/// A WAL position (PostgreSQL's `pg_lsn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Reads PostgreSQL's text form `X/Y` (two hex numbers of at most 8 digits each).
    pub fn parse(text: &str) -> Option<Lsn> {
        let (high, low) = text.trim().split_once('/')?;
        let valid = |part: &str| {
            !part.is_empty() && part.len() <= 8 && part.bytes().all(|b| b.is_ascii_hexdigit())
        };
        if !valid(high) || !valid(low) {
            return None;
        }
        let high = u64::from_str_radix(high, 16).ok()?;
        let low = u64::from_str_radix(low, 16).ok()?;
        Some(Lsn((high << 32) | low))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// Why a read went to the primary although a replica is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrimaryReason {
    /// No `database.read_url`.
    NoReplica,
    /// The replica failed to connect a moment ago.
    ReplicaDown,
    /// The replica has not replayed this process's latest write yet.
    ReplicaBehind,
    /// The replica did not have the row asked for by id (it may be too new for it).
    ReplicaMiss,
    /// The query failed on the replica (e.g. a conflict with recovery).
    ReplicaError,
}

impl PrimaryReason {
    /// A short label for logs and counters.
    pub fn as_str(self) -> &'static str {
        match self {
            PrimaryReason::NoReplica => "no_replica",
            PrimaryReason::ReplicaDown => "replica_down",
            PrimaryReason::ReplicaBehind => "replica_behind",
            PrimaryReason::ReplicaMiss => "replica_miss",
            PrimaryReason::ReplicaError => "replica_error",
        }
    }
}

/// Where one read goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Replica,
    /// Ask the replica for its replayed position first, then decide with [`after_check`].
    CheckReplica,
    Primary(PrimaryReason),
}

/// What the adapter knows about its replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaView {
    /// The furthest position the replica was seen to have replayed.
    pub replayed: Lsn,
    /// Until when the replica is left alone after a failed connection (it is down while
    /// this is set, until a probe or a read succeeds).
    pub down_until: Option<Instant>,
    /// A probe is running.
    pub probing: bool,
}

impl ReplicaView {
    /// The replica failed to connect at `now` (a read or a probe). True when it was up
    /// before (worth a log line).
    pub fn mark_down(&mut self, now: Instant) -> bool {
        let was_up = self.down_until.is_none();
        self.down_until = Some(now + REPLICA_RETRY);
        self.probing = false;
        was_up
    }

    /// A read or a probe succeeded on the replica. True when it had been marked down
    /// (worth a log line).
    pub fn mark_up(&mut self) -> bool {
        self.probing = false;
        self.down_until.take().is_some()
    }

    /// Whether to start a probe of a replica that is down now (and note that one runs).
    pub fn probe_due(&mut self, now: Instant) -> bool {
        let due = !self.probing && self.down_until.is_some_and(|until| now >= until);
        self.probing |= due;
        due
    }

    /// The replica has replayed at least `lsn` (positions only move forward).
    pub fn replayed(&mut self, lsn: Lsn) {
        self.replayed = self.replayed.max(lsn);
    }

    fn is_down(&self) -> bool {
        self.down_until.is_some()
    }
}

/// Where a read goes: `has_replica` (read_url set), what is known of the replica and the
/// position the read must see (this process's latest write; `Lsn(0)` when none).
pub fn route(has_replica: bool, view: &ReplicaView, needed: Lsn) -> Route {
    if !has_replica {
        return Route::Primary(PrimaryReason::NoReplica);
    }
    if view.is_down() {
        return Route::Primary(PrimaryReason::ReplicaDown);
    }
    if needed > view.replayed {
        return Route::CheckReplica;
    }
    Route::Replica
}

/// The decision after [`Route::CheckReplica`] learnt that the replica has replayed `replayed`.
pub fn after_check(replayed: Lsn, needed: Lsn) -> Route {
    if replayed >= needed {
        Route::Replica
    } else {
        Route::Primary(PrimaryReason::ReplicaBehind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_and_print_as_postgres_writes_them() {
        assert_eq!(Lsn::parse("0/3000060"), Some(Lsn(0x0300_0060)));
        assert_eq!(
            Lsn::parse("16/B374D848"),
            Some(Lsn((0x16 << 32) | 0xB374_D848))
        );
        assert_eq!(Lsn::parse(" FFFFFFFF/FFFFFFFF "), Some(Lsn(u64::MAX)));
        assert_eq!(Lsn((0x16 << 32) | 0xB374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn::parse("0/0"), Some(Lsn(0)));
        for bad in [
            "",
            "/",
            "0/",
            "/1",
            "1",
            "x/1",
            "1/2/3",
            "123456789/0",
            "-1/0",
            "0/+1",
        ] {
            assert_eq!(Lsn::parse(bad), None, "{bad:?}");
        }
        assert!(Lsn::parse("1/0") > Lsn::parse("0/FFFFFFFF"));
    }

    #[test]
    fn without_a_replica_everything_reads_from_the_primary() {
        let view = ReplicaView::default();
        let route = route(false, &view, Lsn(0));
        assert_eq!(route, Route::Primary(PrimaryReason::NoReplica));
    }

    #[test]
    fn a_replica_serves_reads_until_this_process_writes_past_what_it_replayed() {
        let mut view = ReplicaView::default();
        assert_eq!(route(true, &view, Lsn(0)), Route::Replica);
        assert_eq!(route(true, &view, Lsn(10)), Route::CheckReplica);
        assert_eq!(
            after_check(Lsn(9), Lsn(10)),
            Route::Primary(PrimaryReason::ReplicaBehind)
        );
        assert_eq!(after_check(Lsn(10), Lsn(10)), Route::Replica);
        view.replayed(Lsn(12));
        view.replayed(Lsn(11));
        assert_eq!(view.replayed, Lsn(12), "positions never go back");
        assert_eq!(route(true, &view, Lsn(10)), Route::Replica);
        assert_eq!(route(true, &view, Lsn(13)), Route::CheckReplica);
    }

    #[test]
    fn a_replica_that_failed_is_left_to_a_probe_once_per_retry_period() {
        let now = Instant::now();
        let mut view = ReplicaView::default();
        assert!(!view.probe_due(now), "nothing to probe while it is up");
        assert!(view.mark_down(now), "the first failure is news");
        assert!(!view.mark_down(now), "a second one is not");
        let down = Route::Primary(PrimaryReason::ReplicaDown);
        assert_eq!(route(true, &view, Lsn(0)), down);
        let almost = now + REPLICA_RETRY - Duration::from_millis(1);
        assert!(!view.probe_due(almost));
        let due = now + REPLICA_RETRY;
        assert!(view.probe_due(due), "one probe per retry period");
        assert!(!view.probe_due(due), "not two at once");
        assert_eq!(route(true, &view, Lsn(0)), down, "reads wait for no probe");
        assert!(!view.mark_down(due), "a failed probe is no news");
        assert!(!view.probe_due(due + Duration::from_millis(1)));
        assert!(view.probe_due(due + REPLICA_RETRY));
        assert!(view.mark_up(), "coming back is news");
        assert!(!view.mark_up());
        assert_eq!(route(true, &view, Lsn(0)), Route::Replica);
    }
}
