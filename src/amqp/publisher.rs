//! Publishing with publisher confirms: a publish returns only once the broker has taken
//! responsibility for the message.

use anyhow::Context;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use std::sync::Arc;
use tokio::sync::Mutex;

use super::broker::Broker;
use uuid::Uuid;

/// AMQP delivery mode for persistent messages.
const PERSISTENT: u8 = 2;

/// Publishes through a confirm-mode channel of a [`Broker`], reopening the channel (and the
/// connection) when it was lost.
#[derive(Clone)]
pub struct Publisher {
    broker: Arc<Broker>,
    channel: Arc<Mutex<Option<Channel>>>,
}

impl Publisher {
    /// A publisher on `broker`; the channel is opened on first use.
    pub fn new(broker: Arc<Broker>) -> Self {
        Self {
            broker,
            channel: Arc::new(Mutex::new(None)),
        }
    }

    /// The broker this publisher uses.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The confirm-mode channel, opened when missing or closed.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let mut slot = self.channel.lock().await;
        if let Some(channel) = slot.as_ref()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        let channel = self.broker.channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enabling publisher confirms")?;
        *slot = Some(channel.clone());
        Ok(channel)
    }

    /// Closes the confirm channel (awaited, bounded) before the connection is closed at
    /// shutdown; a later publish would open a new one.
    pub async fn close(&self) {
        let channel = self.channel.lock().await.take();
        if let Some(channel) = channel {
            super::broker::close_channel(&channel).await;
        }
    }

    /// Publishes and waits for the broker's ack. A lost channel is reopened once.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        let properties = properties.with_delivery_mode(PERSISTENT);
        match self
            .publish_once(exchange, routing_key, payload, properties.clone())
            .await
        {
            Ok(()) => Ok(()),
            Err(first) => {
                tracing::debug!(error = %format!("{first:#}"), "publish failed; reopening the channel");
                *self.channel.lock().await = None;
                self.publish_once(exchange, routing_key, payload, properties)
                    .await
            }
        }
    }

    async fn publish_once(
        &self,
        exchange: &str,
        routing_key: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        let confirm = self
            .channel()
            .await?
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions::default(),
                payload,
                properties,
            )
            .await
            .context("publishing")?
            .await
            .context("waiting for the publisher confirm")?;
        anyhow::ensure!(confirm.is_ack(), "the broker refused (nacked) the message");
        Ok(())
    }

    /// Sends progress events in order without waiting for their confirms: the caller gets
    /// one confirm per event sent and awaits them when it suits it (off the task's critical
    /// path). A send failure stops the batch and drops the channel (the next send reopens
    /// it); the error says so and the confirms cover only the events before it.
    pub async fn send_events(&self, exchange: &str, events: &[OutgoingEvent<'_>]) -> SentEvents {
        let mut sent = SentEvents {
            confirms: Vec::with_capacity(events.len()),
            error: None,
        };
        let channel = match self.channel().await {
            Ok(channel) => channel,
            Err(error) => {
                sent.error = Some(error);
                return sent;
            }
        };
        for event in events {
            let published = channel
                .basic_publish(
                    exchange.into(),
                    "".into(),
                    BasicPublishOptions::default(),
                    event.body,
                    event_properties(event.event_type, event.event_id, event.task_id),
                )
                .await;
            match published {
                Ok(confirm) => sent.confirms.push(confirm),
                Err(err) => {
                    self.forget_channel().await;
                    sent.error = Some(anyhow::Error::new(err).context("publishing"));
                    break;
                }
            }
        }
        sent
    }

    /// Drops the channel after a failed publish or confirm; the next publish reopens one.
    pub async fn forget_channel(&self) {
        *self.channel.lock().await = None;
    }

    /// Publishes a task message to the tasks queue through the default exchange.
    pub async fn publish_task(&self, queue: &str, payload: &[u8]) -> anyhow::Result<()> {
        let properties = BasicProperties::default().with_content_type("application/json".into());
        self.publish("", queue, payload, properties).await
    }

    /// Publishes a task message asking for its terminal event on `reply_to` with
    /// `correlation_id` (CONTRACT §9).
    pub async fn publish_task_with_reply(
        &self,
        queue: &str,
        payload: &[u8],
        reply_to: &str,
        correlation_id: &str,
    ) -> anyhow::Result<()> {
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_reply_to(reply_to.into())
            .with_correlation_id(correlation_id.into());
        self.publish("", queue, payload, properties).await
    }

    /// Copies a rejected message to the dead-letter queue with its original body and
    /// properties, adding the reason as header `x-agentd-reason`, bounded: a header larger
    /// than the broker's frame makes it close the whole connection, every task of this
    /// worker with it.
    pub async fn dead_letter(
        &self,
        queue: &str,
        payload: &[u8],
        original: &BasicProperties,
        reason: &str,
    ) -> anyhow::Result<()> {
        let mut headers = original.headers().clone().unwrap_or_default();
        let reason = crate::core::bounded::reason(reason);
        headers.insert(
            "x-agentd-reason".into(),
            AMQPValue::LongString(reason.as_ref().into()),
        );
        let properties = original.clone().with_headers(headers);
        self.publish("", queue, payload, properties).await
    }
}

/// One event to publish: its JSON body and the properties CONTRACT §3 names.
#[derive(Debug, Clone, Copy)]
pub struct OutgoingEvent<'a> {
    pub event_type: &'a str,
    pub event_id: Uuid,
    pub task_id: Uuid,
    pub body: &'a [u8],
}

/// Persistent JSON, AMQP `type` = the event type, `message_id` = event_id, header task_id.
fn event_properties(event_type: &str, event_id: Uuid, task_id: Uuid) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        "task_id".into(),
        AMQPValue::LongString(task_id.to_string().into()),
    );
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_type(event_type.into())
        .with_message_id(event_id.to_string().into())
        .with_headers(headers)
        .with_delivery_mode(PERSISTENT)
}

/// The outcome of [`Publisher::send_events`].
pub struct SentEvents {
    /// One confirm per event sent, in order.
    pub confirms: Vec<lapin::PublisherConfirm>,
    /// Why the sending stopped before the end, if it did.
    pub error: Option<anyhow::Error>,
}
