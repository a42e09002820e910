//! Completion delivery to producers (CONTRACT §9): the terminal event of a task whose
//! message carried `reply_to` is published to that queue (default exchange) with the
//! message's `correlation_id`, once, after it is committed.
//!
//! The obligation lives in the task's row (`reply_to`, `replied_at`), so nothing is lost to
//! a crash: a task's end nudges [`Replies`] (sent within milliseconds), and every worker
//! also sends whatever is still owed every [`SWEEP_EVERY`] (a worker that died between the
//! commit and the reply). A reply is marked sent once the broker confirms it; only a crash
//! inside that window sends it twice, with the same `message_id` (the event_id).

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use sqlx::PgPool;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::SWEEP_EVERY;
use crate::amqp::Publisher;
use crate::store;

/// Replies sent per transaction.
const BATCH: i64 = 100;

/// Where a task's end is reported so that its reply, if one is owed, goes out now.
#[derive(Debug, Clone)]
pub struct Replies {
    sender: mpsc::UnboundedSender<Uuid>,
}

impl Replies {
    /// Starts the sender (nudged tasks at once, everything owed every [`SWEEP_EVERY`]); it
    /// stops when the last handle is dropped.
    pub fn start(pool: PgPool, publisher: Publisher) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(send_loop(pool, publisher, receiver));
        Self { sender }
    }

    /// The task ended: send its reply if it owes one (cheap when it does not).
    pub fn ended(&self, task_id: Uuid) {
        let _ = self.sender.send(task_id);
    }
}

async fn send_loop(
    pool: PgPool,
    publisher: Publisher,
    mut receiver: mpsc::UnboundedReceiver<Uuid>,
) {
    let mut batch = Vec::with_capacity(BATCH as usize);
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let sent = tokio::select! {
            received = receiver.recv_many(&mut batch, BATCH as usize) => {
                if received == 0 {
                    return;
                }
                let ids = std::mem::take(&mut batch);
                send_owed(&pool, &publisher, Some(&ids)).await
            }
            _ = sweep.tick() => send_owed(&pool, &publisher, None).await,
        };
        if let Err(err) = sent {
            tracing::warn!(error = %format!("{err:#}"), "sending replies failed; the sweep tries again");
        }
    }
}

/// Sends the replies owed by `task_ids` (every ended task's, up to a batch, when `None`).
/// Returns how many were sent.
pub async fn send_owed(
    pool: &PgPool,
    publisher: &Publisher,
    task_ids: Option<&[Uuid]>,
) -> anyhow::Result<usize> {
    let mut tx = pool.begin().await?;
    let owed = store::replies::lock_owed(&mut tx, task_ids, BATCH).await?;
    if owed.is_empty() {
        return Ok(0);
    }
    let mut sent = Vec::with_capacity(owed.len());
    let mut failure = None;
    for reply in &owed {
        match publisher
            .publish(
                "",
                &reply.reply_to,
                reply.payload.as_bytes(),
                properties(reply),
            )
            .await
        {
            Ok(()) => sent.push(reply.task_id),
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    store::replies::mark_sent(&mut tx, &sent).await?;
    tx.commit().await?;
    if !sent.is_empty() {
        tracing::debug!(replies = sent.len(), "replies sent to producers");
    }
    match failure {
        Some(err) => Err(err.context("publishing a reply")),
        None => Ok(sent.len()),
    }
}

/// The reply's properties: those of the fanout event, plus the correlation_id.
fn properties(reply: &store::replies::OwedReply) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        "task_id".into(),
        AMQPValue::LongString(reply.task_id.to_string().into()),
    );
    BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_type(ShortString::from(reply.event_type.as_str()))
        .with_message_id(ShortString::from(reply.event_id.to_string()))
        .with_correlation_id(ShortString::from(reply.correlation_id.as_str()))
        .with_headers(headers)
}
