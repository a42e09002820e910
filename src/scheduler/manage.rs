//! Managing schedules (CONTRACT v3 §14), the same for `agentd schedule` and the gateway's
//! `/v1/schedules`: create, change (`PATCH`, pause, resume), delete and trigger.
//!
//! - **Create** stores the checked schedule with `next_fire_at` = its first fire after now
//!   (none while created paused).
//! - **Change** rewrites the row under its lock (the scheduler waits meanwhile): a new
//!   timing starts from its first fire after now; **pause** clears `next_fire_at` (no fire
//!   is decided while paused and none gets a row); **resume** sets it to the first fire
//!   after now, so fires that fell while paused are not caught up (a pause is deliberate).
//! - **Delete** removes the row: it fires no more; its `schedule_fires` rows and its tasks
//!   stay (`tasks.schedule_id` still names it).
//! - **Trigger** makes a task now whatever the pause, overlap and cap (`triggered`).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::fire::{self, Outlet};
use super::spec::{Change, Draft, Rules};
use super::template::FieldError;
use crate::config::Settings;
use crate::core::schedule::Fire;
use crate::store::agents::{self, Agent};
use crate::store::schedules::{self as rows, ScheduleRow};

/// Why a command on a schedule was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// A field is wrong (400, or a CLI usage error).
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error("no agent {0}")]
    UnknownAgent(Uuid),
    #[error("no schedule {0}")]
    UnknownSchedule(Uuid),
    /// The database or the broker failed.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ManageError {
    fn from(err: sqlx::Error) -> Self {
        Self::Failed(err.into())
    }
}

/// Creates a schedule from `draft` at `now`.
pub async fn create(
    pool: &PgPool,
    settings: &Settings,
    draft: Draft,
    now: DateTime<Utc>,
) -> Result<ScheduleRow, ManageError> {
    let agent_id = draft.agent_id;
    let agent = agents::get(pool, agent_id)
        .await?
        .ok_or(ManageError::UnknownAgent(agent_id))?;
    let checked = draft.check(Uuid::now_v7(), &rules(settings, Some(&agent)))?;
    let next_fire_at = checked.first_next_fire_at(now);
    // A schedule and its tasks belong to its agent's tenant (CONTRACT v3 §15).
    let row = ScheduleRow {
        next_fire_at,
        tenant_id: agent.tenant_id.clone(),
        ..checked.row
    };
    let stored = rows::insert(pool, &row).await?;
    let stored = stored.ok_or(ManageError::UnknownAgent(agent_id))?;
    tracing::info!(schedule_id = %stored.schedule_id, %agent_id, next_fire_at = ?stored.next_fire_at,
        "schedule created");
    Ok(stored)
}

/// Applies `change` to schedule `schedule_id` at `now`.
pub async fn change(
    pool: &PgPool,
    settings: &Settings,
    schedule_id: Uuid,
    change: Change,
    now: DateTime<Utc>,
) -> Result<ScheduleRow, ManageError> {
    let mut tx = pool.begin().await?;
    let Some(row) = rows::lock(&mut tx, schedule_id).await? else {
        tx.rollback().await?;
        return Err(ManageError::UnknownSchedule(schedule_id));
    };
    let agent = agents::get(pool, row.agent_id).await?;
    let checked = Draft::from_row(&row)
        .apply(change)?
        .check(schedule_id, &rules(settings, agent.as_ref()))?;
    let timing_changed = (
        &checked.row.cron,
        checked.row.every_secs,
        &checked.row.timezone,
    ) != (&row.cron, row.every_secs, &row.timezone);
    let next_fire_at = match (checked.row.paused, row.paused) {
        (true, _) => None,
        (false, false) if !timing_changed => row.next_fire_at,
        (false, _) => checked.first_next_fire_at(now),
    };
    let updated = ScheduleRow {
        next_fire_at,
        ..checked.row
    };
    let stored = rows::update(&mut tx, &updated).await?;
    tx.commit().await?;
    tracing::info!(%schedule_id, paused = stored.paused, next_fire_at = ?stored.next_fire_at,
        "schedule changed");
    Ok(stored)
}

/// Pauses (`true`) or resumes (`false`) a schedule.
pub async fn set_paused(
    pool: &PgPool,
    settings: &Settings,
    schedule_id: Uuid,
    paused: bool,
    now: DateTime<Utc>,
) -> Result<ScheduleRow, ManageError> {
    let pause = Change {
        paused: Some(paused),
        ..Change::default()
    };
    change(pool, settings, schedule_id, pause, now).await
}

/// Deletes a schedule (its fires and tasks stay).
pub async fn delete(pool: &PgPool, schedule_id: Uuid) -> Result<(), ManageError> {
    if !rows::delete(pool, schedule_id).await? {
        return Err(ManageError::UnknownSchedule(schedule_id));
    }
    tracing::info!(%schedule_id, "schedule deleted");
    Ok(())
}

/// Triggers a schedule now: its fire (with the task id).
pub async fn trigger(
    pool: &PgPool,
    outlet: Outlet<'_>,
    schedule_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Fire, ManageError> {
    let triggered = trigger_keyed(pool, outlet, schedule_id, now, None).await?;
    Ok(triggered.fire)
}

/// [`trigger`] with an Idempotency-Key: the same key within a day gets the first
/// trigger's fire back (`repeated`) instead of firing again.
pub async fn trigger_keyed(
    pool: &PgPool,
    outlet: Outlet<'_>,
    schedule_id: Uuid,
    now: DateTime<Utc>,
    key: Option<&str>,
) -> Result<fire::Triggered, ManageError> {
    let mut conn = pool.acquire().await?;
    fire::trigger_keyed(&mut conn, outlet, schedule_id, now, key)
        .await?
        .ok_or(ManageError::UnknownSchedule(schedule_id))
}

/// What a schedule of `agent` is checked against.
fn rules<'a>(settings: &'a Settings, agent: Option<&'a Agent>) -> Rules<'a> {
    let model = agent.map_or("", |agent| agent.model.as_str());
    Rules {
        model,
        price: settings.prices.get(model),
        max_message_bytes: settings.worker.max_message_bytes,
    }
}
