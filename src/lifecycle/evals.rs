//! Evaluation runs (CONTRACT v3 §13), the commands `agentd eval` and `/v1/evals` share:
//! [`create`] checks the agent and the version, selects the tasks (on the read replica when
//! there is one) and makes the run with its `pending` items in one transaction;
//! [`publish`] sends each item's rerun message at a bounded rate, until the run is
//! cancelled ([`cancel`]: the items not sent yet are dropped, the reruns in flight are
//! cancelled like any task); [`spawn_sweep`] is the pass every worker runs that fills the
//! items whose rerun ended (`store::evals::settle`).
//!
//! A rerun's task_id is UUIDv5(eval_run_id, source_task_id), so publishing a run again
//! (after a crash, or `agentd eval resume`) sends the same ids, and a worker runs a task
//! id it knows once: nothing is rerun twice. This room never runs a rerun itself.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::contract::eval_rerun::{RerunField, RerunMessage};
use crate::core::eval::Mode;
use crate::store::evals::select::{self, ConditionError, Fields};
use crate::store::evals::{self as rows, NewRun, Outgoing, RunRow};
use crate::store::readers::Readers;
use crate::store::{agents, versions};

/// How often a worker fills the items whose rerun ended.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// The longest pause between two rerun messages, in seconds.
const MAX_PAUSE_SECS: f64 = 3600.0;

/// The version a run evaluates: a version, a channel, or each source's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Version(i32),
    Channel(String),
    SourceVersion,
}

/// Which tasks a run takes.
#[derive(Debug, Clone)]
pub enum Selection {
    /// The operator's SQL condition over `tasks` (the CLI only), at most `limit`.
    Condition { condition: String, limit: i64 },
    /// A structured selection (the gateway).
    Fields(Fields),
}

/// A run to make.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub agent_id: Uuid,
    pub target: Target,
    pub selection: Selection,
    pub llm: Mode,
    pub tools: Mode,
    /// Rerun messages per second.
    pub rate: f64,
    pub name: Option<String>,
}

/// Why no run was made. Nothing is created in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("no agent {0}")]
    UnknownAgent(Uuid),
    #[error("agent {0} has no version {1}")]
    UnknownVersion(Uuid, i32),
    #[error("agent {0} has no channel {1}")]
    UnknownChannel(Uuid, String),
    #[error("--where: PostgreSQL refused the condition: {0}")]
    Condition(String),
    #[error("no ended task of agent {0} matches the selection")]
    NothingSelected(Uuid),
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl From<sqlx::Error> for EvalError {
    fn from(err: sqlx::Error) -> Self {
        EvalError::Failed(err.into())
    }
}

/// Makes the run: agent and version checked, tasks selected, the run and its items
/// written in one transaction. `visible` says whether the caller may see the agent's
/// tenant (an agent it may not see is unknown).
pub async fn create(
    pool: &PgPool,
    readers: &Readers,
    spec: &RunSpec,
    visible: impl Fn(&str) -> bool,
) -> Result<RunRow, EvalError> {
    let agent = match agents::get(pool, spec.agent_id).await? {
        Some(agent) if visible(&agent.tenant_id) => agent,
        _ => return Err(EvalError::UnknownAgent(spec.agent_id)),
    };
    check_target(pool, spec.agent_id, &spec.target).await?;
    let sources = choose(readers, spec).await?;
    if sources.is_empty() {
        return Err(EvalError::NothingSelected(spec.agent_id));
    }
    let (agent_version, channel) = match &spec.target {
        Target::Version(version) => (Some(*version), None),
        Target::Channel(channel) => (None, Some(channel.clone())),
        Target::SourceVersion => (None, None),
    };
    let run = NewRun {
        eval_run_id: Uuid::now_v7(),
        name: spec.name.clone(),
        agent_id: spec.agent_id,
        agent_version,
        channel,
        selector: selector(&spec.selection),
        llm_mode: spec.llm.as_str().to_owned(),
        tools_mode: spec.tools.as_str().to_owned(),
        rate: spec.rate,
        tenant_id: agent.tenant_id,
    };
    rows::create(pool, &run, &sources).await?;
    rows::get(pool, run.eval_run_id)
        .await?
        .ok_or_else(|| EvalError::Failed(anyhow::anyhow!("the new run cannot be read back")))
}

async fn check_target(pool: &PgPool, agent_id: Uuid, target: &Target) -> Result<(), EvalError> {
    match target {
        Target::Version(version) => {
            if versions::get(pool, agent_id, *version).await?.is_none() {
                return Err(EvalError::UnknownVersion(agent_id, *version));
            }
        }
        Target::Channel(channel) => {
            let channels = versions::channels(pool, agent_id).await?;
            if !channels.iter().any(|row| &row.channel == channel) {
                return Err(EvalError::UnknownChannel(agent_id, channel.clone()));
            }
        }
        Target::SourceVersion => {}
    }
    Ok(())
}

/// The sources, read where readers read.
async fn choose(readers: &Readers, spec: &RunSpec) -> Result<Vec<Uuid>, EvalError> {
    let agent_id = spec.agent_id;
    let (pool, _) = readers.pick().await;
    match &spec.selection {
        Selection::Condition { condition, limit } => {
            select::by_condition(&pool, agent_id, condition, *limit)
                .await
                .map_err(|err| match err {
                    ConditionError::Refused(message) => EvalError::Condition(message),
                    ConditionError::Db(err) => err.into(),
                })
        }
        Selection::Fields(fields) => Ok(select::by_fields(&pool, agent_id, fields).await?),
    }
}

/// What `eval_runs.selector` keeps of a selection.
fn selector(selection: &Selection) -> Value {
    match selection {
        Selection::Condition { condition, limit } => json!({
            "where": crate::core::storable::text(condition),
            "limit": limit,
        }),
        Selection::Fields(fields) => json!({
            "task_ids": fields.task_ids,
            "status": fields.statuses,
            "since": fields.since,
            "limit": fields.limit,
        }),
    }
}

/// The rerun message of one item of `run`.
pub fn message(run: &RunRow, item: &Outgoing) -> RerunMessage {
    RerunMessage {
        task_id: item.rerun_task_id,
        agent_id: item.agent_id,
        input: item.input.clone(),
        agent_version: run.agent_version,
        channel: run.channel.clone(),
        tenant_id: item.tenant_id.clone(),
        rerun: RerunField {
            source_task_id: item.source_task_id,
            llm: Mode::parse(&run.llm_mode).unwrap_or(Mode::Live),
            tools: Mode::parse(&run.tools_mode).unwrap_or(Mode::Recorded),
        },
    }
}

/// Publishes the rerun message of every item of `run` whose rerun has not ended, at most
/// `rate` per second, marking each `published`; returns how many it sent. Safe to repeat:
/// the ids are the same each time.
pub async fn publish(
    pool: &PgPool,
    publisher: &Publisher,
    tasks_queue: &str,
    run: &RunRow,
    rate: f64,
) -> anyhow::Result<u64> {
    let items = rows::outgoing(pool, run.eval_run_id).await?;
    // At least one message an hour, whatever tiny rate was asked for.
    let pause = Duration::from_secs_f64((1.0 / rate).clamp(0.0, MAX_PAUSE_SECS));
    let mut next = tokio::time::Instant::now();
    let mut sent = 0;
    for item in &items {
        tokio::time::sleep_until(next).await;
        next += pause;
        let body = message(run, item).to_body()?;
        // Marked before it is sent: a run cancelled meanwhile sends nothing more. A message
        // marked and then lost to a crash goes out with `agentd eval resume`.
        if !rows::mark_published(pool, run.eval_run_id, item.source_task_id).await? {
            break;
        }
        publisher.publish_task(tasks_queue, &body).await?;
        sent += 1;
    }
    Ok(sent)
}

/// Cancels `run` (see [`rows::cancel`]) and then each of its reruns in flight, as
/// `agentd cancel` would; `None` when the run was not running. The run stays cancelled
/// whatever happens to those cancels: the reruns one could not reach (the broker away)
/// are returned, to be cancelled by id (`agentd cancel`), or left to end on their own.
pub async fn cancel(
    pool: &PgPool,
    publisher: &Publisher,
    settings: &crate::config::Settings,
    run: Uuid,
) -> anyhow::Result<Option<(rows::Cancelled, Vec<Uuid>)>> {
    let Some(cancelled) = rows::cancel(pool, run).await? else {
        return Ok(None);
    };
    let mut unreached = Vec::new();
    for task_id in &cancelled.in_flight {
        if let Err(err) = super::cancel::cancel_task(pool, publisher, settings, *task_id).await {
            tracing::warn!(eval_run_id = %run, %task_id, error = %format!("{err:#}"),
                "a rerun of a cancelled evaluation run was not cancelled");
            unreached.push(*task_id);
        }
    }
    Ok(Some((cancelled, unreached)))
}

/// The pass every worker runs every [`SWEEP_EVERY`] until `stop`: items whose rerun ended
/// are filled and finished runs marked completed.
pub fn spawn_sweep(pool: PgPool, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pool = &pool;
        let pass = move || async move {
            rows::settle::settle(pool, None).await?;
            Ok(())
        };
        super::sweep::every(SWEEP_EVERY, &stop, "the evaluation sweep", pass).await;
    })
}
