//! Declares the queues and exchanges agentd needs, so a fresh broker is enough. Declarations
//! are idempotent; they must use the same arguments everywhere or the broker refuses them.
//!
//! ```text
//! agentd.tasks (quorum, x-delivery-limit) --dead-letter--> agentd.tasks.dead (fanout exchange)
//!                                                            ├─> agentd.tasks.dead   (kept for operators)
//!                                                            └─> agentd.tasks.deaths (read by workers)
//! agentd.control (fanout) ─> agentd.control.pending (durable, workers in turn)
//!                         └─> agentd.control.worker.<id> (exclusive, one per worker)
//! agentd.events (fanout) ─> subscribers
//! ```

use anyhow::Context;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use super::Broker;
use crate::config::AmqpSettings;

/// The arguments of the tasks queue: quorum, delivery limit, dead-letter exchange.
pub fn tasks_queue_arguments(dead_letter_exchange: &str, max_deliveries: u32) -> FieldTable {
    let mut args = quorum();
    args.insert(
        "x-delivery-limit".into(),
        AMQPValue::LongInt(i32::try_from(max_deliveries).unwrap_or(i32::MAX)),
    );
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(dead_letter_exchange.into()),
    );
    args
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args
}

fn durable_queue() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

fn durable_exchange() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    }
}

async fn bind(channel: &Channel, queue: &str, exchange: &str) -> lapin::Result<()> {
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// Declares every exchange and durable queue with their bindings. A tasks queue declared
/// by an older agentd (dead-lettering to the default exchange) is kept as it is, with a
/// warning: its dead letters still reach `agentd.tasks.dead`, and tasks whose message died
/// are ended by the reconciler instead (after `worker.orphan_after_secs`).
pub async fn declare(
    broker: &Broker,
    names: &AmqpSettings,
    max_deliveries: u32,
) -> anyhow::Result<()> {
    let channel = broker.channel().await?;
    let declared = declare_on(&channel, broker, names, max_deliveries).await;
    // Closed before anyone closes the connection: a channel merely dropped closes in the
    // background, and lapin logs an error when the connection goes first (a CLI command
    // that declared and then had nothing to publish).
    super::broker::close_channel(&channel).await;
    declared
}

async fn declare_on(
    channel: &Channel,
    broker: &Broker,
    names: &AmqpSettings,
    max_deliveries: u32,
) -> anyhow::Result<()> {
    for exchange in names.exchanges() {
        channel
            .exchange_declare(
                exchange.into(),
                ExchangeKind::Fanout,
                durable_exchange(),
                FieldTable::default(),
            )
            .await?;
    }
    for queue in [
        &names.dead_letter_queue,
        &names.deaths_queue,
        &names.control_pending_queue,
    ] {
        channel
            .queue_declare(queue.as_str().into(), durable_queue(), quorum())
            .await?;
    }
    bind(
        channel,
        &names.dead_letter_queue,
        &names.dead_letter_exchange,
    )
    .await?;
    bind(channel, &names.deaths_queue, &names.dead_letter_exchange).await?;
    bind(
        channel,
        &names.control_pending_queue,
        &names.control_exchange,
    )
    .await?;
    let arguments = tasks_queue_arguments(&names.dead_letter_exchange, max_deliveries);
    let declared = channel
        .queue_declare(
            names.tasks_queue.as_str().into(),
            durable_queue(),
            arguments,
        )
        .await;
    match declared {
        Ok(_) => Ok(()),
        Err(err) if is_precondition_failed(&err) => {
            tracing::warn!(queue = %names.tasks_queue, error = %err,
                "the tasks queue exists with other arguments (an older agentd, or another \
                 worker.max_deliveries); using it as it is. Delete it while it is empty to \
                 get the current arguments");
            let channel = broker.channel().await?;
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            let checked = channel
                .queue_declare(
                    names.tasks_queue.as_str().into(),
                    passive,
                    FieldTable::default(),
                )
                .await;
            super::broker::close_channel(&channel).await;
            checked?;
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

/// Declares the worker's own exclusive control queue, bound to the control exchange.
pub async fn declare_worker_queue(
    channel: &Channel,
    names: &AmqpSettings,
    queue: &str,
) -> lapin::Result<()> {
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.into(), exclusive, FieldTable::default())
        .await?;
    bind(channel, queue, &names.control_exchange).await
}

/// How many consumers `queue` has right now (a passive declare on a channel of its own):
/// `agentd submit --wait` tells at once when no worker would ever take its task.
pub async fn consumer_count(broker: &Broker, queue: &str) -> anyhow::Result<u32> {
    let channel = broker.channel().await?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await;
    super::broker::close_channel(&channel).await;
    let queue_state = declared.with_context(|| format!("looking at the queue {queue}"))?;
    Ok(queue_state.consumer_count())
}

/// Whether `queue` exists (a passive declare on a channel of its own, since a missing queue
/// closes the channel).
pub async fn queue_exists(broker: &Broker, queue: &str) -> anyhow::Result<bool> {
    let channel = broker.channel().await?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    match channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
    {
        Ok(_) => {
            let _ = channel.close(200, "checked".into()).await;
            Ok(true)
        }
        Err(err) if is_not_found(&err) => Ok(false),
        // Another connection's exclusive queue (a worker's control queue): it exists as long
        // as that connection lives, which is what the caller asks.
        Err(err) if is_resource_locked(&err) => Ok(true),
        Err(err) => Err(err.into()),
    }
}

fn reply_code(err: &lapin::Error) -> Option<u16> {
    match err.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => Some(amqp.get_id()),
        _ => None,
    }
}

fn is_precondition_failed(err: &lapin::Error) -> bool {
    reply_code(err) == Some(406)
}

fn is_not_found(err: &lapin::Error) -> bool {
    reply_code(err) == Some(404)
}

fn is_resource_locked(err: &lapin::Error) -> bool {
    reply_code(err) == Some(405)
}
