//! The RabbitMQ adapter (lapin): connecting, declaring the topology of CONTRACT §2–3, and
//! publishing with publisher confirms (events, dead letters, tasks from the CLI).

pub mod publisher;
pub mod subscriber;
pub mod topology;

use anyhow::Context;
use lapin::{Connection, ConnectionProperties};

pub use publisher::Publisher;

/// Opens a connection to the broker.
pub async fn connect(url: &str) -> anyhow::Result<Connection> {
    let properties = ConnectionProperties::default()
        .with_connection_name(format!("agentd-{}", std::process::id()).into());
    Connection::connect(url, properties)
        .await
        .context("connecting to RabbitMQ")
}

/// Connects, opens a confirmed publisher and declares the whole topology (idempotent), as
/// every command that touches the broker does first.
pub async fn connect_declared(
    settings: &crate::config::Settings,
) -> anyhow::Result<(Connection, Publisher)> {
    let connection = connect(&settings.amqp.url).await?;
    let publisher = Publisher::open(&connection).await?;
    topology::declare(
        publisher.channel(),
        &settings.amqp,
        settings.worker.max_deliveries,
    )
    .await
    .context("declaring the RabbitMQ topology")?;
    Ok((connection, publisher))
}
