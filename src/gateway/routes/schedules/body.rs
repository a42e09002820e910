//! The JSON of `/v1/schedules`: request bodies (checked by `scheduler::spec`) and answers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::api_error;
use crate::gateway::errors::ApiError;
use crate::scheduler::spec::{Change, Draft};
use crate::scheduler::template::TaskTemplate;
use crate::store::schedules::ScheduleRow;
use crate::store::schedules::fires::FireRow;

/// Body of `POST /v1/schedules`: `cron` (with `timezone`, default UTC) or `every` (`30s`,
/// `5m`, `1h30m`) or `every_secs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    /// The agent that runs each fire's task.
    pub agent_id: Uuid,
    #[serde(default)]
    pub name: Option<String>,
    /// A 5-field cron expression (minute hour day-of-month month day-of-week).
    #[serde(default)]
    pub cron: Option<String>,
    /// An interval: a number and s, m, h or d, largest unit first (30s, 5m, 1h30m).
    #[serde(default)]
    pub every: Option<String>,
    /// The interval in seconds, instead of `every`.
    #[serde(default)]
    pub every_secs: Option<i64>,
    /// The IANA time zone of `cron` (default UTC).
    #[serde(default)]
    pub timezone: Option<String>,
    /// The request each task gets.
    pub input: String,
    /// skip (default), buffer_one or allow.
    #[serde(default)]
    pub overlap: Option<String>,
    /// latest (default), none or all.
    #[serde(default)]
    pub catch_up: Option<String>,
    /// How old a missed fire may be and still run (default 3600).
    #[serde(default)]
    pub catch_up_window_secs: Option<i64>,
    /// At most this many fires per UTC day.
    #[serde(default)]
    pub max_fires_per_day: Option<i64>,
    /// What each task message carries besides its ids and input: constraints, stream,
    /// budget, agent_version, channel, priority.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub task_template: Option<Value>,
    /// Create it paused.
    #[serde(default)]
    pub paused: Option<bool>,
}

/// Body of `PATCH /v1/schedules/{schedule_id}`: the fields to change. A new timing starts
/// from its first fire after now; `paused: true` pauses, `paused: false` resumes from the
/// next fire after now. `name` and `max_fires_per_day` may be null (removed).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSchedule {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, nullable)]
    pub name: Option<Option<String>>,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub every: Option<String>,
    #[serde(default)]
    pub every_secs: Option<i64>,
    #[serde(default)]
    pub timezone: Option<String>,
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub overlap: Option<String>,
    #[serde(default)]
    pub catch_up: Option<String>,
    #[serde(default)]
    pub catch_up_window_secs: Option<i64>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>, nullable)]
    pub max_fires_per_day: Option<Option<i64>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub task_template: Option<Value>,
    #[serde(default)]
    pub paused: Option<bool>,
}

/// Present (`Some`, possibly null) versus absent (`None`, by `default`).
fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl CreateSchedule {
    /// The draft `scheduler::manage` checks.
    pub(super) fn into_draft(self) -> Result<Draft, ApiError> {
        let task_template = template(self.task_template)?.unwrap_or_default();
        Ok(Draft {
            agent_id: self.agent_id,
            name: self.name,
            cron: self.cron,
            every: self.every,
            every_secs: self.every_secs,
            timezone: self.timezone,
            input: self.input,
            overlap: self.overlap,
            catch_up: self.catch_up,
            catch_up_window_secs: self.catch_up_window_secs,
            max_fires_per_day: self.max_fires_per_day,
            task_template,
            paused: self.paused.unwrap_or(false),
        })
    }
}

impl UpdateSchedule {
    /// The change `scheduler::manage` applies.
    pub(super) fn into_change(self) -> Result<Change, ApiError> {
        Ok(Change {
            name: self.name,
            cron: self.cron,
            every: self.every,
            every_secs: self.every_secs,
            timezone: self.timezone,
            input: self.input,
            overlap: self.overlap,
            catch_up: self.catch_up,
            catch_up_window_secs: self.catch_up_window_secs,
            max_fires_per_day: self.max_fires_per_day,
            task_template: template(self.task_template)?,
            paused: self.paused,
        })
    }
}

fn template(value: Option<Value>) -> Result<Option<TaskTemplate>, ApiError> {
    value
        .map(TaskTemplate::from_json)
        .transpose()
        .map_err(|err| api_error(err.into()))
}

/// A schedule with its latest fires.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleView {
    pub schedule_id: Uuid,
    pub tenant_id: String,
    pub agent_id: Uuid,
    pub name: Option<String>,
    /// The cron expression (evaluated in `timezone`), or null for an interval.
    pub cron: Option<String>,
    /// The interval in seconds, or null for a cron expression.
    pub every_secs: Option<i32>,
    pub timezone: String,
    pub input: String,
    #[schema(value_type = Object)]
    pub task_template: Value,
    /// skip, buffer_one or allow.
    pub overlap: String,
    /// latest, none or all.
    pub catch_up: String,
    pub catch_up_window_secs: i32,
    pub max_fires_per_day: Option<i32>,
    pub paused: bool,
    /// The next fire (null while paused, or when the expression never fires again).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The fire `buffer_one` keeps until the previous task ends.
    pub buffered_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The latest decisions, newest first.
    pub recent_fires: Vec<FireView>,
}

impl ScheduleView {
    pub(super) fn new(row: ScheduleRow, fires: Vec<FireRow>) -> Self {
        Self {
            schedule_id: row.schedule_id,
            tenant_id: row.tenant_id,
            agent_id: row.agent_id,
            name: row.name,
            cron: row.cron,
            every_secs: row.every_secs,
            timezone: row.timezone,
            input: row.input,
            task_template: row.task_template,
            overlap: row.overlap,
            catch_up: row.catch_up,
            catch_up_window_secs: row.catch_up_window_secs,
            max_fires_per_day: row.max_fires_per_day,
            paused: row.paused,
            next_fire_at: row.next_fire_at,
            buffered_fire_at: row.buffered_fire_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            recent_fires: fires.into_iter().map(FireView::from).collect(),
        }
    }
}

/// One fire and what was decided (`schedule_fires`), with its task's status.
#[derive(Debug, Serialize, ToSchema)]
pub struct FireView {
    pub fire_at: DateTime<Utc>,
    /// enqueued, triggered, skipped_overlap, skipped_missed, buffered or capped.
    pub decision: String,
    /// The task the fire made (UUIDv5 of the schedule and the fire time), if any.
    pub task_id: Option<Uuid>,
    pub decided_at: DateTime<Utc>,
    /// The task's status (null without a task, or once it was pruned).
    pub task_status: Option<String>,
}

impl From<FireRow> for FireView {
    fn from(row: FireRow) -> Self {
        Self {
            fire_at: row.fire_at,
            decision: row.decision,
            task_id: row.task_id,
            decided_at: row.decided_at,
            task_status: row.task_status,
        }
    }
}

/// Answer of `GET /v1/schedules`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}

/// Answer of `GET /v1/schedules/{schedule_id}/fires`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FireList {
    /// Newest first.
    pub fires: Vec<FireView>,
    /// Pass as `before` for the next page; null on the last page.
    pub next_before: Option<DateTime<Utc>>,
}

/// Answer of `POST /v1/schedules/{schedule_id}/trigger`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Triggered {
    pub schedule_id: Uuid,
    /// The trigger's fire time (now, to the millisecond).
    pub fire_at: DateTime<Utc>,
    pub task_id: Uuid,
    /// Where to read the task and follow its events.
    pub task_url: String,
    pub events_url: String,
}
