//! Task messages the broker dead-lettered (CONTRACT §3: reason `delivery_limit`). The tasks
//! queue dead-letters through a fanout exchange into `agentd.tasks.dead` (kept for
//! operators) and into `deaths_queue`, which the workers consume in turn: the task of a
//! message that died ends `failed`, reason `delivery_limit`, with its terminal event, within
//! seconds, unless a live worker still holds it (a consumer cut by the broker's
//! `consumer_timeout` while its worker runs on: that worker finishes the task).

use std::sync::Arc;

use anyhow::Context;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::control::{Holder, alive_holder};
use super::fleet::Fleet;
use super::unheld::{self, Sink};
use crate::amqp;
use crate::amqp::subscriber::Next;
use crate::contract::intake::task_id_of;

/// Dead letters handled at once.
const PREFETCH: u16 = 8;

/// Consumes the deaths queue until `shutdown`, reconnecting when the broker is lost.
pub fn spawn(
    fleet: Arc<Fleet>,
    max_deliveries: u32,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let broker = Arc::clone(fleet.publisher.broker());
        while let Some(channel) = broker.channel_with_retry(&shutdown).await {
            match listen(&fleet, &channel, max_deliveries, &shutdown).await {
                Ok(()) => return amqp::broker::close_channel(&channel).await,
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), "deaths consumer lost; reconnecting")
                }
            }
        }
    })
}

async fn listen(
    fleet: &Fleet,
    channel: &lapin::Channel,
    max_deliveries: u32,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let queue = &fleet.names.deaths_queue;
    let mut consumer = amqp::subscriber::consume_durable(channel, queue, PREFETCH).await?;
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            next = amqp::subscriber::next_delivery(&mut consumer, channel) => next,
        };
        let delivery = match next.context("the deaths consumer")? {
            Next::Delivery(delivery) => delivery,
            Next::Cancelled => anyhow::bail!("the deaths consumer was cancelled"),
        };
        let settled = match task_id_of(&delivery.data) {
            None => delivery.acker.ack(BasicAckOptions::default()).await,
            Some(task_id) => match end(fleet, task_id, max_deliveries).await {
                Ok(()) => delivery.acker.ack(BasicAckOptions::default()).await,
                Err(err) => {
                    tracing::warn!(%task_id, error = %format!("{err:#}"),
                        "could not end a dead-lettered task yet");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    let requeue = BasicNackOptions {
                        requeue: true,
                        ..BasicNackOptions::default()
                    };
                    delivery.acker.nack(requeue).await
                }
            },
        };
        settled?;
    }
}

async fn end(fleet: &Fleet, task_id: Uuid, max_deliveries: u32) -> anyhow::Result<()> {
    let dead_owner = match alive_holder(fleet, task_id).await? {
        Holder::Me | Holder::Other(_) => {
            tracing::info!(%task_id, "task message dead-lettered while a live worker runs it");
            return Ok(());
        }
        Holder::Nobody(owner) => owner,
    };
    let sink = Sink::of(fleet);
    if unheld::end_by_delivery_limit(sink, task_id, dead_owner, max_deliveries).await? {
        tracing::warn!(%task_id, "task ended: its message was dead-lettered (delivery limit)");
    }
    Ok(())
}
