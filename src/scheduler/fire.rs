//! One schedule's due fires in one transaction, and a manual trigger (CONTRACT v3 §14),
//! optionally with an Idempotency-Key (the same key within a day fires once).
//!
//! The transaction locks the schedule's row, reads what `core::schedule::decide` needs,
//! records every decision in `schedule_fires`, inserts each fire's task `pending` (its id
//! is the fire's UUIDv5, so a fire makes at most one task whatever crashes), stores the
//! next fire, **publishes the new tasks' messages, then commits**. A worker that receives
//! a message before the commit waits on the task's row (its insert of the same id waits
//! for this transaction), so it always finds the task recorded. If the holder dies after
//! publishing and before committing, the transaction rolls back: the worker then records
//! the task from its message, and the next holder decides the same fire again, finds the
//! task, links it to the schedule and does not publish it twice. If a publish fails, the
//! transaction rolls back and the fire stays due. Nothing is committed without its message.

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::template::TaskTemplate;
use crate::amqp::Publisher;
use crate::core::schedule::{self, Decision, Decisions, Fire, Policy, Schedule, Seen, Timing};
use crate::store::schedules::fires::{self, FireRecord, FireTask};
use crate::store::schedules::{self as rows, ScheduleRow};

/// Where fires' task messages go.
#[derive(Clone, Copy)]
pub struct Outlet<'a> {
    pub publisher: &'a Publisher,
    pub tasks_queue: &'a str,
}

/// Decides and records the due fires of `schedule_id` at `now`; returns them. A schedule
/// that is gone or paused decides nothing.
pub async fn fire_due(
    conn: &mut PgConnection,
    outlet: Outlet<'_>,
    schedule_id: Uuid,
    now: DateTime<Utc>,
    grace: TimeDelta,
) -> anyhow::Result<Vec<Fire>> {
    let mut decided = Vec::new();
    loop {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let Some(row) = rows::lock(&mut tx, schedule_id).await? else {
            tx.commit().await?;
            return Ok(decided);
        };
        if row.paused {
            tx.commit().await?;
            return Ok(decided);
        }
        let schedule = match model(&row) {
            Ok(schedule) => schedule,
            Err(problem) => {
                // Written by hand with SQL: stopped (no next fire) rather than retried.
                tracing::error!(%schedule_id, %problem, "schedule cannot fire; its next fire cleared");
                fires::set_next(&mut tx, schedule_id, None, row.buffered_fire_at).await?;
                tx.commit().await?;
                return Ok(decided);
            }
        };
        let seen = seen(&mut tx, &row, &schedule.policy, now, grace).await?;
        let decisions = schedule::decide(&schedule, &seen, now, grace);
        let messages = record(&mut tx, &row, &decisions.fires, None).await?;
        let buffered = buffered_after(seen.buffered, &decisions.fires);
        fires::set_next(&mut tx, schedule_id, decisions.next_fire_at, buffered).await?;
        publish(outlet, &messages).await?;
        tx.commit().await?;
        log(schedule_id, &decisions);
        crate::metrics::schedule_fires(&decisions.fires);
        decided.extend(decisions.fires);
        if !decisions.more_due {
            return Ok(decided);
        }
    }
}

/// How long a trigger's Idempotency-Key is kept: the same key within a day of a trigger
/// (by fire time) gets that trigger's fire back; after it, the key fires again.
pub const TRIGGER_KEY_KEPT: TimeDelta = TimeDelta::days(1);

/// A manual trigger's fire, and whether an earlier trigger with the same key made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triggered {
    pub fire: Fire,
    /// True: nothing fired now; `fire` is the earlier trigger's (same Idempotency-Key).
    pub repeated: bool,
}

/// A manual trigger of `schedule_id` at `now` (whatever its pause, overlap and cap): the
/// fire (`triggered`) and its task, published before the commit. `None`: no such schedule.
pub async fn trigger(
    conn: &mut PgConnection,
    outlet: Outlet<'_>,
    schedule_id: Uuid,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<Fire>> {
    let triggered = trigger_keyed(conn, outlet, schedule_id, now, None).await?;
    Ok(triggered.map(|triggered| triggered.fire))
}

/// [`trigger`] with an Idempotency-Key: when a trigger of the schedule with the same `key`
/// fired within [`TRIGGER_KEY_KEPT`] before `now`, its fire is returned and nothing fires.
/// Two triggers with one key at once are one after the other (the schedule's row lock), so
/// the second finds the first.
pub async fn trigger_keyed(
    conn: &mut PgConnection,
    outlet: Outlet<'_>,
    schedule_id: Uuid,
    now: DateTime<Utc>,
    key: Option<&str>,
) -> anyhow::Result<Option<Triggered>> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let Some(row) = rows::lock(&mut tx, schedule_id).await? else {
        tx.rollback().await?;
        return Ok(None);
    };
    if let Some(key) = key {
        let since = now - TRIGGER_KEY_KEPT;
        if let Some((fire_at, task_id)) =
            fires::triggered_with(&mut tx, schedule_id, key, since).await?
        {
            tx.rollback().await?;
            let fire = Fire {
                fire_at,
                decision: Decision::Triggered,
                task_id,
            };
            tracing::info!(%schedule_id, fire_at = %fire.fire_at, task_id = ?fire.task_id,
                "schedule trigger repeated with its Idempotency-Key; nothing fired");
            return Ok(Some(Triggered {
                fire,
                repeated: true,
            }));
        }
    }
    let fire = schedule::trigger(schedule_id, now);
    let messages = record(&mut tx, &row, &[fire], key).await?;
    publish(outlet, &messages).await?;
    tx.commit().await?;
    tracing::info!(%schedule_id, fire_at = %fire.fire_at, task_id = ?fire.task_id, "schedule triggered");
    crate::metrics::schedule_fires(&[fire]);
    Ok(Some(Triggered {
        fire,
        repeated: false,
    }))
}

/// The schedule as the core takes it.
pub fn model(row: &ScheduleRow) -> Result<Schedule, String> {
    let timing = Timing::from_row(
        row.cron.as_deref(),
        row.every_secs.map(i64::from),
        &row.timezone,
    )
    .map_err(|err| err.to_string())?;
    let policy = Policy::from_row(
        &row.overlap,
        &row.catch_up,
        i64::from(row.catch_up_window_secs),
        row.max_fires_per_day.map(i64::from),
    )
    .map_err(|err| err.to_string())?;
    Ok(Schedule {
        schedule_id: row.schedule_id,
        timing,
        policy,
        paused: row.paused,
        next_fire_at: row.next_fire_at,
    })
}

/// What the core needs to know: an unended task, the buffered fire, and the fires per
/// UTC day that may count toward the cap.
async fn seen(
    conn: &mut PgConnection,
    row: &ScheduleRow,
    policy: &Policy,
    now: DateTime<Utc>,
    grace: TimeDelta,
) -> sqlx::Result<Seen> {
    let previous_running = fires::open_task(conn, row.schedule_id).await?;
    let mut fires_per_day = std::collections::BTreeMap::new();
    if policy.max_fires_per_day.is_some() {
        let window = TimeDelta::seconds(i64::from(policy.catch_up_window_secs)) + grace;
        let day = (now - window).date_naive();
        let from = day
            .and_hms_opt(0, 0, 0)
            .map_or(now - window, |start| start.and_utc());
        for (day, count) in fires::fires_per_day(conn, row.schedule_id, from).await? {
            fires_per_day.insert(day, u32::try_from(count).unwrap_or(u32::MAX));
        }
    }
    Ok(Seen {
        previous_running,
        buffered: row.buffered_fire_at,
        fires_per_day,
    })
}

/// Records each fire and inserts the tasks of those that make one; the messages of the
/// tasks inserted now.
async fn record(
    conn: &mut PgConnection,
    row: &ScheduleRow,
    decided: &[Fire],
    trigger_key: Option<&str>,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let template = TaskTemplate::from_stored(row.schedule_id, &row.task_template);
    let mut messages = Vec::new();
    for fire in decided {
        let record = FireRecord {
            schedule_id: row.schedule_id,
            tenant_id: &row.tenant_id,
            fire_at: fire.fire_at,
            decision: fire.decision.as_str(),
            task_id: fire.task_id,
            trigger_key,
        };
        fires::record(conn, &record).await?;
        let Some(task_id) = fire.task_id else {
            continue;
        };
        let task = FireTask {
            task_id,
            agent_id: row.agent_id,
            input: &row.input,
            constraints: &template.constraints,
            stream: template.stream,
            budget: template.budget_json(),
            schedule_id: row.schedule_id,
            fire_at: fire.fire_at,
            // A template written by hand with another priority runs normal.
            priority: (template.priority.as_deref())
                .and_then(|p| crate::core::fair_share::Priority::parse(p).ok())
                .unwrap_or_default()
                .as_str(),
        };
        if fires::insert_task(conn, &task).await? {
            let message = template.message(task_id, row.agent_id, &row.input);
            messages.push(serde_json::to_vec(&message)?);
        }
    }
    Ok(messages)
}

async fn publish(outlet: Outlet<'_>, messages: &[Vec<u8>]) -> anyhow::Result<()> {
    for body in messages {
        outlet
            .publisher
            .publish_task(outlet.tasks_queue, body)
            .await?;
    }
    Ok(())
}

/// The buffered fire after `decided`: a new `buffered` one, or none once it was released.
fn buffered_after(before: Option<DateTime<Utc>>, decided: &[Fire]) -> Option<DateTime<Utc>> {
    decided
        .iter()
        .fold(before, |buffered, fire| match fire.decision {
            Decision::Buffered => Some(fire.fire_at),
            Decision::Enqueued if buffered == Some(fire.fire_at) => None,
            _ => buffered,
        })
}

fn log(schedule_id: Uuid, decisions: &Decisions) {
    for fire in &decisions.fires {
        tracing::info!(%schedule_id, fire_at = %fire.fire_at, decision = fire.decision.as_str(),
            task_id = ?fire.task_id, "schedule fire");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(at: i64, decision: Decision) -> Fire {
        Fire {
            fire_at: DateTime::from_timestamp(at, 0).unwrap(),
            decision,
            task_id: None,
        }
    }

    #[test]
    fn the_buffered_fire_is_kept_until_it_is_released() {
        let at = |secs| DateTime::from_timestamp(secs, 0);
        assert_eq!(
            buffered_after(None, &[fire(10, Decision::Buffered)]),
            at(10)
        );
        assert_eq!(
            buffered_after(at(10), &[fire(20, Decision::SkippedOverlap)]),
            at(10)
        );
        let released = [fire(10, Decision::Enqueued), fire(20, Decision::Buffered)];
        assert_eq!(buffered_after(at(10), &released), at(20));
        assert_eq!(
            buffered_after(at(10), &[fire(10, Decision::Enqueued)]),
            None
        );
        // An enqueued fire that is not the buffered one leaves it alone.
        assert_eq!(
            buffered_after(at(10), &[fire(20, Decision::Enqueued)]),
            at(10)
        );
    }
}
