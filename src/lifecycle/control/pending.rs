//! The durable queue of control messages for tasks no worker runs (`control_pending_queue`):
//! the consumer every worker runs in turn, and the pass over what was published while no
//! worker ran, made before a worker takes any task.
//!
//! A message that cannot be applied *now* (the database or the broker away) goes back to
//! the queue and is tried again. A message that can never be applied (the database refuses
//! what it would write, or it names a task that cannot take it) is logged and dropped: put
//! back, it would come round every half second forever, and at start-up it would stop the
//! pass before the messages behind it, so a task cancelled while no worker ran would start.

use anyhow::Context;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions};
use tokio_util::sync::CancellationToken;

use super::{PENDING_PREFETCH, RETRY_PAUSE, apply, next, verify};
use crate::amqp;
use crate::contract::ControlMessage;
use crate::core::bounded;
use crate::lifecycle::fleet::Fleet;
use crate::lifecycle::running::RunningTasks;
use crate::store::transient::sqlx_transient;

/// Consumes the pending queue until shutdown (`Ok`) or until the channel fails.
pub(super) async fn listen(
    fleet: &Fleet,
    channel: &lapin::Channel,
    running: &RunningTasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let queue = &fleet.names.control_pending_queue;
    let mut consumer = amqp::subscriber::consume_durable(channel, queue, PENDING_PREFETCH).await?;
    while let Some(delivery) = next(&mut consumer, channel, shutdown).await? {
        let settled = match try_apply(fleet, running, &delivery).await {
            Ok(()) => delivery.acker.ack(BasicAckOptions::default()).await,
            Err(err) => {
                tracing::warn!(error = %bounded::reason(&format!("{err:#}")),
                    "control message not applied yet");
                tokio::time::sleep(RETRY_PAUSE).await;
                delivery.acker.nack(requeue()).await
            }
        };
        settled.context("settling a control message")?;
    }
    Ok(())
}

/// Applies the control messages that were published while no worker ran, before this
/// worker takes any task (so a task cancelled while queued never starts here). Gives up
/// quietly when the broker or the database is away: the consumer applies them later.
pub async fn drain_pending(fleet: &Fleet, running: &RunningTasks) {
    if let Err(err) = try_drain_pending(fleet, running).await {
        tracing::warn!(error = %format!("{err:#}"), "pending control messages left for later");
    }
}

async fn try_drain_pending(fleet: &Fleet, running: &RunningTasks) -> anyhow::Result<()> {
    let channel = fleet.publisher.broker().channel().await?;
    let drained = drain(fleet, running, &channel).await;
    amqp::broker::close_channel(&channel).await;
    let applied = drained?;
    if applied > 0 {
        tracing::info!(
            applied,
            "applied control messages published while no worker ran"
        );
    }
    Ok(())
}

/// Takes the queue's messages one by one until it is empty; returns how many were read.
/// Stops at the first that cannot be applied now (put back for the consumer).
async fn drain(
    fleet: &Fleet,
    running: &RunningTasks,
    channel: &lapin::Channel,
) -> anyhow::Result<usize> {
    let queue = fleet.names.control_pending_queue.as_str();
    let mut read = 0usize;
    while let Some(message) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await?
    {
        let delivery = message.delivery;
        if let Err(err) = try_apply(fleet, running, &delivery).await {
            delivery.acker.nack(requeue()).await?;
            return Err(err);
        }
        delivery.acker.ack(BasicAckOptions::default()).await?;
        read += 1;
    }
    Ok(read)
}

/// Applies one delivery. `Err` only for what may succeed later; a message that cannot be
/// read, is refused (`verify`), or can never be applied, is logged and counts as done.
async fn try_apply(
    fleet: &Fleet,
    running: &RunningTasks,
    delivery: &Delivery,
) -> anyhow::Result<()> {
    let Some(received) = verify::read(fleet, delivery, true) else {
        return Ok(());
    };
    if !verify::authorized(fleet, &received, true).await? {
        return Ok(());
    }
    let message = &received.message;
    match apply(fleet, running, message, received.key_id.as_deref()).await {
        Err(err) if is_permanent(&err) => {
            dropped(message, &err);
            Ok(())
        }
        applied => applied,
    }
}

/// Whether applying a control message failed for a reason that will not go away: the
/// database answered and refused the statement (an encoding, a constraint), or the task
/// cannot take the message (see [`crate::lifecycle::approvals::Unresumable`]). A database that
/// is away, or a broker, may come back: those are tried again.
pub(super) fn is_permanent(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        if let Some(db) = cause.downcast_ref::<sqlx::Error>() {
            return !sqlx_transient(db) && !matches!(db, sqlx::Error::PoolClosed);
        }
        cause.is::<crate::lifecycle::approvals::Unresumable>()
    })
}

/// Logs a control message that is dropped because it can never be applied.
pub(super) fn dropped(message: &ControlMessage, err: &anyhow::Error) {
    tracing::warn!(task_id = %message.task_id(), kind = message.kind(),
        error = %bounded::reason(&format!("{err:#}")),
        "control message dropped: it cannot be applied");
}

fn requeue() -> BasicNackOptions {
    BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_statement_is_permanent_and_an_outage_is_not() {
        let io = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(!is_permanent(&anyhow::Error::new(io).context("applying")));
        assert!(!is_permanent(&anyhow::anyhow!("the broker did not answer")));
        assert!(!is_permanent(&anyhow::Error::new(sqlx::Error::PoolClosed)));
        let refused = sqlx::Error::Protocol("x".into());
        // A protocol error is the connection's, not the statement's: tried again.
        assert!(!is_permanent(&anyhow::Error::new(refused)));
        let decode = sqlx::Error::ColumnNotFound("checkpoint".into());
        assert!(is_permanent(
            &anyhow::Error::new(decode).context("applying")
        ));
        let unresumable = crate::lifecycle::approvals::Unresumable(uuid::Uuid::nil());
        assert!(is_permanent(&anyhow::Error::new(unresumable)));
    }
}
