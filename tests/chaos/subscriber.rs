//! A subscriber that must see everything: a durable queue bound to the events exchange
//! (so a broker restart loses nothing queued for it), consumed with acknowledgements (so
//! deliveries lost with a connection or a node come again) and again after every lost
//! connection, deduplicating by `(task_id, seq)` as CONTRACT §3 tells subscribers to.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use agentd::amqp::Broker;
use agentd::amqp::subscriber::{Next, next_delivery};

/// How long an acknowledgement may take before the channel is taken for lost.
const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Deliveries in flight to the subscriber, unacknowledged.
const PREFETCH: u16 = 500;

/// What the subscriber saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Per task: seq → event type.
    pub streams: HashMap<Uuid, BTreeMap<i64, String>>,
    /// Events received again (same task and seq).
    pub duplicates: u64,
    /// Consumers started (one more after every lost connection).
    pub consumers: u64,
}

/// The running subscriber.
pub struct Subscriber {
    pub seen: Arc<Mutex<Seen>>,
    stop: CancellationToken,
    broker: Arc<Broker>,
    queue: String,
}

impl Subscriber {
    /// Declares `queue` (durable, quorum), binds it to `exchange` and consumes it.
    pub async fn start(url: &str, exchange: &str, queue: &str) -> Self {
        let broker = Broker::new(url);
        let channel = broker.channel().await.expect("subscriber channel");
        let mut args = FieldTable::default();
        args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(queue.into(), durable, args)
            .await
            .expect("subscriber queue");
        channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind subscriber");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = CancellationToken::new();
        tokio::spawn(consume(
            Arc::clone(&broker),
            queue.to_owned(),
            Arc::clone(&seen),
            stop.clone(),
        ));
        Self {
            seen,
            stop,
            broker,
            queue: queue.to_owned(),
        }
    }

    /// Stops consuming and deletes the queue.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Ok(channel) = self.broker.channel().await {
            let _ = channel
                .queue_delete(self.queue.as_str().into(), Default::default())
                .await;
        }
        self.broker.close().await;
    }
}

async fn consume(
    broker: Arc<Broker>,
    queue: String,
    seen: Arc<Mutex<Seen>>,
    stop: CancellationToken,
) {
    while let Some(channel) = broker.channel_with_retry(&stop).await {
        // Acknowledged after recording: deliveries in flight when a connection (or a node)
        // goes away are delivered again, as to any subscriber that must not miss events.
        let _ = channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await;
        let options = BasicConsumeOptions {
            no_ack: false,
            ..BasicConsumeOptions::default()
        };
        let consumer = channel
            .basic_consume(
                queue.as_str().into(),
                "".into(),
                options,
                FieldTable::default(),
            )
            .await;
        let Ok(mut consumer) = consumer else {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        };
        if let Ok(mut seen) = seen.lock() {
            seen.consumers += 1;
        }
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = next_delivery(&mut consumer, &channel) => next,
            };
            let Ok(Next::Delivery(delivery)) = next else {
                break; // the connection went away: consume again
            };
            record(&seen, &delivery.data);
            let ack = delivery.acker.ack(BasicAckOptions::default());
            if !matches!(tokio::time::timeout(ACK_TIMEOUT, ack).await, Ok(Ok(_))) {
                break; // not acknowledged: it comes again on the next channel
            }
        }
    }
}

fn record(seen: &Mutex<Seen>, body: &[u8]) {
    let Ok(event) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let task = event["task_id"]
        .as_str()
        .and_then(|t| t.parse::<Uuid>().ok());
    let (Some(task), Some(seq)) = (task, event["seq"].as_i64()) else {
        return;
    };
    let kind = event["type"].as_str().unwrap_or("").to_owned();
    if let Ok(mut seen) = seen.lock()
        && seen
            .streams
            .entry(task)
            .or_default()
            .insert(seq, kind)
            .is_some()
    {
        seen.duplicates += 1;
    }
}
