//! The gateway's single subscription to the events fanout exchange, fanned out in process.
//!
//! One exclusive queue per gateway process (bound at start, before any client connects)
//! receives every event once; [`Hub::dispatch`] hands each to the tokio broadcast channel of
//! its task, which exists only while some SSE client follows that task. The alternative, one
//! AMQP queue per SSE client, costs the broker a queue, a binding and a channel per open
//! browser tab and delivers every event to the gateway once per client; here the broker's
//! work does not grow with the number of clients, and a client following task A is never
//! woken by task B's events.
//!
//! A broadcast receiver that falls behind loses messages ("lagged"); the SSE stream then
//! re-reads the missing seq range from the `events` table, which always holds an event
//! before it is published, so nothing is lost (see `sse.rs`). When the subscription itself
//! is lost, the pump subscribes again and sends every follower [`Live::Resync`], for the
//! same catch-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::amqp::{Broker, subscriber};
use crate::contract::events::{EventHead, EventType};
use crate::store::events::EventRecord;

/// Buffered events per followed task before a slow client lags (and catches up from the
/// database).
const CHANNEL_CAPACITY: usize = 256;

/// One progress event, ready to be sent as SSE: its seq, its type and its JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEvent {
    pub seq: i64,
    pub event_type: String,
    pub json: String,
}

impl TaskEvent {
    /// Reads the task id and the event from a published event body (CONTRACT §3): its
    /// envelope typed ([`EventHead`]), its JSON relayed as it came.
    pub fn from_published(body: &[u8]) -> Option<(Uuid, Self)> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let head = EventHead::from_value(&value)?;
        let json = value.to_string();
        Some((
            head.task_id,
            Self {
                seq: head.seq,
                event_type: head.event_type,
                json,
            },
        ))
    }

    /// The event of a stored row (its payload is the published JSON).
    pub fn from_row(row: &EventRecord) -> Self {
        Self {
            seq: row.seq,
            event_type: row.event_type.clone(),
            json: row.payload.to_string(),
        }
    }

    /// Whether this event ends its task (CONTRACT §3: exactly one, and the last).
    pub fn is_terminal(&self) -> bool {
        EventType::parse(&self.event_type).is_some_and(|kind| kind.is_terminal())
    }
}

/// What a follower of a task receives.
#[derive(Debug, Clone)]
pub enum Live {
    /// An event of the task, as published.
    Event(Arc<TaskEvent>),
    /// The subscription was lost and is back: events may have been missed, read the table.
    Resync,
}

type Channels = HashMap<Uuid, broadcast::Sender<Live>>;

/// Live events by task, for the SSE streams of this process.
#[derive(Debug, Default)]
pub struct Hub {
    channels: Mutex<Channels>,
}

impl Hub {
    fn channels(&self) -> MutexGuard<'_, Channels> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts receiving `task_id`'s live events. Everything dispatched after this returns is
    /// received (or reported as lagged).
    pub fn subscribe(self: &Arc<Self>, task_id: Uuid) -> Subscription {
        let receiver = self
            .channels()
            .entry(task_id)
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe();
        Subscription {
            hub: Arc::clone(self),
            task_id,
            receiver,
        }
    }

    /// Hands a published event body to the followers of its task (if any).
    pub fn dispatch(&self, body: &[u8]) {
        let Some((task_id, event)) = TaskEvent::from_published(body) else {
            tracing::debug!("ignoring an unreadable message on the events exchange");
            return;
        };
        if let Some(sender) = self.channels().get(&task_id) {
            // An error only means every receiver has just gone away.
            let _ = sender.send(Live::Event(Arc::new(event)));
        }
    }

    /// Tells every follower to catch up from the database.
    pub fn resync(&self) {
        for sender in self.channels().values() {
            let _ = sender.send(Live::Resync);
        }
    }

    /// How many tasks have followers right now.
    pub fn followed_tasks(&self) -> usize {
        self.channels().len()
    }
}

/// A follower of one task's live events; unsubscribes when dropped.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    task_id: Uuid,
    receiver: broadcast::Receiver<Live>,
}

impl Subscription {
    /// The next live event of the task.
    pub async fn recv(&mut self) -> Result<Live, broadcast::error::RecvError> {
        self.receiver.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.hub.channels();
        // Our own receiver still counts here; drop the channel when it is the last one.
        if channels
            .get(&self.task_id)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            channels.remove(&self.task_id);
        }
    }
}

/// Feeds the hub from `consumer` until `stop` fires. When the subscription is lost (broker
/// restart, network cut) it subscribes again, backing off, and then tells every follower
/// to catch up from the database: events published meanwhile reached no queue.
pub async fn pump(
    hub: Arc<Hub>,
    broker: Arc<Broker>,
    exchange: String,
    consumer: lapin::Consumer,
    stop: CancellationToken,
) {
    let mut consumer = Some(consumer);
    loop {
        let current = match consumer.take() {
            Some(current) => current,
            None => match resubscribe(&broker, &exchange, &stop).await {
                Some(fresh) => {
                    hub.resync();
                    fresh
                }
                None => return,
            },
        };
        match feed(&hub, current, &stop).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "events subscription lost; resubscribing");
            }
        }
    }
}

/// Dispatches deliveries until `stop` (Ok) or the consumer fails (Err).
async fn feed(
    hub: &Hub,
    mut consumer: lapin::Consumer,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let delivery = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            delivery = consumer.next() => delivery,
        };
        match delivery {
            Some(Ok(delivery)) => hub.dispatch(&delivery.data),
            Some(Err(err)) => anyhow::bail!("the events consumer failed: {err}"),
            None => anyhow::bail!("the broker ended the events subscription"),
        }
    }
}

/// Subscribes again, backing off from 100 ms to 5 s, until it works or `stop` fires.
async fn resubscribe(
    broker: &Broker,
    exchange: &str,
    stop: &CancellationToken,
) -> Option<lapin::Consumer> {
    let mut delay = Duration::from_millis(100);
    loop {
        match subscriber::subscribe(broker, exchange).await {
            Ok(consumer) => return Some(consumer),
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), retry_in_ms = delay.as_millis() as u64,
                "cannot subscribe to the events exchange")
            }
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(task_id: Uuid, seq: i64, kind: &str) -> Vec<u8> {
        json!({"task_id": task_id, "seq": seq, "type": kind, "data": {}})
            .to_string()
            .into_bytes()
    }

    #[tokio::test]
    async fn events_reach_only_their_task_and_channels_are_dropped() {
        let hub = Arc::new(Hub::default());
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut follower = hub.subscribe(a);
        hub.dispatch(&body(b, 1, "task.started"));
        hub.dispatch(b"not json");
        hub.dispatch(&body(a, 1, "task.started"));
        let got = match follower.recv().await {
            Ok(Live::Event(event)) => Some((event.seq, event.event_type.clone())),
            _ => None,
        };
        assert_eq!(got, Some((1, "task.started".to_owned())));
        hub.resync();
        assert!(matches!(follower.recv().await, Ok(Live::Resync)));
        let second = hub.subscribe(a);
        assert_eq!(hub.followed_tasks(), 1);
        drop(follower);
        assert_eq!(hub.followed_tasks(), 1, "one follower is left");
        drop(second);
        assert_eq!(hub.followed_tasks(), 0);
    }

    #[test]
    fn terminal_types() {
        let event = |kind: &str| TaskEvent {
            seq: 1,
            event_type: kind.to_owned(),
            json: String::new(),
        };
        assert!(event("task.completed").is_terminal());
        assert!(event("task.cancelled").is_terminal());
        assert!(!event("task.started").is_terminal());
    }
}
