//! Consuming: a fanout exchange through a private, exclusive queue (what the CLI's `watch`
//! and the gateway do), a durable queue shared by the workers (manual acknowledgements), a
//! worker's own exclusive queue, and a producer's reply queue (`submit --wait`).

use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};

use super::Broker;

/// Binds a new exclusive, auto-delete queue to `exchange` on a new channel of `broker` and
/// consumes it (auto-ack).
pub async fn subscribe(broker: &Broker, exchange: &str) -> anyhow::Result<Consumer> {
    let channel = broker.channel().await?;
    consume_fanout(&channel, exchange).await
}

/// Binds a new exclusive, auto-delete queue to `exchange` on `channel` and consumes it
/// (auto-ack). The queue lives as long as the channel.
pub async fn consume_fanout(channel: &Channel, exchange: &str) -> anyhow::Result<Consumer> {
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
        .context("declaring a subscriber queue")?;
    channel
        .queue_bind(
            queue.name().clone(),
            exchange.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("binding to the exchange {exchange}"))?;
    channel
        .basic_consume(
            queue.name().clone(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .context("consuming events")
}

/// Consumes the durable queue `queue` on `channel` with manual acknowledgements, at most
/// `prefetch` unacknowledged at a time (competing consumers: each message goes to one).
pub async fn consume_durable(
    channel: &Channel,
    queue: &str,
    prefetch: u16,
) -> anyhow::Result<Consumer> {
    channel
        .basic_qos(prefetch, lapin::options::BasicQosOptions::default())
        .await
        .context("setting the prefetch count")?;
    channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming {queue}"))
}

/// A new exclusive, auto-delete, server-named queue on a new channel of `broker`, consumed
/// with auto-ack: where a producer asks for its replies (CONTRACT §9). Returns its name.
pub async fn reply_queue(broker: &Broker) -> anyhow::Result<(String, Consumer)> {
    let channel = broker.channel().await?;
    reply_queue_on(&channel).await
}

/// Like [`reply_queue`] on the caller's `channel`, which the caller closes when done.
pub async fn reply_queue_on(channel: &Channel) -> anyhow::Result<(String, Consumer)> {
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
        .context("declaring a reply queue")?;
    let name = queue.name().as_str().to_owned();
    let consumer = consume_exclusive(channel, &name).await?;
    Ok((name, consumer))
}

/// Consumes the exclusive queue `queue` (declared by the caller) with auto-ack.
pub async fn consume_exclusive(channel: &Channel, queue: &str) -> anyhow::Result<Consumer> {
    channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                exclusive: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming {queue}"))
}

/// How often a consumer's channel is looked at while no delivery comes.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// What a consumer gave.
#[derive(Debug)]
pub enum Next {
    Delivery(Box<Delivery>),
    /// The broker cancelled the consumer (its queue was deleted, or a node went away).
    Cancelled,
}

/// The next delivery of `consumer` on `channel`; an error when the consumer failed or its
/// channel is no longer open. After a broker restart, a consumer's stream has been seen to
/// stay pending although its connection was closed (the broker then held the queue's
/// messages with no consumer, for good), so the channel's state is checked every
/// [`LIVENESS_CHECK`] while waiting, and a closed channel ends the wait like a failure: the
/// caller consumes again on a new connection.
pub async fn next_delivery(consumer: &mut Consumer, channel: &Channel) -> anyhow::Result<Next> {
    loop {
        tokio::select! {
            delivery = consumer.next() => return match delivery {
                Some(Ok(delivery)) => Ok(Next::Delivery(Box::new(delivery))),
                Some(Err(err)) => Err(anyhow::anyhow!("the consumer failed: {err}")),
                None => Ok(Next::Cancelled),
            },
            () = tokio::time::sleep(LIVENESS_CHECK) => {
                anyhow::ensure!(
                    channel.status().connected(),
                    "the consumer's channel is no longer open"
                );
            }
        }
    }
}
