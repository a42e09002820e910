//! One scheduler tick: every due schedule's fires decided at `now` ([`super::fire`]). The
//! loop calls it with the wall clock; tests call it with the time they want (a DST change,
//! an outage), on any connection, without sleeping.

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::fire::{self, Outlet};
use crate::core::schedule::Fire;
use crate::store::schedules::fires;

/// Schedules looked at per tick; more due ones wait for the next tick.
pub const SCHEDULES_PER_TICK: i64 = 200;

/// What one tick decided.
#[derive(Debug, Clone, Default)]
pub struct TickReport {
    /// Each decided fire with its schedule, in the order decided.
    pub fires: Vec<(Uuid, Fire)>,
    /// Schedules whose fires could not be decided this time (logged; due again next tick).
    pub failed: usize,
}

/// Decides the due schedules' fires at `now` with the on-time `grace`. A schedule that
/// fails is logged and left due; an error means the connection itself is gone.
pub async fn tick(
    conn: &mut PgConnection,
    outlet: Outlet<'_>,
    now: DateTime<Utc>,
    grace: TimeDelta,
) -> anyhow::Result<TickReport> {
    let due = fires::due(conn, now, SCHEDULES_PER_TICK).await?;
    let mut report = TickReport::default();
    for schedule_id in due {
        match fire::fire_due(conn, outlet, schedule_id, now, grace).await {
            Ok(decided) => report
                .fires
                .extend(decided.into_iter().map(|fire| (schedule_id, fire))),
            Err(err) => {
                tracing::warn!(%schedule_id, error = %format!("{err:#}"),
                    "schedule fires not decided; trying again next tick");
                report.failed += 1;
                // A lost connection ends the tick (and the holder's lock with it).
                sqlx::query("SELECT 1").execute(&mut *conn).await?;
            }
        }
    }
    Ok(report)
}
