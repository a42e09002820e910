//! `agentd schedule create|list|show|pause|resume|trigger|delete|fires` (CONTRACT v3 §14):
//! the commands of [`crate::scheduler::manage`] for people. A wrong cron expression, time
//! zone, interval or rule is refused before anything connects, naming the flag (exit 2); an
//! unknown agent or schedule is exit 1.

use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use uuid::Uuid;

use super::out::{errln, outln};
use crate::amqp;
use crate::config::Settings;
use crate::core::budget::Budget;
use crate::core::schedule::{CronExpr, Every, parse_time_zone};
use crate::scheduler::fire::Outlet;
use crate::scheduler::manage::{self, ManageError};
use crate::scheduler::spec::Draft;
use crate::scheduler::template::TaskTemplate;
use crate::store::schedules::{self, ScheduleRow, fires};

/// `agentd schedule ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule (a cron expression in a time zone, or an interval) and print its
    /// schedule_id.
    Create(Box<CreateArgs>),
    /// List the schedules with their next fire and latest decision.
    List {
        /// Only this agent's.
        #[arg(long)]
        agent: Option<Uuid>,
    },
    /// Show a schedule and its latest fires.
    Show { schedule_id: Uuid },
    /// Pause a schedule: no fire until it is resumed (fires meanwhile are not caught up).
    Pause { schedule_id: Uuid },
    /// Resume a paused schedule from its next fire after now.
    Resume { schedule_id: Uuid },
    /// Run a schedule's task now, whatever its pause, overlap and cap; print the task_id.
    Trigger { schedule_id: Uuid },
    /// Delete a schedule: it fires no more; its fires and tasks stay.
    Delete { schedule_id: Uuid },
    /// A schedule's fires, newest first: the decision, the task and its status.
    Fires {
        schedule_id: Uuid,
        /// At most this many.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=10000))]
        limit: i64,
    },
}

/// `agentd schedule create`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("timing").required(true).args(["cron", "every"])))]
pub struct CreateArgs {
    /// The agent that runs each fire's task.
    #[arg(long)]
    pub agent: Uuid,
    /// A 5-field cron expression (minute hour day-of-month month day-of-week), e.g.
    /// "30 2 * * *", evaluated in --tz.
    #[arg(long, value_name = "EXPR", value_parser = cron_arg)]
    pub cron: Option<String>,
    /// A fixed interval instead: 30s, 5m, 1h, 1d, 1h30m (anchored at the Unix epoch, UTC).
    #[arg(long, value_name = "DURATION", value_parser = every_arg)]
    pub every: Option<String>,
    /// The IANA time zone of --cron (default UTC), e.g. Europe/Berlin; a local time DST
    /// skips does not fire, one it repeats fires once.
    #[arg(long, value_name = "TZ", value_parser = tz_arg)]
    pub tz: Option<String>,
    /// While the previous task has not ended: skip the fire, keep one (buffer_one), or
    /// run anyway (allow).
    #[arg(long, default_value = "skip", value_parser = ["skip", "buffer_one", "allow"])]
    pub overlap: String,
    /// Fires missed while no worker ran: run the latest one, none, or all (within
    /// --catch-up-window).
    #[arg(long = "catch-up", default_value = "latest", value_parser = ["latest", "none", "all"])]
    pub catch_up: String,
    /// How old a missed fire may be and still run, in seconds.
    #[arg(long = "catch-up-window", value_name = "SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(i64).range(0..=i64::from(i32::MAX)))]
    pub catch_up_window: i64,
    /// At most this many fires per UTC day (the rest are recorded capped).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=i64::from(i32::MAX)))]
    pub max_fires_per_day: Option<i64>,
    /// A name for people.
    #[arg(long)]
    pub name: Option<String>,
    /// What each task may spend, as JSON: {"max_tokens", "max_cost_usd", "max_tool_calls",
    /// "max_wall_secs", "on_breach": "answer"|"fail"|"pause"}.
    #[arg(long, value_parser = super::control::budget_arg)]
    pub budget: Option<Budget>,
    /// A constraint shown to the model (repeatable).
    #[arg(long = "constraint")]
    pub constraints: Vec<String>,
    /// The request each task gets.
    #[arg(long)]
    pub input: String,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
}

fn cron_arg(text: &str) -> Result<String, String> {
    CronExpr::parse(text)
        .map(|expr| expr.to_string())
        .map_err(|err| err.to_string())
}

fn every_arg(text: &str) -> Result<String, String> {
    Every::parse(text)
        .map(|every| every.to_string())
        .map_err(|err| err.to_string())
}

fn tz_arg(text: &str) -> Result<String, String> {
    parse_time_zone(text)
        .map(|tz| tz.name().to_owned())
        .map_err(|err| err.to_string())
}

/// Runs one `agentd schedule` command.
pub async fn run(settings: &Settings, command: ScheduleCommand) -> anyhow::Result<ExitCode> {
    let pool = crate::store::open(&settings.database.url, 2).await?;
    let now = Utc::now();
    let done = match command {
        ScheduleCommand::Create(args) => {
            let row = manage::create(&pool, settings, draft(*args), now).await;
            row.and_then(|row| Ok(outln!("{}", row.schedule_id)?))
        }
        ScheduleCommand::List { agent } => list(&pool, agent).await,
        ScheduleCommand::Show { schedule_id } => show(&pool, schedule_id).await,
        ScheduleCommand::Pause { schedule_id } => {
            let row = manage::set_paused(&pool, settings, schedule_id, true, now).await;
            row.and_then(|_| {
                Ok(outln!(
                    "schedule {schedule_id} paused: no fire until resumed"
                )?)
            })
        }
        ScheduleCommand::Resume { schedule_id } => {
            let row = manage::set_paused(&pool, settings, schedule_id, false, now).await;
            row.and_then(|row| {
                let next = when(row.next_fire_at);
                Ok(outln!("schedule {schedule_id} resumed: next fire {next}")?)
            })
        }
        ScheduleCommand::Trigger { schedule_id } => trigger(settings, &pool, schedule_id).await,
        ScheduleCommand::Delete { schedule_id } => {
            manage::delete(&pool, schedule_id).await.and_then(|()| {
                Ok(outln!(
                    "schedule {schedule_id} deleted; its fires and tasks stay"
                )?)
            })
        }
        ScheduleCommand::Fires { schedule_id, limit } => {
            fire_history(&pool, schedule_id, limit).await
        }
    };
    pool.close().await;
    match done {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(ManageError::Failed(err)) => Err(err),
        Err(err @ ManageError::Field(_)) => {
            errln!("agentd: {err}");
            Ok(ExitCode::from(2))
        }
        Err(err) => {
            errln!("agentd: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn draft(args: CreateArgs) -> Draft {
    Draft {
        agent_id: args.agent,
        name: args.name,
        cron: args.cron,
        every: args.every,
        every_secs: None,
        timezone: args.tz,
        input: args.input,
        overlap: Some(args.overlap),
        catch_up: Some(args.catch_up),
        catch_up_window_secs: Some(args.catch_up_window),
        max_fires_per_day: args.max_fires_per_day,
        task_template: TaskTemplate {
            constraints: args.constraints,
            budget: args.budget,
            ..TaskTemplate::default()
        },
        paused: args.paused,
    }
}

async fn trigger(
    settings: &Settings,
    pool: &sqlx::PgPool,
    schedule_id: Uuid,
) -> Result<(), ManageError> {
    if schedules::get(pool, schedule_id).await?.is_none() {
        return Err(ManageError::UnknownSchedule(schedule_id));
    }
    let publisher = amqp::connect_declared(settings).await?;
    let outlet = Outlet {
        publisher: &publisher,
        tasks_queue: &settings.amqp.tasks_queue,
    };
    let fired = manage::trigger(pool, outlet, schedule_id, Utc::now()).await;
    super::control::close(&publisher).await;
    let task_id = fired?.task_id.unwrap_or_default();
    Ok(outln!("{task_id}")?)
}

async fn list(pool: &sqlx::PgPool, agent: Option<Uuid>) -> Result<(), ManageError> {
    let rows = schedules::list(pool, agent).await?;
    let ids: Vec<Uuid> = rows.iter().map(|row| row.schedule_id).collect();
    let latest = fires::recent(pool, &ids, 1).await?;
    outln!(
        "{:<36}  {:<20}  {:<34}  {:<10}  {:<7}  {:<20}  last decision",
        "schedule_id",
        "name",
        "when",
        "overlap",
        "state",
        "next fire"
    )?;
    for row in &rows {
        let last = latest
            .iter()
            .find(|fire| fire.schedule_id == row.schedule_id)
            .map_or_else(String::new, |fire| {
                format!("{} {}", fire.decision, short(fire.fire_at))
            });
        outln!(
            "{:<36}  {:<20}  {:<34}  {:<10}  {:<7}  {:<20}  {last}",
            row.schedule_id,
            row.name.as_deref().unwrap_or("-"),
            timing(row),
            row.overlap,
            if row.paused { "paused" } else { "active" },
            when(row.next_fire_at),
        )?;
    }
    Ok(())
}

async fn show(pool: &sqlx::PgPool, schedule_id: Uuid) -> Result<(), ManageError> {
    let row = schedules::get(pool, schedule_id)
        .await?
        .ok_or(ManageError::UnknownSchedule(schedule_id))?;
    let cap = row
        .max_fires_per_day
        .map_or_else(|| "none".to_owned(), |max| format!("{max} per UTC day"));
    for (key, value) in [
        ("schedule_id", row.schedule_id.to_string()),
        ("name", row.name.clone().unwrap_or_else(|| "-".into())),
        ("agent_id", row.agent_id.to_string()),
        ("when", timing(&row)),
        ("input", row.input.clone()),
        ("task_template", row.task_template.to_string()),
        ("overlap", row.overlap.clone()),
        (
            "catch_up",
            format!("{} within {} s", row.catch_up, row.catch_up_window_secs),
        ),
        ("max_fires_per_day", cap),
        ("state", if row.paused { "paused" } else { "active" }.into()),
        ("next fire", when(row.next_fire_at)),
        ("buffered fire", when(row.buffered_fire_at)),
    ] {
        outln!("{key:<18} {value}")?;
    }
    outln!("latest fires:")?;
    fire_history(pool, schedule_id, 10).await
}

async fn fire_history(
    pool: &sqlx::PgPool,
    schedule_id: Uuid,
    limit: i64,
) -> Result<(), ManageError> {
    let history = fires::history(pool, schedule_id, None, limit).await?;
    if history.is_empty() && schedules::get(pool, schedule_id).await?.is_none() {
        return Err(ManageError::UnknownSchedule(schedule_id));
    }
    outln!(
        "{:<24}  {:<15}  {:<36}  task status",
        "fire_at",
        "decision",
        "task_id"
    )?;
    for fire in history {
        let task = fire
            .task_id
            .map_or_else(|| "-".to_owned(), |id| id.to_string());
        let status = fire.task_status.as_deref().unwrap_or("-");
        outln!(
            "{:<24}  {:<15}  {task:<36}  {status}",
            stamp(fire.fire_at),
            fire.decision
        )?;
    }
    Ok(())
}

/// `cron "30 2 * * *" Europe/Berlin` or `every 2s`.
fn timing(row: &ScheduleRow) -> String {
    match (&row.cron, row.every_secs) {
        (Some(cron), _) => format!("cron \"{cron}\" {}", row.timezone),
        (None, Some(secs)) => Every::from_secs(i64::from(secs)).map_or_else(
            |_| format!("every {secs}s"),
            |every| format!("every {every}"),
        ),
        (None, None) => "-".to_owned(),
    }
}

fn when(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "none".to_owned(), short)
}

fn short(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A failed write to stdout (a closed pipe) ends the command like any failure.
impl From<std::io::Error> for ManageError {
    fn from(err: std::io::Error) -> Self {
        Self::Failed(err.into())
    }
}
