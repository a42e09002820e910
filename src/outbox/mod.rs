//! What a task tells the world, stored first and then published at least once: its
//! progress events (`events`: the per-task event log, gapless seq, confirmed publishing),
//! its completion reply to a producer that asked for one (`replies`, CONTRACT §9), and,
//! here, the event outbox (CONTRACT §3, delivery): every stored event is published at least
//! once, whatever dies when. A task's runner publishes its own events and records how far
//! the broker confirmed them; what nobody confirmed is published again, in seq order and
//! before anything newer, by whoever next touches the task: a worker resuming it, a worker
//! receiving the redelivered message of the ended task, or the periodic sweep that every
//! worker runs (`lifecycle::sweep::spawn_outbox`; rows taken with `SKIP LOCKED`, so one
//! sweeper per task at a time). The run (`worker/`) and a task's life between runs
//! (`lifecycle/`) both write through here.
//!
//! A stored event waits at most [`SWEEP_GRACE`] + [`SWEEP_EVERY`] + one publish before the
//! sweep sends it (the contract promises 30 s).

pub mod events;
pub mod replies;

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::store;
use events::{Encoded, Outbound};

/// How long an ended task's runner is left to publish its own last events before the
/// sweep does (it retries through a broker outage for about as long).
pub const SWEEP_GRACE: Duration = Duration::from_secs(10);
/// How often every worker sweeps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// Tasks taken per sweep transaction.
const SWEEP_BATCH: i64 = 100;
/// Confirmations gathered before one `UPDATE` records them (or whatever came in meanwhile).
const MARK_BATCH: usize = 256;

/// Where runners report that a task's events are confirmed up to a seq; a background task
/// records the reports in batches (one statement for many tasks).
#[derive(Debug, Clone)]
pub struct ConfirmedMarks {
    sender: mpsc::UnboundedSender<(Uuid, i64)>,
}

impl ConfirmedMarks {
    /// Starts the recorder; it stops when the last handle is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(record_marks(pool, receiver));
        Self { sender }
    }

    /// Every event of `task_id` up to `seq` is confirmed (its outbox flag may be cleared).
    /// A report lost to a crash only means a duplicate later.
    pub fn confirmed(&self, task_id: Uuid, seq: i64) {
        let _ = self.sender.send((task_id, seq));
    }
}

async fn record_marks(pool: PgPool, mut receiver: mpsc::UnboundedReceiver<(Uuid, i64)>) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while receiver.recv_many(&mut batch, MARK_BATCH).await > 0 {
        let (tasks, seqs): (Vec<Uuid>, Vec<i64>) = batch.drain(..).unzip();
        if let Err(err) = store::outbox::mark_confirmed_now(&pool, &tasks, &seqs).await {
            // The sweep publishes those events again: duplicates, never losses.
            tracing::warn!(error = %err, "could not record confirmed events");
        }
    }
}

/// Publishes a task's stored events after `after`, oldest first, on the caller's
/// connection; returns the seq of the last one confirmed (`after` when none was).
async fn publish_stored(
    conn: &mut sqlx::PgConnection,
    publisher: &Publisher,
    exchange: &str,
    task_id: Uuid,
    after: i64,
) -> sqlx::Result<i64> {
    let stored = store::events::stored_after(conn, task_id, after).await?;
    if stored.is_empty() {
        return Ok(after);
    }
    let outbound = Outbound::stored(stored.into_iter().map(Encoded::stored).collect());
    let delivered = outbound.deliver(publisher, exchange).await;
    Ok(delivered.last_confirmed.max(after))
}

/// Publishes what an ended task stored and nobody confirmed (unless a sweep is at it right
/// now): for a redelivered message of the task, and after a task is ended by someone other
/// than its runner.
pub async fn flush_ended(
    pool: &PgPool,
    publisher: &Publisher,
    exchange: &str,
    task_id: Uuid,
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    if let Some(pending) = store::outbox::lock_pending(&mut tx, task_id).await? {
        let done =
            publish_stored(&mut tx, publisher, exchange, task_id, pending.confirmed_seq).await?;
        store::outbox::mark_confirmed(&mut tx, &[task_id], &[done]).await?;
    }
    tx.commit().await
}

/// Loads the stored events of a resumed task that were never confirmed, to go out before
/// anything it produces next.
pub async fn unconfirmed(
    pool: &PgPool,
    task_id: Uuid,
    confirmed_seq: i64,
) -> sqlx::Result<Vec<Encoded>> {
    let mut conn = pool.acquire().await?;
    let stored = store::events::stored_after(&mut conn, task_id, confirmed_seq).await?;
    Ok(stored.into_iter().map(Encoded::stored).collect())
}

/// One sweep: publishes the stranded events of up to a batch of tasks. Returns how many
/// tasks it published for.
pub async fn sweep_once(
    pool: &PgPool,
    publisher: &Publisher,
    exchange: &str,
) -> sqlx::Result<usize> {
    let mut tx = pool.begin().await?;
    let stranded =
        store::outbox::lock_stranded(&mut tx, SWEEP_GRACE.as_secs_f64(), SWEEP_BATCH).await?;
    let (mut tasks, mut seqs) = (Vec::new(), Vec::new());
    for task in &stranded {
        let done = publish_stored(
            &mut tx,
            publisher,
            exchange,
            task.task_id,
            task.confirmed_seq,
        )
        .await?;
        if done > task.confirmed_seq {
            tasks.push(task.task_id);
            seqs.push(done);
        }
    }
    store::outbox::mark_confirmed(&mut tx, &tasks, &seqs).await?;
    tx.commit().await?;
    if !tasks.is_empty() {
        tracing::info!(tasks = tasks.len(), "published stranded events");
    }
    Ok(tasks.len())
}
