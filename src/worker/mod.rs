//! The worker process and the run of a task. `run(settings, shutdown)` is the whole worker
//! (tests pass their own shutdown token): it connects (`deps`), starts the sidecars
//! (`sidecars`: metrics, retention) and the loops of `lifecycle`, and consumes
//! `agentd.tasks`, handing each delivery to the run and settling it with the broker by
//! rule (ack, requeue or dead-letter: [`disposition`]).
//!
//! The run, from a delivery to its ack: `delivery` (parse with `contract::intake`, record
//! and claim, `known_id`), `drive` (the loop around the core machine) over `task_run` (the
//! run's state and its step commits), the phases `llm_call` (`llm_deltas`, `llm_record`)
//! and `tool_calls` (`tool_plan`, `unknown`), `step_commit` with `committer` (group
//! commit), and `unstored` (a step PostgreSQL refused for good). Events go out through
//! `outbox`; a task that waits or ends is handed to `lifecycle`.

pub mod deps;
pub mod sidecars;

mod committer;
mod delivery;
mod drive;
mod known_id;
mod llm_call;
mod llm_deltas;
mod llm_record;
mod rerun;
mod start;
mod step_commit;
mod task_run;
mod tool_calls;
mod tool_plan;
mod unknown;
mod unstored;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::FieldTable;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::amqp;
use crate::amqp::subscriber::Next;
use crate::config::Settings;
use crate::core::prompt::PromptTemplate;
use crate::lifecycle::running::RunningTasks;
use crate::lifecycle::{self, Fleet};
use crate::llm::{LlmSettings, OpenAiClient};
use crate::outbox;
use crate::store::replies::ReplyRoute;
use crate::tools::ToolRegistry;
pub use delivery::{Disposition, Handled, disposition};
pub use deps::WorkerDeps;

/// Builds the worker's dependencies from settings: database (created and migrated), broker
/// (topology declared), LLM client, tools and prompt.
pub async fn connect(settings: &Settings) -> anyhow::Result<WorkerDeps> {
    let template_text = settings.worker.prompt_text()?;
    let template = PromptTemplate::new(template_text).context("invalid prompt template")?;
    let pool = crate::store::prepare(&settings.database.url, settings.pool_size()).await?;
    let publisher = amqp::connect_declared(settings).await?;
    let llm = OpenAiClient::new(&LlmSettings::from(&settings.llm))?;
    let marks = outbox::ConfirmedMarks::start(pool.clone());
    let committer = committer::Committer::start(pool.clone());
    let replies = outbox::replies::Replies::start(pool.clone(), publisher.clone());
    let priced: Vec<String> = settings.prices.keys().cloned().collect();
    let buckets: Vec<String> = settings
        .llm
        .limits
        .iter()
        .map(|l| l.bucket().to_owned())
        .collect();
    crate::metrics::register_llm(&priced, &buckets);
    let fleet = Fleet {
        pool,
        publisher,
        names: settings.amqp.clone(),
        worker_id: Uuid::now_v7(),
        control: Arc::new(settings.control.clone()),
    };
    Ok(WorkerDeps {
        fleet,
        llm: Arc::new(llm),
        tools: Arc::new(ToolRegistry::from_settings(&settings.tools).await?),
        template: Arc::new(template),
        retry: settings.llm.retry.clone(),
        lease_secs: settings.worker.lease_secs,
        max_message_bytes: settings.worker.max_message_bytes,
        tool_concurrency: settings.worker.tool_concurrency.max(1),
        tool_timeout: Duration::from_millis(settings.worker.tool_timeout_ms),
        recursion_timeout: Duration::from_millis(settings.worker.recursion_timeout_ms),
        turn_settle: Duration::from_millis(settings.worker.turn_settle_ms),
        limits: settings.limits.clone(),
        marks,
        committer,
        replies,
        prices: Arc::new(settings.prices.clone()),
        rate_limits: settings.llm.limits.clone().into(),
        telemetry: crate::otel::Telemetry::disabled(),
        max_delta_bytes: settings.llm.max_delta_bytes,
        max_delta_events: settings.llm.max_delta_events,
        record: settings.llm.record,
        redactor: Arc::new(crate::core::call_record::Redactor::new(
            &settings.llm.record_redact,
        )?),
    })
}

/// Runs the worker until `shutdown` fires, then drains: stops consuming, gives in-flight
/// tasks `worker.shutdown_grace_secs` to finish, and requeues the rest (resumable).
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (telemetry, exporter) = crate::otel::Telemetry::start(&settings.otel)?;
    let mut deps = connect(&settings).await?;
    deps.telemetry = telemetry;
    let _sidecars = sidecars::start(&settings, &deps, &shutdown).await?;
    let publisher = deps.fleet.publisher.clone();
    let broker = Arc::clone(publisher.broker());
    serve(deps, &settings, shutdown).await;
    if let Some(exporter) = exporter {
        let flushed = tokio::task::spawn_blocking(move || exporter.shutdown());
        if tokio::time::timeout(STOP_WAIT, flushed).await.is_err() {
            tracing::warn!("the OpenTelemetry exporter did not flush in time; exiting anyway");
        }
    }
    publisher.close().await;
    if tokio::time::timeout(STOP_WAIT, broker.close())
        .await
        .is_err()
    {
        tracing::warn!("the broker connection did not close in time; exiting anyway");
    }
    Ok(())
}

/// How long each part of the worker gets to stop once shutdown is decided: nothing on the
/// way out waits without a bound.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The consume loop. A lost channel or connection is reopened with backoff while in-flight
/// tasks go on; their deliveries come back and are settled by rule (see `delivery`).
pub async fn serve(deps: WorkerDeps, settings: &Settings, shutdown: CancellationToken) {
    let running = RunningTasks::default();
    let broker = Arc::clone(deps.fleet.publisher.broker());
    let tracker = TaskTracker::new();
    let deps = Arc::new(deps);
    lifecycle::control::drain_pending(&deps.fleet, &running).await;
    let mut loops = lifecycle::spawn(&deps.fleet, settings, &running, &shutdown);
    loops.push(crate::scheduler::spawn(
        settings,
        deps.fleet.publisher.clone(),
        deps.fleet.worker_id,
        shutdown.clone(),
    ));
    tracing::info!(worker_id = %deps.fleet.worker_id, queue = %settings.amqp.tasks_queue,
        concurrency = settings.worker.concurrency, "worker started");
    // Kept open until the in-flight tasks are settled: their acknowledgements go through it.
    let mut consumer_channel = None;
    while let Some(channel) = broker.channel_with_retry(&shutdown).await {
        match consume(&deps, &running, &tracker, &channel, settings, &shutdown).await {
            Ok(()) => {
                consumer_channel = Some(channel);
                break;
            }
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "task consumer lost; reconnecting")
            }
        }
    }
    tracing::info!("shutting down: no new tasks, draining in-flight ones");
    tracker.close();
    let grace = Duration::from_secs(settings.worker.shutdown_grace_secs);
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("grace period over: releasing unfinished tasks for another worker");
        running.release_all();
        if tokio::time::timeout(STOP_WAIT, tracker.wait())
            .await
            .is_err()
        {
            // Their leases expire and their messages come back: nothing is lost.
            tracing::warn!("tasks still stopping; leaving them to their leases");
        }
    }
    let stopping = futures::future::join_all(loops);
    if tokio::time::timeout(STOP_WAIT, stopping).await.is_err() {
        tracing::warn!("background loops still stopping; exiting anyway");
    }
    if let Some(channel) = consumer_channel {
        amqp::broker::close_channel(&channel).await;
    }
}

/// Consumes on `channel` until shutdown (`Ok`) or until the channel fails (`Err`).
async fn consume(
    deps: &Arc<WorkerDeps>,
    running: &RunningTasks,
    tracker: &TaskTracker,
    channel: &lapin::Channel,
    settings: &Settings,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    channel
        .basic_qos(settings.worker.concurrency, BasicQosOptions::default())
        .await
        .context("setting the prefetch count")?;
    let tag = format!("agentd-{}", Uuid::now_v7());
    let mut consumer = channel
        .basic_consume(
            settings.amqp.tasks_queue.as_str().into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("consuming the tasks queue")?;
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => {
                let _ = channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()).await;
                return Ok(());
            }
            next = amqp::subscriber::next_delivery(&mut consumer, channel) => next,
        };
        match next.context("the task consumer")? {
            Next::Delivery(delivery) => {
                let arrival = delivery::Arrival::now();
                let (deps, running) = (Arc::clone(deps), running.clone());
                let shutdown = shutdown.clone();
                tracker.spawn(async move {
                    process(&deps, &running, (*delivery, arrival), &shutdown).await
                });
            }
            Next::Cancelled => anyhow::bail!("the task consumer was cancelled by the broker"),
        }
    }
}

/// Handles one delivery and settles it with the broker.
async fn process(
    deps: &WorkerDeps,
    running: &RunningTasks,
    (delivery, arrival): (Delivery, delivery::Arrival),
    shutdown: &CancellationToken,
) {
    let _in_flight = crate::metrics::track_in_flight();
    let properties = &delivery.properties;
    let content_type = properties.content_type().as_ref().map(|kind| kind.as_str());
    let reply = ReplyRoute::from_properties(
        properties.reply_to().as_ref().map(|to| to.as_str()),
        properties.correlation_id().as_ref().map(|id| id.as_str()),
    );
    let (body, route) = (&delivery.data, (reply, arrival));
    let handled = delivery::handle(deps, running, body, content_type, route, shutdown).await;
    let requeue = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    let settled = match disposition(&handled) {
        Disposition::Ack => delivery.acker.ack(BasicAckOptions::default()).await,
        Disposition::Requeue => delivery.acker.nack(requeue).await,
        Disposition::DeadLetter(reason) => {
            let names = &deps.fleet.names;
            let dead = deps
                .fleet
                .publisher
                .dead_letter(
                    &names.dead_letter_queue,
                    &delivery.data,
                    &delivery.properties,
                    &reason,
                )
                .await;
            match dead {
                Ok(()) => {
                    crate::metrics::observe_dead_letter();
                    delivery.acker.ack(BasicAckOptions::default()).await
                }
                Err(err) => {
                    tracing::error!(error = %format!("{err:#}"), "dead-lettering failed; requeueing");
                    delivery.acker.nack(requeue).await
                }
            }
        }
    };
    if let Err(err) = settled {
        // The channel is gone: the broker redelivers the message, and its next handler
        // settles it by the same rule (a finished task is acknowledged unrun).
        tracing::warn!(error = %err, "could not settle the delivery with the broker");
    }
}
