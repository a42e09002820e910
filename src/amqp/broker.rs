//! A reconnecting handle on the RabbitMQ connection: whoever needs a channel asks the broker,
//! which opens a new connection when the last one was lost (broker restart, network cut,
//! `rabbitmqctl close_all_connections`). Reconnects back off exponentially.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backon::{BackoffBuilder, ExponentialBuilder};
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The broker URL and the current connection, if any.
pub struct Broker {
    url: String,
    current: Mutex<Option<Arc<Connection>>>,
}

impl Broker {
    /// A broker handle; nothing is connected until a channel is asked for.
    pub fn new(url: &str) -> Arc<Self> {
        Arc::new(Self {
            url: url.to_owned(),
            current: Mutex::new(None),
        })
    }

    /// The live connection, opening a new one when there is none or it was lost.
    pub async fn connection(&self) -> anyhow::Result<Arc<Connection>> {
        let mut current = self.current.lock().await;
        if let Some(connection) = current.as_ref()
            && connection.status().connected()
        {
            return Ok(Arc::clone(connection));
        }
        let properties = ConnectionProperties::default()
            .with_connection_name(format!("agentd-{}", std::process::id()).into());
        let connection = Connection::connect(&self.url, properties)
            .await
            .context("connecting to RabbitMQ")?;
        let connection = Arc::new(connection);
        *current = Some(Arc::clone(&connection));
        Ok(connection)
    }

    /// A new channel on the live connection.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let connection = self.connection().await?;
        connection
            .create_channel()
            .await
            .context("opening a RabbitMQ channel")
    }

    /// Like [`Broker::channel`], retrying with backoff (100 ms doubling to 5 s) until it
    /// works or `stop` fires (then `None`).
    pub async fn channel_with_retry(&self, stop: &CancellationToken) -> Option<Channel> {
        let mut delays = reconnect_delays();
        loop {
            match self.channel().await {
                Ok(channel) => return Some(channel),
                Err(err) => {
                    let delay = delays.next().unwrap_or(Duration::from_secs(5));
                    tracing::warn!(error = %format!("{err:#}"), retry_in_ms = delay.as_millis() as u64,
                        "RabbitMQ unavailable");
                    tokio::select! {
                        () = stop.cancelled() => return None,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Whether a connection is open right now (readiness probes; never connects).
    pub async fn is_connected(&self) -> bool {
        let current = self.current.lock().await;
        current.as_ref().is_some_and(|c| c.status().connected())
    }

    /// Closes the connection, if open.
    pub async fn close(&self) {
        if let Some(connection) = self.current.lock().await.take() {
            let _ = connection.close(200, "agentd stopping".into()).await;
        }
    }
}

/// The delays between reconnect attempts: 100 ms doubling, capped at 5 s, forever.
fn reconnect_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build()
}
