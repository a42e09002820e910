//! The `schedules` table (CONTRACT v3 §14): a schedule's row, read and written as a whole
//! by the commands that manage it ([`crate::scheduler::manage`]); `fires` holds what the
//! scheduler reads and writes each tick and the `schedule_fires` history.

pub mod fires;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// One row of `schedules`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, Serialize)]
pub struct ScheduleRow {
    pub schedule_id: Uuid,
    pub tenant_id: String,
    pub agent_id: Uuid,
    pub name: Option<String>,
    /// A 5-field cron expression, evaluated in `timezone`; or else `every_secs`.
    pub cron: Option<String>,
    pub every_secs: Option<i32>,
    pub timezone: String,
    pub input: String,
    /// What each fire's task message carries besides its ids and input.
    pub task_template: Value,
    pub overlap: String,
    pub catch_up: String,
    pub catch_up_window_secs: i32,
    pub max_fires_per_day: Option<i32>,
    pub paused: bool,
    /// The first fire not decided yet (null while paused).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The fire `buffer_one` keeps until the previous task ends.
    pub buffered_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`ScheduleRow`], in its order.
pub const SCHEDULE_COLUMNS: &str = "schedule_id, tenant_id, agent_id, name, cron, every_secs, \
     timezone, input, task_template, overlap, catch_up, catch_up_window_secs, \
     max_fires_per_day, paused, next_fire_at, buffered_fire_at, created_at, updated_at";

/// Inserts `row` (its timestamps are set by the database) if its agent exists; `None`
/// when there is no such agent.
pub async fn insert(pool: &PgPool, row: &ScheduleRow) -> sqlx::Result<Option<ScheduleRow>> {
    sqlx::query_as::<_, ScheduleRow>(&format!(
        "INSERT INTO schedules (schedule_id, tenant_id, agent_id, name, cron, every_secs, \
                                timezone, input, task_template, overlap, catch_up, \
                                catch_up_window_secs, max_fires_per_day, paused, next_fire_at) \
         SELECT $1, $2, agent_id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15 \
         FROM agents WHERE agent_id = $3 \
         RETURNING {SCHEDULE_COLUMNS}"
    ))
    .bind(row.schedule_id)
    .bind(&row.tenant_id)
    .bind(row.agent_id)
    .bind(&row.name)
    .bind(&row.cron)
    .bind(row.every_secs)
    .bind(&row.timezone)
    .bind(&row.input)
    .bind(&row.task_template)
    .bind(&row.overlap)
    .bind(&row.catch_up)
    .bind(row.catch_up_window_secs)
    .bind(row.max_fires_per_day)
    .bind(row.paused)
    .bind(row.next_fire_at)
    .fetch_optional(pool)
    .await
}

/// Reads one schedule.
pub async fn get(pool: &PgPool, schedule_id: Uuid) -> sqlx::Result<Option<ScheduleRow>> {
    sqlx::query_as::<_, ScheduleRow>(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE schedule_id = $1"
    ))
    .bind(schedule_id)
    .fetch_optional(pool)
    .await
}

/// Reads one schedule and locks its row until the end of the caller's transaction (the
/// scheduler's tick waits meanwhile, and the other way round).
pub async fn lock(conn: &mut PgConnection, schedule_id: Uuid) -> sqlx::Result<Option<ScheduleRow>> {
    sqlx::query_as::<_, ScheduleRow>(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE schedule_id = $1 FOR UPDATE"
    ))
    .bind(schedule_id)
    .fetch_optional(conn)
    .await
}

/// Every schedule (of one agent, when given), oldest first.
pub async fn list(pool: &PgPool, agent_id: Option<Uuid>) -> sqlx::Result<Vec<ScheduleRow>> {
    sqlx::query_as::<_, ScheduleRow>(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedules \
         WHERE $1::uuid IS NULL OR agent_id = $1 ORDER BY created_at, schedule_id"
    ))
    .bind(agent_id)
    .fetch_all(pool)
    .await
}

/// Writes every field a person may change (and `next_fire_at`, computed from them) back to
/// the row locked by [`lock`]; returns the row as stored.
pub async fn update(conn: &mut PgConnection, row: &ScheduleRow) -> sqlx::Result<ScheduleRow> {
    sqlx::query_as::<_, ScheduleRow>(&format!(
        "UPDATE schedules SET name = $2, cron = $3, every_secs = $4, timezone = $5, input = $6, \
                task_template = $7, overlap = $8, catch_up = $9, catch_up_window_secs = $10, \
                max_fires_per_day = $11, paused = $12, next_fire_at = $13, updated_at = now() \
         WHERE schedule_id = $1 RETURNING {SCHEDULE_COLUMNS}"
    ))
    .bind(row.schedule_id)
    .bind(&row.name)
    .bind(&row.cron)
    .bind(row.every_secs)
    .bind(&row.timezone)
    .bind(&row.input)
    .bind(&row.task_template)
    .bind(&row.overlap)
    .bind(&row.catch_up)
    .bind(row.catch_up_window_secs)
    .bind(row.max_fires_per_day)
    .bind(row.paused)
    .bind(row.next_fire_at)
    .fetch_one(conn)
    .await
}

/// Deletes a schedule: it fires no more. Its `schedule_fires` rows and its tasks stay.
/// Returns whether it existed.
pub async fn delete(pool: &PgPool, schedule_id: Uuid) -> sqlx::Result<bool> {
    let deleted = sqlx::query("DELETE FROM schedules WHERE schedule_id = $1")
        .bind(schedule_id)
        .execute(pool)
        .await?;
    Ok(deleted.rows_affected() == 1)
}
