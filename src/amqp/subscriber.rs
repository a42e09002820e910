//! Subscribing to the events fanout exchange with a private, exclusive queue (what the CLI's
//! `watch` and `submit --wait` do, and what any other subscriber can do).

use anyhow::Context;
use lapin::Consumer;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;

use super::Broker;

/// Binds a new exclusive, auto-delete queue to `exchange` and consumes it (auto-ack).
pub async fn subscribe(broker: &Broker, exchange: &str) -> anyhow::Result<Consumer> {
    let channel = broker.channel().await?;
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
