//! The control consumer: every worker binds its own exclusive queue to the `agentd.control`
//! fanout exchange and cancels the running tasks named by `cancel` messages.

use anyhow::Context;
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::delivery::RunningTasks;

#[derive(Debug, Deserialize)]
struct CancelMessage {
    task_id: Uuid,
}

/// Starts consuming control messages; the returned token stops it.
pub async fn spawn(
    connection: &lapin::Connection,
    exchange: &str,
    running: RunningTasks,
) -> anyhow::Result<CancellationToken> {
    let channel = connection
        .create_channel()
        .await
        .context("opening the control channel")?;
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .context("declaring the control queue")?;
    channel
        .queue_bind(
            queue.name().clone(),
            exchange.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("binding the control queue")?;
    let mut consumer = channel
        .basic_consume(
            queue.name().clone(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .context("consuming control messages")?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        loop {
            let delivery = tokio::select! {
                () = stopped.cancelled() => return,
                delivery = consumer.next() => delivery,
            };
            let Some(Ok(delivery)) = delivery else { return };
            let kind = delivery
                .properties
                .kind()
                .as_ref()
                .map(|kind| kind.as_str().to_owned());
            if kind.as_deref() == Some("cancel") {
                match serde_json::from_slice::<CancelMessage>(&delivery.data) {
                    Ok(message) => {
                        let here = running.cancel(message.task_id);
                        tracing::info!(task_id = %message.task_id, running_here = here, "cancel requested");
                    }
                    Err(err) => tracing::warn!(error = %err, "unreadable cancel message ignored"),
                }
            }
            let _ = delivery.acker.ack(BasicAckOptions::default()).await;
        }
    });
    Ok(stop)
}
