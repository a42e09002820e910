//! `agentd eval run | resume | cancel | report` (CONTRACT v3 §13): evaluation runs for people.
//!
//! - `eval run --agent A [--version V | --channel C] --where SQL [--limit N] [--llm live |
//!   recorded] [--tools recorded | live] [--rate R] [--name NAME]` makes the run
//!   (`lifecycle::evals::create`), prints its eval_run_id at once, then publishes the reruns
//!   at `--rate` per second. A condition PostgreSQL refuses, or one that selects nothing,
//!   is exit 1 with nothing created.
//! - `eval resume RUN [--rate R]` publishes again the items whose rerun has not ended (after
//!   a crash); a rerun already known to the workers is not run twice. A cancelled run is
//!   refused (exit 1).
//! - `eval cancel RUN` stops a running run: the reruns not sent yet are never sent (a
//!   publisher still at it stops at its next message), those in flight are cancelled like
//!   any task, and their items are filled as they end. A run that is not running: exit 1.
//! - `eval report RUN [--min-pass RATIO]` fills what ended, prints one line per item and a
//!   summary; exit 2 while the run is still running, 1 when it is over and its pass ratio
//!   is below RATIO (or it was cancelled), else 0 (`core::eval::report_exit`): a CI gate.

use std::process::ExitCode;

use uuid::Uuid;

use super::out::{errln, outln};
use crate::amqp;
use crate::config::Settings;
use crate::core::eval::{self, Mode, RunStatus, Tally};
use crate::lifecycle::evals::{self, EvalError, RunSpec, Selection, Target};
use crate::store::evals::{self as rows, ItemRow, RunRow};
use crate::store::readers::Readers;
use crate::store::{self};

/// `agentd eval ...`.
#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Rerun an agent's ended tasks that a SQL condition selects against a version, and
    /// print the eval_run_id.
    Run(Box<RunArgs>),
    /// Publish again the reruns of a run that have not ended (after a crash).
    Resume {
        eval_run_id: Uuid,
        /// At most this many rerun messages per second (`20/s`, `20`, `600/m`).
        #[arg(long, default_value = "10/s")]
        rate: String,
    },
    /// Stop a running run: its reruns not sent yet are dropped, those in flight cancelled.
    Cancel { eval_run_id: Uuid },
    /// Print a run's items and summary; exit 2 while running, 1 below --min-pass (or, with
    /// --min-pass, when the run was cancelled).
    Report {
        eval_run_id: Uuid,
        /// The pass ratio (0 to 1) a completed run must reach, else exit 1.
        #[arg(long, value_parser = min_pass_arg)]
        min_pass: Option<f64>,
    },
}

/// `agentd eval run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The agent whose tasks are rerun.
    #[arg(long)]
    pub agent: Uuid,
    /// Rerun on this version of the agent.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..), conflicts_with = "channel")]
    pub version: Option<i32>,
    /// Rerun on the version this channel serves (stable, canary, …). Neither flag: each
    /// rerun takes its source's version.
    #[arg(long)]
    pub channel: Option<String>,
    /// A SQL condition over `tasks` (run read-only, only over the agent's ended tasks),
    /// e.g. "status = 'completed' AND created_at > now() - interval '1 day'".
    #[arg(long = "where", value_name = "SQL")]
    pub condition: String,
    /// At most this many tasks (oldest first).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
    pub limit: i64,
    /// Where the reruns' model replies come from: live (default) or recorded.
    #[arg(long, default_value = "live", value_parser = mode_arg)]
    pub llm: Mode,
    /// Where the reruns' tool results come from: recorded (default) or live.
    #[arg(long, default_value = "recorded", value_parser = mode_arg)]
    pub tools: Mode,
    /// At most this many rerun messages per second (`20/s`, `20`, `600/m`).
    #[arg(long, default_value = "10/s")]
    pub rate: String,
    /// A name for the run.
    #[arg(long)]
    pub name: Option<String>,
}

fn mode_arg(text: &str) -> Result<Mode, String> {
    Mode::parse(text)
}

fn min_pass_arg(text: &str) -> Result<f64, String> {
    eval::parse_min_pass(text)
}

/// Runs an `agentd eval` command.
pub async fn run(settings: &Settings, command: EvalCommand) -> anyhow::Result<ExitCode> {
    match command {
        EvalCommand::Run(args) => start(settings, &args).await,
        EvalCommand::Resume { eval_run_id, rate } => resume(settings, eval_run_id, &rate).await,
        EvalCommand::Cancel { eval_run_id } => cancel(settings, eval_run_id).await,
        EvalCommand::Report {
            eval_run_id,
            min_pass,
        } => report(settings, eval_run_id, min_pass).await,
    }
}

async fn start(settings: &Settings, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let rate = super::replay::parse_rate(&args.rate).map_err(|e| anyhow::anyhow!("--rate {e}"))?;
    eval::check_where(&args.condition).map_err(|e| anyhow::anyhow!("--where: {e}"))?;
    let target = match (args.version, &args.channel) {
        (Some(version), _) => Target::Version(version),
        (None, Some(channel)) => Target::Channel(channel.clone()),
        (None, None) => Target::SourceVersion,
    };
    let spec = RunSpec {
        agent_id: args.agent,
        target,
        selection: Selection::Condition {
            condition: args.condition.clone(),
            limit: args.limit,
        },
        llm: args.llm,
        tools: args.tools,
        rate,
        name: args
            .name
            .as_deref()
            .map(crate::core::storable::text)
            .map(Into::into),
    };
    let pool = store::open(&settings.database.url, 2).await?;
    let readers = Readers::new(pool.clone(), &settings.database, 2)?;
    let run = match evals::create(&pool, &readers, &spec, |_| true).await {
        Ok(run) => run,
        Err(EvalError::Failed(err)) => return Err(err),
        Err(refused) => {
            errln!("agentd: cannot start the evaluation: {refused}");
            return Ok(ExitCode::FAILURE);
        }
    };
    outln!("{}", run.eval_run_id)?;
    let publisher = amqp::connect_declared(settings).await?;
    let sent = evals::publish(&pool, &publisher, &settings.amqp.tasks_queue, &run, rate).await;
    super::control::close(&publisher).await;
    let sent = sent?;
    if rows::get(&pool, run.eval_run_id)
        .await?
        .is_some_and(|now| now.status == "cancelled")
    {
        errln!("published {sent} rerun(s); the run was cancelled, nothing more is sent");
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "published {} rerun(s); follow with `agentd eval report {}`",
        sent,
        run.eval_run_id
    );
    Ok(ExitCode::SUCCESS)
}

async fn resume(settings: &Settings, run_id: Uuid, rate: &str) -> anyhow::Result<ExitCode> {
    let rate = super::replay::parse_rate(rate).map_err(|e| anyhow::anyhow!("--rate {e}"))?;
    let pool = store::open(&settings.database.url, 2).await?;
    let Some(run) = rows::get(&pool, run_id).await? else {
        errln!("agentd: no evaluation run {run_id}");
        return Ok(ExitCode::FAILURE);
    };
    if run.status == "cancelled" {
        errln!("agentd: evaluation run {run_id} was cancelled; nothing is published again");
        return Ok(ExitCode::FAILURE);
    }
    let publisher = amqp::connect_declared(settings).await?;
    let sent = evals::publish(&pool, &publisher, &settings.amqp.tasks_queue, &run, rate).await;
    super::control::close(&publisher).await;
    errln!("published {} rerun(s) again", sent?);
    Ok(ExitCode::SUCCESS)
}

async fn cancel(settings: &Settings, run_id: Uuid) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let Some(run) = rows::get(&pool, run_id).await? else {
        errln!("agentd: no evaluation run {run_id}");
        return Ok(ExitCode::FAILURE);
    };
    if run.status != "running" {
        errln!(
            "agentd: evaluation run {run_id} is {} already; nothing to cancel",
            run.status
        );
        return Ok(ExitCode::FAILURE);
    }
    let publisher = amqp::connect_declared(settings).await?;
    let cancelled = evals::cancel(&pool, &publisher, settings, run_id).await;
    super::control::close(&publisher).await;
    match cancelled? {
        Some((done, unreached)) => {
            outln!(
                "cancelled evaluation run {run_id}: {} rerun(s) not sent, {} in flight cancelled",
                done.unsent,
                done.in_flight.len() - unreached.len()
            )?;
            if unreached.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            for task_id in &unreached {
                errln!("agentd: rerun {task_id} was not cancelled; `agentd cancel {task_id}`");
            }
            Ok(ExitCode::FAILURE)
        }
        None => {
            errln!("agentd: evaluation run {run_id} ended meanwhile; nothing to cancel");
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn report(
    settings: &Settings,
    run_id: Uuid,
    min_pass: Option<f64>,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    if rows::get(&pool, run_id).await?.is_none() {
        errln!("agentd: no evaluation run {run_id}");
        return Ok(ExitCode::FAILURE);
    }
    rows::settle::settle(&pool, Some(run_id)).await?;
    let Some(run) = rows::get(&pool, run_id).await? else {
        errln!("agentd: no evaluation run {run_id}");
        return Ok(ExitCode::FAILURE);
    };
    let items = rows::items(&pool, run_id).await?;
    outln!(
        "{:<36}  {:<36}  {:<9}  {:<6}  {:<6}  {:<7}  {:>8}  {:>7}  {:>8}  {:>10}",
        "source_task_id",
        "rerun_task_id",
        "status",
        "passed",
        "answer",
        "actions",
        "diverged",
        "Δiter",
        "Δtokens",
        "Δcost_usd"
    )?;
    for item in &items {
        outln!("{}", item_line(item))?;
    }
    let tally = tally(&items);
    let status = RunStatus::parse(&run.status).unwrap_or(RunStatus::Running);
    outln!("{}", summary(&run, tally))?;
    Ok(ExitCode::from(eval::report_exit(status, tally, min_pass)))
}

fn flag(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

fn number<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn item_line(item: &ItemRow) -> String {
    format!(
        "{:<36}  {:<36}  {:<9}  {:<6}  {:<6}  {:<7}  {:>8}  {:>7}  {:>8}  {:>10}",
        item.source_task_id,
        item.rerun_task_id,
        item.status,
        flag(item.passed),
        flag(item.answer_equal),
        flag(item.actions_equal),
        number(item.first_divergence_iteration),
        number(item.iterations_delta),
        number(item.tokens_delta),
        item.cost_delta_usd
            .map_or_else(|| "-".to_owned(), |c| format!("{c:.6}")),
    )
}

/// Items, finished items and passed items of a run.
pub fn tally(items: &[ItemRow]) -> Tally {
    Tally {
        items: items.len() as u64,
        finished: items
            .iter()
            .filter(|i| eval::FINAL.contains(&i.status.as_str()))
            .count() as u64,
        passed: items.iter().filter(|i| i.passed == Some(true)).count() as u64,
    }
}

fn summary(run: &RunRow, tally: Tally) -> String {
    let name = run
        .name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    format!(
        "run {}{name}: {}, {} of {} item(s) ended, {} passed, pass ratio {:.3}",
        run.eval_run_id,
        run.status,
        tally.finished,
        tally.items,
        tally.passed,
        tally.pass_ratio()
    )
}
