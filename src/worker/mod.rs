//! The async driver: consumes `agentd.tasks`, runs each task through the core machine via
//! the ports, persists and publishes as it goes, and acknowledges, requeues or dead-letters
//! each message by rule. `run(settings, shutdown)` is the whole worker; tests pass their own
//! shutdown token.

pub mod deps;
pub mod events;
pub mod intake;
pub mod interrupt;

mod control;
mod delivery;
mod llm_call;
mod task_run;
mod tool_calls;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::FieldTable;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::amqp;
use crate::config::Settings;
use crate::core::prompt::PromptTemplate;
use crate::llm::OpenAiClient;
use crate::tools::ToolRegistry;
pub use delivery::{Disposition, Handled, RunningTasks, disposition};
pub use deps::WorkerDeps;

/// Seconds a task lease lasts without renewal.
const LEASE_SECS: f64 = 30.0;

/// Builds the worker's dependencies from settings: database (created and migrated), broker
/// (topology declared), LLM client, tools and prompt.
pub async fn connect(settings: &Settings) -> anyhow::Result<(WorkerDeps, lapin::Connection)> {
    let template_text =
        std::fs::read_to_string(&settings.worker.prompt_path).with_context(|| {
            format!(
                "reading the prompt template {}",
                settings.worker.prompt_path.display()
            )
        })?;
    let template = PromptTemplate::new(template_text).context("invalid prompt template")?;
    let pool = crate::store::prepare(&settings.database.url, settings.pool_size()).await?;
    let (connection, publisher) = amqp::connect_declared(settings).await?;
    let llm = OpenAiClient::new(&settings.llm.client_settings())?;
    let deps = WorkerDeps {
        pool,
        publisher,
        llm: Arc::new(llm),
        tools: Arc::new(ToolRegistry::builtin()),
        template: Arc::new(template),
        retry: settings.llm.retry.clone(),
        names: settings.amqp.clone(),
        worker_id: Uuid::now_v7(),
        lease_secs: LEASE_SECS,
        max_message_bytes: settings.worker.max_message_bytes,
    };
    Ok((deps, connection))
}

/// Runs the worker until `shutdown` fires, then drains: stops consuming, gives in-flight
/// tasks `worker.shutdown_grace_secs` to finish, and requeues the rest (resumable).
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (deps, connection) = connect(&settings).await?;
    serve(deps, &connection, &settings, shutdown).await?;
    let _ = connection.close(200, "worker stopped".into()).await;
    Ok(())
}

/// The consume loop over an established connection.
pub async fn serve(
    deps: WorkerDeps,
    connection: &lapin::Connection,
    settings: &Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let running = RunningTasks::default();
    let control =
        control::spawn(connection, &settings.amqp.control_exchange, running.clone()).await?;
    let channel = connection
        .create_channel()
        .await
        .context("opening the consumer channel")?;
    channel
        .basic_qos(settings.worker.concurrency, BasicQosOptions::default())
        .await
        .context("setting the prefetch count")?;
    let tag = format!("agentd-{}", deps.worker_id);
    let mut consumer = channel
        .basic_consume(
            settings.amqp.tasks_queue.as_str().into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("consuming the tasks queue")?;
    tracing::info!(worker_id = %deps.worker_id, queue = %settings.amqp.tasks_queue,
        concurrency = settings.worker.concurrency, "worker consuming");
    let tracker = TaskTracker::new();
    let deps = Arc::new(deps);
    loop {
        let delivery = tokio::select! {
            () = shutdown.cancelled() => break,
            delivery = consumer.next() => delivery,
        };
        match delivery {
            Some(Ok(delivery)) => {
                let (deps, running) = (Arc::clone(&deps), running.clone());
                tracker.spawn(async move { process(&deps, &running, delivery).await });
            }
            Some(Err(err)) => {
                tracing::error!(error = %err, "consumer error");
                anyhow::bail!("the task consumer failed: {err}");
            }
            None => anyhow::bail!("the task consumer was cancelled by the broker"),
        }
    }
    tracing::info!("shutting down: no new tasks, draining in-flight ones");
    let _ = channel
        .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
        .await;
    tracker.close();
    let grace = Duration::from_secs(settings.worker.shutdown_grace_secs);
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("grace period over: releasing unfinished tasks for another worker");
        running.release_all();
        tracker.wait().await;
    }
    control.cancel();
    Ok(())
}

/// Handles one delivery and settles it with the broker.
async fn process(deps: &WorkerDeps, running: &RunningTasks, delivery: Delivery) {
    let content_type = delivery
        .properties
        .content_type()
        .as_ref()
        .map(|kind| kind.as_str().to_owned());
    let handled = delivery::handle(deps, running, &delivery.data, content_type.as_deref()).await;
    let settled = match disposition(&handled) {
        Disposition::Ack => delivery.acker.ack(BasicAckOptions::default()).await,
        Disposition::Requeue => {
            delivery
                .acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await
        }
        Disposition::DeadLetter(reason) => {
            let names = &deps.names;
            match deps
                .publisher
                .dead_letter(
                    &names.dead_letter_queue,
                    &delivery.data,
                    &delivery.properties,
                    &reason,
                )
                .await
            {
                Ok(()) => delivery.acker.ack(BasicAckOptions::default()).await,
                Err(err) => {
                    tracing::error!(error = %format!("{err:#}"), "dead-lettering failed; requeueing");
                    delivery
                        .acker
                        .nack(BasicNackOptions {
                            requeue: true,
                            ..BasicNackOptions::default()
                        })
                        .await
                }
            }
        }
    };
    if let Err(err) = settled {
        tracing::warn!(error = %err, "could not settle the delivery with the broker");
    }
}
