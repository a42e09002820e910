//! The control consumer: every worker binds its own exclusive queue to the `agentd.control`
//! fanout exchange and cancels the tasks named by `cancel` messages. It reconnects when the
//! broker connection is lost, until shutdown.

use std::sync::Arc;

use anyhow::Context;
use futures::StreamExt;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::running::RunningTasks;
use crate::amqp::Broker;

#[derive(Debug, Deserialize)]
struct CancelMessage {
    task_id: Uuid,
}

/// Consumes control messages until `shutdown`.
pub fn spawn(
    broker: Arc<Broker>,
    exchange: String,
    running: RunningTasks,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(channel) = broker.channel_with_retry(&shutdown).await {
            match listen(&channel, &exchange, &running, &shutdown).await {
                Ok(()) => return,
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), "control consumer lost; reconnecting");
                }
            }
        }
    })
}

async fn listen(
    channel: &lapin::Channel,
    exchange: &str,
    running: &RunningTasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut consumer = crate::amqp::subscriber::consume_fanout(channel, exchange)
        .await
        .context("consuming control messages")?;
    loop {
        let delivery = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            delivery = consumer.next() => delivery,
        };
        let delivery = match delivery {
            Some(Ok(delivery)) => delivery,
            Some(Err(err)) => anyhow::bail!("control consumer failed: {err}"),
            None => anyhow::bail!("control consumer cancelled"),
        };
        let kind = delivery
            .properties
            .kind()
            .as_ref()
            .map(|kind| kind.as_str());
        if kind != Some("cancel") {
            continue;
        }
        match serde_json::from_slice::<CancelMessage>(&delivery.data) {
            Ok(message) => {
                let here = running.cancel(message.task_id);
                tracing::info!(task_id = %message.task_id, running_here = here, "cancel requested");
            }
            Err(err) => tracing::warn!(error = %err, "unreadable cancel message ignored"),
        }
    }
}
