//! Publishing with publisher confirms: a publish returns only once the broker has taken
//! responsibility for the message.

use anyhow::Context;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use uuid::Uuid;

/// AMQP delivery mode for persistent messages.
const PERSISTENT: u8 = 2;

/// A channel in confirm mode.
#[derive(Clone)]
pub struct Publisher {
    channel: Channel,
}

impl Publisher {
    /// Opens a channel on `connection` and puts it in confirm mode.
    pub async fn open(connection: &Connection) -> anyhow::Result<Self> {
        let channel = connection
            .create_channel()
            .await
            .context("opening a publisher channel")?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enabling publisher confirms")?;
        Ok(Self { channel })
    }

    /// The underlying channel (for declarations).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Publishes and waits for the broker's ack.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        let confirm = self
            .channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions::default(),
                payload,
                properties.with_delivery_mode(PERSISTENT),
            )
            .await
            .context("publishing")?
            .await
            .context("waiting for the publisher confirm")?;
        anyhow::ensure!(confirm.is_ack(), "the broker refused (nacked) the message");
        Ok(())
    }

    /// Publishes one progress event to the events fanout exchange (CONTRACT §3).
    pub async fn publish_event(
        &self,
        exchange: &str,
        event_type: &str,
        event_id: Uuid,
        task_id: Uuid,
        payload: &[u8],
    ) -> anyhow::Result<()> {
        let mut headers = FieldTable::default();
        headers.insert(
            "task_id".into(),
            AMQPValue::LongString(task_id.to_string().into()),
        );
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_type(event_type.into())
            .with_message_id(event_id.to_string().into())
            .with_headers(headers);
        self.publish(exchange, "", payload, properties).await
    }

    /// Publishes a task message to the tasks queue through the default exchange.
    pub async fn publish_task(&self, queue: &str, payload: &[u8]) -> anyhow::Result<()> {
        let properties = BasicProperties::default().with_content_type("application/json".into());
        self.publish("", queue, payload, properties).await
    }

    /// Copies a rejected message to the dead-letter queue with its original body and
    /// properties, adding the reason as header `x-agentd-reason`.
    pub async fn dead_letter(
        &self,
        queue: &str,
        payload: &[u8],
        original: &BasicProperties,
        reason: &str,
    ) -> anyhow::Result<()> {
        let mut headers = original.headers().clone().unwrap_or_default();
        headers.insert(
            "x-agentd-reason".into(),
            AMQPValue::LongString(reason.into()),
        );
        let properties = original.clone().with_headers(headers);
        self.publish("", queue, payload, properties).await
    }
}
