//! The RabbitMQ adapter (lapin): connecting, declaring the topology of CONTRACT §2–3, and
//! publishing with publisher confirms (events, dead letters, tasks from the CLI, control
//! messages).

pub mod broker;
pub mod control;
pub mod publisher;
pub mod signing;
pub mod subscriber;
pub mod topology;

use std::sync::Arc;

use anyhow::Context;

pub use broker::Broker;
pub use publisher::Publisher;

/// Connects to the broker, declares the whole topology (idempotent) and returns a confirmed
/// publisher on it, as every command that touches the broker does first.
pub async fn connect_declared(settings: &crate::config::Settings) -> anyhow::Result<Publisher> {
    let broker = Broker::new(&settings.amqp.url);
    let publisher = Publisher::new(Arc::clone(&broker));
    topology::declare(&broker, &settings.amqp, settings.worker.max_deliveries)
        .await
        .context("declaring the RabbitMQ topology")?;
    Ok(publisher)
}
