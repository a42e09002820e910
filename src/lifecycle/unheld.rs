//! Ending a task that no worker holds: a rejected message, a cancel that reached the task
//! before any worker took it, a message the broker dead-lettered after its delivery limit.
//! The status change and the terminal event are committed in one transaction (so a crash
//! can never leave an ended task without its event, or the reverse), then the event is
//! published through the outbox (what is not confirmed, the sweep publishes later).

use sqlx::PgPool;
use uuid::Uuid;

use super::fleet::Fleet;
use crate::amqp::Publisher;
use crate::contract::events::{EventData, InputInjected, TaskCancelled, TaskFailed};
use crate::contract::intake::Rejection;
use crate::core::machine::FailReason;
use crate::outbox;
use crate::outbox::events::EventLog;
use crate::store;
use crate::store::replies::ReplyRoute;
use crate::store::tasks::{NewTask, status};
use crate::store::unheld::Ending;

/// Where an unheld task's terminal event goes.
#[derive(Clone, Copy)]
pub struct Sink<'a> {
    pub pool: &'a PgPool,
    pub publisher: &'a Publisher,
    pub exchange: &'a str,
}

impl<'a> Sink<'a> {
    /// The worker's own sink.
    pub fn of(fleet: &'a Fleet) -> Self {
        Self {
            pool: &fleet.pool,
            publisher: &fleet.publisher,
            exchange: &fleet.names.events_exchange,
        }
    }
}

/// Records a rejected message as the task's end (`rejected`, with `task.failed`) when its
/// task id is known and the task had not started or ended already.
pub async fn reject(
    fleet: &Fleet,
    rejection: &Rejection,
    reply: Option<&ReplyRoute>,
) -> anyhow::Result<()> {
    let Some(task_id) = rejection.task_id else {
        return Ok(());
    };
    let task = NewTask {
        task_id,
        agent_id: rejection.agent_id,
        conversation_id: rejection.conversation_id,
        input: rejection.input.as_deref(),
        constraints: &[],
        stream: false,
        reply,
        received_at: None,
        tenant_id: rejection.tenant_id.as_deref(),
        priority: crate::core::fair_share::Priority::Normal,
        rerun: None,
    };
    let sink = Sink::of(fleet);
    let mut tx = sink.pool.begin().await?;
    if !store::tasks::insert_rejected(&mut tx, &task, &rejection.reason).await? {
        // The task started or ended already: this message is a bad duplicate. (Ending the
        // transaction now releases the row at once.)
        tx.rollback().await?;
        return Ok(());
    }
    let failed = TaskFailed {
        reason: FailReason::Rejected,
        error: rejection.reason.clone(),
        iterations: 0,
        partial: None,
        divergence: None,
    };
    finish(
        sink,
        tx,
        task_id,
        rejection.agent_id,
        0,
        EventData::TaskFailed(failed),
    )
    .await
}

/// Keeps guidance for a task nobody holds (waiting, or its worker gone) with its
/// `input.injected` event. Returns whether the task took it.
pub async fn inject_unheld(
    sink: Sink<'_>,
    task_id: Uuid,
    text: &str,
    dead_owner: Option<Uuid>,
) -> anyhow::Result<bool> {
    let mut tx = sink.pool.begin().await?;
    let Some(task) = store::unheld::inject_unheld(&mut tx, task_id, text, dead_owner).await? else {
        tx.rollback().await?;
        return Ok(false);
    };
    let iterations = u32::try_from(task.iterations).unwrap_or(0);
    let injected = EventData::InputInjected(InputInjected {
        text: text.to_owned(),
    });
    finish(sink, tx, task_id, task.agent_id, iterations, injected).await?;
    Ok(true)
}

/// Ends a task the caller recorded and holds, before anything ran, as `rejected` with
/// `task.failed` (reason rejected).
pub async fn reject_taken(
    fleet: &Fleet,
    task_id: Uuid,
    agent_id: Option<Uuid>,
    reason: &str,
) -> anyhow::Result<()> {
    let ending = Ending {
        status: status::REJECTED,
        fail_reason: Some(FailReason::Rejected.as_str()),
        error: Some(reason),
    };
    let sink = Sink::of(fleet);
    let mut tx = sink.pool.begin().await?;
    let owner = Some(fleet.worker_id);
    if store::unheld::end_unheld(&mut tx, task_id, owner, ending)
        .await?
        .is_none()
    {
        tx.rollback().await?;
        return Ok(());
    }
    let failed = TaskFailed {
        reason: FailReason::Rejected,
        error: reason.to_owned(),
        iterations: 0,
        partial: None,
        divergence: None,
    };
    finish(
        sink,
        tx,
        task_id,
        agent_id,
        0,
        EventData::TaskFailed(failed),
    )
    .await
}

/// Cancels a task no worker has taken yet (a `pending` row, or no row at all while its
/// message waits in the queue). Returns whether this call ended it.
pub async fn cancel_unstarted(sink: Sink<'_>, task_id: Uuid) -> anyhow::Result<bool> {
    let mut tx = sink.pool.begin().await?;
    let Some(agent_id) = store::unheld::cancel_unstarted(&mut tx, task_id).await? else {
        tx.rollback().await?;
        return Ok(false);
    };
    let cancelled = EventData::TaskCancelled(TaskCancelled { iterations: 0 });
    finish(sink, tx, task_id, agent_id, 0, cancelled).await?;
    Ok(true)
}

/// Ends a task whose message the broker dead-lettered after `worker.max_deliveries`
/// deliveries (`failed`, reason `delivery_limit`), unless a live worker other than
/// `dead_owner` holds it. Returns whether this call ended it.
pub async fn end_by_delivery_limit(
    sink: Sink<'_>,
    task_id: Uuid,
    dead_owner: Option<Uuid>,
    max_deliveries: u32,
) -> anyhow::Result<bool> {
    let error = format!(
        "the task's message was dead-lettered after {max_deliveries} deliveries \
         (worker.max_deliveries): each worker that took it stopped before it ended"
    );
    let reason = FailReason::DeliveryLimit;
    let ending = Ending {
        status: status::FAILED,
        fail_reason: Some(reason.as_str()),
        error: Some(&error),
    };
    let mut tx = sink.pool.begin().await?;
    let ended = store::unheld::end_unheld(&mut tx, task_id, dead_owner, ending).await?;
    let Some(ended) = ended else {
        tx.rollback().await?;
        return Ok(false);
    };
    let iterations = u32::try_from(ended.iterations).unwrap_or(0);
    let failed = TaskFailed {
        reason,
        error,
        iterations,
        partial: None,
        divergence: None,
    };
    let data = EventData::TaskFailed(failed);
    finish(sink, tx, task_id, ended.agent_id, iterations, data).await?;
    Ok(true)
}

/// Cancels a task that is `running` with nobody on it (its worker is gone, `dead_owner`,
/// or its lease expired). Returns whether this call ended it.
pub async fn cancel_unheld(
    sink: Sink<'_>,
    task_id: Uuid,
    dead_owner: Option<Uuid>,
) -> anyhow::Result<bool> {
    let ending = Ending {
        status: status::CANCELLED,
        fail_reason: None,
        error: None,
    };
    let mut tx = sink.pool.begin().await?;
    let ended = store::unheld::end_unheld(&mut tx, task_id, dead_owner, ending).await?;
    let Some(ended) = ended else {
        tx.rollback().await?;
        return Ok(false);
    };
    let iterations = u32::try_from(ended.iterations).unwrap_or(0);
    let cancelled = EventData::TaskCancelled(TaskCancelled { iterations });
    finish(sink, tx, task_id, ended.agent_id, iterations, cancelled).await?;
    Ok(true)
}

/// Stores the event (a terminal one, or guidance for a waiting task) in `tx` after the row
/// change, commits, and publishes every event of the task not confirmed yet, in seq order
/// (a worker that died may have left some), this one last.
async fn finish(
    sink: Sink<'_>,
    tx: sqlx::Transaction<'_, sqlx::Postgres>,
    task_id: Uuid,
    agent_id: Option<Uuid>,
    iterations: u32,
    data: EventData,
) -> anyhow::Result<()> {
    store_events(sink, tx, task_id, agent_id, iterations, vec![data]).await
}

/// Stores `events`, in order, in `tx` after the row change, commits, and publishes every
/// event of the task not confirmed yet, in seq order; then sends the producer's reply if
/// the task ended and one is owed.
pub async fn store_events(
    sink: Sink<'_>,
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    task_id: Uuid,
    agent_id: Option<Uuid>,
    iterations: u32,
    events: Vec<EventData>,
) -> anyhow::Result<()> {
    let last_seq = store::events::last_seq(&mut tx, task_id).await?;
    let mut log = EventLog::new(task_id, agent_id, last_seq);
    for data in events {
        log.push(None, Some(iterations), data);
    }
    let outbound = log.take_outbound();
    store::events::append(&mut tx, task_id, &outbound.rows()).await?;
    tx.commit().await?;
    outbound.observe();
    outbox::flush_ended(sink.pool, sink.publisher, sink.exchange, task_id).await?;
    // The producer's reply, if it asked for one (else the sweep sends it later).
    if let Err(err) =
        crate::outbox::replies::send_owed(sink.pool, sink.publisher, Some(&[task_id])).await
    {
        tracing::warn!(%task_id, error = %format!("{err:#}"), "could not send the reply yet");
    }
    Ok(())
}
