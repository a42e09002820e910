//! A schedule as a person asks for it (`agentd schedule create`, `POST` and `PATCH
//! /v1/schedules`), checked into the row to store. Every refusal names the field it is
//! about, with the core's own words (`core::schedule` writes its errors for people).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::template::{FieldError, TaskTemplate};
use crate::core::budget::Price;
use crate::core::schedule::{
    DEFAULT_CATCH_UP_WINDOW_SECS, DEFAULT_TIME_ZONE, Every, Policy, PolicyError, Timing,
    TimingError, first_next_fire_at,
};
use crate::core::storable;
use crate::store::schedules::ScheduleRow;

/// Longest accepted schedule name.
pub const MAX_NAME_CHARS: usize = 200;

/// A new schedule as asked for, before it is checked. Absent fields take the contract's
/// defaults (UTC, skip, latest, 3600 s, no cap).
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub agent_id: Uuid,
    pub name: Option<String>,
    /// A 5-field cron expression.
    pub cron: Option<String>,
    /// An interval such as `30s`, `5m`, `1h30m`.
    pub every: Option<String>,
    /// The interval in seconds (what `schedules.every_secs` stores).
    pub every_secs: Option<i64>,
    pub timezone: Option<String>,
    pub input: String,
    pub overlap: Option<String>,
    pub catch_up: Option<String>,
    pub catch_up_window_secs: Option<i64>,
    pub max_fires_per_day: Option<i64>,
    pub task_template: TaskTemplate,
    /// Created paused: no fire until resumed.
    pub paused: bool,
}

/// What a `PATCH` changes; `None` keeps the stored value. Setting `cron` drops the
/// interval and setting `every`/`every_secs` drops the cron expression.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// `Some(None)` removes the name.
    pub name: Option<Option<String>>,
    pub cron: Option<String>,
    pub every: Option<String>,
    pub every_secs: Option<i64>,
    pub timezone: Option<String>,
    pub input: Option<String>,
    pub overlap: Option<String>,
    pub catch_up: Option<String>,
    pub catch_up_window_secs: Option<i64>,
    /// `Some(None)` removes the cap.
    pub max_fires_per_day: Option<Option<i64>>,
    pub task_template: Option<TaskTemplate>,
    pub paused: Option<bool>,
}

/// What a check needs besides the draft: the agent's model and its price (a cost limit in
/// the template needs one), and the largest task message a worker takes.
#[derive(Debug, Clone)]
pub struct Rules<'a> {
    pub model: &'a str,
    pub price: Option<&'a Price>,
    pub max_message_bytes: usize,
}

/// A checked draft: its timing and policy, and the fields as they are stored.
#[derive(Debug, Clone)]
pub struct Checked {
    pub timing: Timing,
    pub policy: Policy,
    pub row: ScheduleRow,
}

impl Draft {
    /// The draft a stored row is (for a `PATCH`).
    pub fn from_row(row: &ScheduleRow) -> Self {
        Self {
            agent_id: row.agent_id,
            name: row.name.clone(),
            cron: row.cron.clone(),
            every: None,
            every_secs: row.every_secs.map(i64::from),
            timezone: Some(row.timezone.clone()),
            input: row.input.clone(),
            overlap: Some(row.overlap.clone()),
            catch_up: Some(row.catch_up.clone()),
            catch_up_window_secs: Some(i64::from(row.catch_up_window_secs)),
            max_fires_per_day: row.max_fires_per_day.map(i64::from),
            task_template: TaskTemplate::from_stored(row.schedule_id, &row.task_template),
            paused: row.paused,
        }
    }

    /// The draft with `change` applied.
    pub fn apply(mut self, change: Change) -> Result<Self, FieldError> {
        let new_interval = change.every.is_some() || change.every_secs.is_some();
        if change.cron.is_some() && new_interval {
            return Err(FieldError::new("cron", TimingError::Both.to_string()));
        }
        if let Some(cron) = change.cron {
            (self.cron, self.every, self.every_secs) = (Some(cron), None, None);
        }
        if new_interval {
            (self.cron, self.every, self.every_secs) = (None, change.every, change.every_secs);
            // An interval has no time zone: the cron expression's goes with it.
            self.timezone = None;
        }
        macro_rules! keep_or_set {
            ($($field:ident),*) => { $(if let Some(value) = change.$field { self.$field = value; })* };
        }
        keep_or_set!(name, max_fires_per_day, input, task_template, paused);
        macro_rules! set_some {
            ($($field:ident),*) => { $(if change.$field.is_some() { self.$field = change.$field; })* };
        }
        set_some!(timezone, overlap, catch_up, catch_up_window_secs);
        Ok(self)
    }

    /// Checks every field into the row to store as `schedule_id` (its timestamps and
    /// `next_fire_at` are the caller's).
    pub fn check(self, schedule_id: Uuid, rules: &Rules<'_>) -> Result<Checked, FieldError> {
        let timing = self.timing()?;
        let policy = Policy::from_row(
            self.overlap.as_deref().unwrap_or("skip"),
            self.catch_up.as_deref().unwrap_or("latest"),
            self.catch_up_window_secs
                .unwrap_or(i64::from(DEFAULT_CATCH_UP_WINDOW_SECS)),
            self.max_fires_per_day,
        )
        .map_err(policy_error)?;
        let name = checked_name(self.name)?;
        if self.input.trim().is_empty() {
            return Err(FieldError::new("input", "must not be blank"));
        }
        let input = storable::owned(self.input);
        let template = self.task_template.checked(rules.price, rules.model)?;
        let size = serde_json::to_vec(&template.message(schedule_id, self.agent_id, &input))
            .map_or(usize::MAX, |body| body.len());
        if size > rules.max_message_bytes {
            return Err(FieldError::new(
                "input",
                format!(
                    "each task message would be {size} bytes; workers take at most {} \
                     (worker.max_message_bytes)",
                    rules.max_message_bytes
                ),
            ));
        }
        let (cron, every_secs, timezone) = stored_timing(&timing);
        let now = Utc::now();
        let row = ScheduleRow {
            schedule_id,
            tenant_id: "default".to_owned(),
            agent_id: self.agent_id,
            name,
            cron,
            every_secs,
            timezone,
            input,
            task_template: template.to_json(),
            overlap: policy.overlap.as_str().to_owned(),
            catch_up: policy.catch_up.as_str().to_owned(),
            catch_up_window_secs: policy.catch_up_window_secs as i32,
            max_fires_per_day: policy.max_fires_per_day.map(|max| max as i32),
            paused: self.paused,
            next_fire_at: None,
            buffered_fire_at: None,
            created_at: now,
            updated_at: now,
        };
        Ok(Checked {
            timing,
            policy,
            row,
        })
    }

    fn timing(&self) -> Result<Timing, FieldError> {
        let time_zone = self.timezone.as_deref().unwrap_or(DEFAULT_TIME_ZONE);
        let every_secs = match (&self.every, self.every_secs) {
            (Some(_), Some(_)) => {
                return Err(FieldError::new(
                    "every",
                    "give every or every_secs, not both",
                ));
            }
            (Some(text), None) => Some(i64::from(
                Every::parse(text)
                    .map_err(|err| FieldError::new("every", err.to_string()))?
                    .secs(),
            )),
            (None, secs) => secs,
        };
        let every_field = if self.every.is_some() {
            "every"
        } else {
            "every_secs"
        };
        let timing = Timing::from_row(self.cron.as_deref(), every_secs, time_zone);
        let timing = timing.map_err(|err| {
            let field = match &err {
                TimingError::Cron(_) | TimingError::Both | TimingError::Neither => "cron",
                TimingError::Every(_) => every_field,
                TimingError::UnknownTimeZone { .. } => "timezone",
            };
            FieldError::new(field, err.to_string())
        })?;
        if matches!(timing, Timing::Every(_)) && time_zone != DEFAULT_TIME_ZONE {
            return Err(FieldError::new(
                "timezone",
                "an interval has no time zone (every is anchored at the Unix epoch, UTC); \
                 use a cron expression for local times",
            ));
        }
        Ok(timing)
    }
}

impl Checked {
    /// The next fire to store: none while paused, else the first after `now`.
    pub fn first_next_fire_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        (!self.row.paused)
            .then(|| first_next_fire_at(&self.timing, now))
            .flatten()
    }
}

fn policy_error(err: PolicyError) -> FieldError {
    let field = match &err {
        PolicyError::Overlap(_) => "overlap",
        PolicyError::CatchUp(_) => "catch_up",
        PolicyError::Window(_) => "catch_up_window_secs",
        PolicyError::MaxFires(_) => "max_fires_per_day",
    };
    FieldError::new(field, err.to_string())
}

fn checked_name(name: Option<String>) -> Result<Option<String>, FieldError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let name = storable::owned(name.trim().to_owned());
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(FieldError::new(
            "name",
            format!("must be 1 to {MAX_NAME_CHARS} characters"),
        ));
    }
    Ok(Some(name))
}

/// The `cron`, `every_secs` and `timezone` columns of a timing.
fn stored_timing(timing: &Timing) -> (Option<String>, Option<i32>, String) {
    match timing {
        Timing::Cron { expr, tz } => (Some(expr.to_string()), None, tz.name().to_owned()),
        Timing::Every(every) => (
            None,
            Some(every.secs() as i32),
            DEFAULT_TIME_ZONE.to_owned(),
        ),
    }
}
