//! Declares the queues and exchanges agentd needs, so a fresh broker is enough. Declarations
//! are idempotent; they must use the same arguments everywhere or the broker refuses them.

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use crate::config::AmqpSettings;

/// The arguments of the tasks queue: quorum, delivery limit, dead-letter route.
pub fn tasks_queue_arguments(dead_letter_queue: &str, max_deliveries: u32) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args.insert(
        "x-delivery-limit".into(),
        AMQPValue::LongInt(i32::try_from(max_deliveries).unwrap_or(i32::MAX)),
    );
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(dead_letter_queue.into()),
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

/// Declares the dead-letter queue, the tasks queue and both fanout exchanges.
pub async fn declare(
    channel: &Channel,
    names: &AmqpSettings,
    max_deliveries: u32,
) -> lapin::Result<()> {
    channel
        .queue_declare(
            names.dead_letter_queue.as_str().into(),
            durable_queue(),
            quorum(),
        )
        .await?;
    channel
        .queue_declare(
            names.tasks_queue.as_str().into(),
            durable_queue(),
            tasks_queue_arguments(&names.dead_letter_queue, max_deliveries),
        )
        .await?;
    for exchange in [&names.events_exchange, &names.control_exchange] {
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Fanout,
                durable_exchange(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}
