//! The two clients behind one trait: each publishes a batch on its one shared confirm-mode
//! channel and returns once the broker confirmed every message of the batch.

use anyhow::Context;
use async_trait::async_trait;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Mutex, watch};
use uuid::Uuid;

/// One event as agentd publishes it.
pub struct Event {
    body: Vec<u8>,
    event_type: &'static str,
    event_id: String,
    task_id: String,
}

impl Event {
    /// An event of agentd's size and shape (a `recursion.completed`-like envelope).
    pub fn sample(seq: usize) -> Self {
        let (task_id, event_id) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
        let body = serde_json::json!({
            "event_id": event_id,
            "event_type": "recursion.completed",
            "task_id": task_id,
            "agent_id": "bench",
            "seq": seq,
            "occurred_at": "2026-11-26T10:00:00.000000Z",
            "payload": {
                "iteration": 3,
                "trace_id": Uuid::new_v4().to_string(),
                "action": "CALL_TOOL",
                "duration_ms": 12,
                "tokens": {"prompt": 1834, "completion": 61},
                "thought": "The user asked for the sum; the calculator gives it exactly, so call it and then answer.",
            },
        });
        Self {
            body: serde_json::to_vec(&body).expect("json"),
            event_type: "recursion.completed",
            event_id,
            task_id,
        }
    }
}

#[async_trait]
pub trait Client: Send + Sync {
    /// Publishes `events` in order and waits for all their confirms.
    async fn send_batch(&self, events: &[Event]) -> anyhow::Result<()>;
    async fn close(&self);
}

/// Declares the bench's fanout exchange and one bound queue (capped, so it never grows).
fn names() -> (String, String) {
    let id = Uuid::new_v4().simple().to_string();
    (
        format!("agentd.clientbench.{id}"),
        format!("agentd.clientbench.{id}.q"),
    )
}

pub struct LapinClient {
    connection: lapin::Connection,
    channel: lapin::Channel,
    exchange: String,
}

impl LapinClient {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        use lapin::options::*;
        use lapin::types::{AMQPValue, FieldTable};
        let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
            .await
            .context("lapin: connecting")?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let (exchange, queue) = names();
        channel
            .exchange_declare(
                exchange.as_str().into(),
                lapin::ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    auto_delete: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        let mut arguments = FieldTable::default();
        arguments.insert("x-max-length".into(), AMQPValue::LongInt(1000));
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..Default::default()
                },
                arguments,
            )
            .await?;
        channel
            .queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            connection,
            channel,
            exchange,
        })
    }
}

#[async_trait]
impl Client for LapinClient {
    async fn send_batch(&self, events: &[Event]) -> anyhow::Result<()> {
        use lapin::types::{AMQPValue, FieldTable};
        let mut confirms = Vec::with_capacity(events.len());
        for event in events {
            let mut headers = FieldTable::default();
            headers.insert(
                "task_id".into(),
                AMQPValue::LongString(event.task_id.as_str().into()),
            );
            let properties = lapin::BasicProperties::default()
                .with_content_type("application/json".into())
                .with_type(event.event_type.into())
                .with_message_id(event.event_id.as_str().into())
                .with_headers(headers)
                .with_delivery_mode(2);
            confirms.push(
                self.channel
                    .basic_publish(
                        self.exchange.as_str().into(),
                        "".into(),
                        lapin::options::BasicPublishOptions::default(),
                        &event.body,
                        properties,
                    )
                    .await?,
            );
        }
        for confirm in confirms {
            anyhow::ensure!(confirm.await?.is_ack(), "lapin: nacked");
        }
        Ok(())
    }

    async fn close(&self) {
        let _ = self.connection.close(200, "bye".into()).await;
    }
}

/// amqprs reports confirms to a channel callback, not per publish: the publisher numbers its
/// messages (delivery tags start at 1 in confirm mode) under a lock that also keeps them in
/// order on the channel, and waits until the callback's watermark passes its last tag.
pub struct AmqprsClient {
    connection: amqprs::connection::Connection,
    channel: amqprs::channel::Channel,
    exchange: String,
    next_tag: Mutex<u64>,
    confirmed: watch::Receiver<u64>,
    nacked: Arc<AtomicBool>,
}

impl AmqprsClient {
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        use amqprs::channel::*;
        use amqprs::connection::{Connection, OpenConnectionArguments};
        let arguments = OpenConnectionArguments::try_from(url).context("amqprs: the url")?;
        let connection = Connection::open(&arguments)
            .await
            .context("amqprs: connecting")?;
        let channel = connection.open_channel(None).await?;
        let (tracker, confirmed) = ConfirmTracker::new();
        let nacked = tracker.nacked.clone();
        channel.register_callback(tracker).await?;
        channel
            .confirm_select(ConfirmSelectArguments::default())
            .await?;
        let (exchange, queue) = names();
        channel
            .exchange_declare(
                ExchangeDeclareArguments::new(&exchange, "fanout")
                    .auto_delete(true)
                    .finish(),
            )
            .await?;
        let mut arguments = amqprs::FieldTable::new();
        arguments.insert(
            "x-max-length".try_into().expect("name"),
            amqprs::FieldValue::I(1000),
        );
        channel
            .queue_declare(
                QueueDeclareArguments::new(&queue)
                    .exclusive(true)
                    .auto_delete(true)
                    .arguments(arguments)
                    .finish(),
            )
            .await?;
        channel
            .queue_bind(QueueBindArguments::new(&queue, &exchange, ""))
            .await?;
        Ok(Self {
            connection,
            channel,
            exchange,
            next_tag: Mutex::new(0),
            confirmed,
            nacked,
        })
    }
}

#[async_trait]
impl Client for AmqprsClient {
    async fn send_batch(&self, events: &[Event]) -> anyhow::Result<()> {
        let last = {
            let mut tag = self.next_tag.lock().await;
            for event in events {
                let mut headers = amqprs::FieldTable::new();
                headers.insert(
                    "task_id".try_into().expect("name"),
                    amqprs::FieldValue::S(event.task_id.as_str().try_into().expect("value")),
                );
                let properties = amqprs::BasicProperties::default()
                    .with_content_type("application/json")
                    .with_message_type(event.event_type)
                    .with_message_id(&event.event_id)
                    .with_headers(headers)
                    .with_persistence(true)
                    .finish();
                self.channel
                    .basic_publish(
                        properties,
                        event.body.clone(),
                        amqprs::channel::BasicPublishArguments::new(&self.exchange, ""),
                    )
                    .await?;
                *tag += 1;
            }
            *tag
        };
        let mut confirmed = self.confirmed.clone();
        confirmed.wait_for(|watermark| *watermark >= last).await?;
        anyhow::ensure!(!self.nacked.load(Ordering::Relaxed), "amqprs: nacked");
        Ok(())
    }

    async fn close(&self) {
        let _ = self.channel.clone().close().await;
        let _ = self.connection.clone().close().await;
    }
}

/// Keeps the highest tag below which every message is confirmed.
struct ConfirmTracker {
    watermark: watch::Sender<u64>,
    single: BTreeSet<u64>,
    nacked: Arc<AtomicBool>,
}

impl ConfirmTracker {
    fn new() -> (Self, watch::Receiver<u64>) {
        let (watermark, receiver) = watch::channel(0);
        let tracker = Self {
            watermark,
            single: BTreeSet::new(),
            nacked: Arc::default(),
        };
        (tracker, receiver)
    }

    fn confirm(&mut self, tag: u64, multiple: bool) {
        let mut watermark = *self.watermark.borrow();
        if multiple {
            watermark = watermark.max(tag);
        } else {
            self.single.insert(tag);
        }
        while self.single.remove(&(watermark + 1)) {
            watermark += 1;
        }
        self.single.retain(|t| *t > watermark);
        self.watermark.send_replace(watermark);
    }
}

#[async_trait]
impl amqprs::callbacks::ChannelCallback for ConfirmTracker {
    async fn close(
        &mut self,
        _channel: &amqprs::channel::Channel,
        close: amqprs::CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        eprintln!("[amqp-client-bench] amqprs: the broker closed the channel: {close}");
        Ok(())
    }

    async fn cancel(
        &mut self,
        _channel: &amqprs::channel::Channel,
        _cancel: amqprs::Cancel,
    ) -> Result<(), amqprs::error::Error> {
        Ok(())
    }

    async fn flow(
        &mut self,
        _channel: &amqprs::channel::Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &amqprs::channel::Channel, ack: amqprs::Ack) {
        self.confirm(ack.delivery_tag(), ack.mutiple());
    }

    async fn publish_nack(&mut self, _channel: &amqprs::channel::Channel, nack: amqprs::Nack) {
        self.nacked.store(true, Ordering::Relaxed);
        self.confirm(nack.delivery_tag(), nack.multiple());
    }

    async fn publish_return(
        &mut self,
        _channel: &amqprs::channel::Channel,
        _ret: amqprs::Return,
        _properties: amqprs::BasicProperties,
        _content: Vec<u8>,
    ) {
    }
}
