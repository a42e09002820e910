//! Control messages (CONTRACT §2). Every worker listens in two places:
//!
//! - its own exclusive queue `<control_exchange>.worker.<worker_id>`, bound to the control
//!   fanout: every message reaches every worker this way, and the one running the task acts
//!   on it at once. Messages can also be addressed to this queue alone, and its existence
//!   tells other workers that this worker lives.
//! - the durable queue `control_pending_queue`, also bound to the fanout and consumed by the
//!   workers in turn: one worker records the outcome in PostgreSQL for a task no worker
//!   runs (queued, or its worker died), or forwards the message to the queue of the worker
//!   holding the task's lease (which may have taken the task after the broadcast went by).
//!   A message published while no worker runs waits there for the first one.
//!
//! Both loops reconnect when the broker connection is lost, until shutdown. What a control
//! message that cannot be applied becomes is `pending.rs`'s rule; which messages are
//! applied at all (signatures, tenants, the inject cap) is `verify.rs`'s.

mod pending;
mod tombstones;
mod verify;

pub use pending::drain_pending;
pub use tombstones::spawn_sweep as spawn_tombstone_sweep;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::running::RunningTasks;
use super::unheld::{self, Sink};
use crate::amqp::control::publish_to;
use crate::amqp::subscriber::Next;
use crate::amqp::{self, Broker};
use crate::contract::ControlMessage;
use crate::core::bounded;
use crate::lifecycle::fleet::Fleet;
use verify::Received;

/// Control messages handled at once from the shared queue.
const PENDING_PREFETCH: u16 = 16;
/// Pause before a message that could not be applied (database away) is retried.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Starts both control consumers; they end at `shutdown`.
pub fn spawn(
    fleet: Arc<Fleet>,
    running: RunningTasks,
    shutdown: CancellationToken,
) -> Vec<JoinHandle<()>> {
    let own = tokio::spawn(reconnecting(
        Arc::clone(&fleet),
        shutdown.clone(),
        "control consumer",
        {
            let running = running.clone();
            move |fleet, channel, stop| {
                let running = running.clone();
                async move { listen_own(&fleet, &channel, &running, &stop).await }
            }
        },
    ));
    let pending = tokio::spawn(reconnecting(
        fleet,
        shutdown,
        "pending control consumer",
        move |fleet, channel, stop| {
            let running = running.clone();
            async move { pending::listen(&fleet, &channel, &running, &stop).await }
        },
    ));
    vec![own, pending]
}

/// Runs `listen` on a fresh channel until shutdown, reconnecting when it fails.
async fn reconnecting<F, Fut>(
    fleet: Arc<Fleet>,
    shutdown: CancellationToken,
    what: &'static str,
    listen: F,
) where
    F: Fn(Arc<Fleet>, lapin::Channel, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let broker = Arc::clone(fleet.publisher.broker());
    while let Some(channel) = broker.channel_with_retry(&shutdown).await {
        match listen(Arc::clone(&fleet), channel.clone(), shutdown.clone()).await {
            Ok(()) => return amqp::broker::close_channel(&channel).await,
            Err(err) => tracing::warn!(error = %format!("{err:#}"), "{what} lost; reconnecting"),
        }
    }
}

/// The next delivery, `None` at shutdown.
async fn next(
    consumer: &mut lapin::Consumer,
    channel: &lapin::Channel,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Delivery>> {
    tokio::select! {
        () = shutdown.cancelled() => Ok(None),
        next = amqp::subscriber::next_delivery(consumer, channel) => match next? {
            Next::Delivery(delivery) => Ok(Some(*delivery)),
            Next::Cancelled => anyhow::bail!("the consumer was cancelled"),
        },
    }
}

async fn listen_own(
    fleet: &Fleet,
    channel: &lapin::Channel,
    running: &RunningTasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let queue = fleet.names.worker_control_queue(fleet.worker_id);
    amqp::topology::declare_worker_queue(channel, &fleet.names, &queue)
        .await
        .context("declaring the worker's control queue")?;
    let mut consumer = amqp::subscriber::consume_exclusive(channel, &queue).await?;
    while let Some(delivery) = next(&mut consumer, channel, shutdown).await? {
        // The fanout's copy is also read from the pending queue, which counts a refusal; a
        // forwarded one only comes here.
        let counted = forwarded(&delivery);
        let Some(received) = verify::read(fleet, &delivery, counted) else {
            continue;
        };
        let steers = match &received.message {
            ControlMessage::Cancel(_) | ControlMessage::Pause(_) => true,
            ControlMessage::Inject(_) => counted,
            ControlMessage::Resume(_)
            | ControlMessage::Approval(_)
            | ControlMessage::Resolve(_) => false,
        };
        if steers && !authorized_here(fleet, &received, counted).await {
            continue;
        }
        let key_id = received.key_id.as_deref();
        match &received.message {
            ControlMessage::Cancel(cancel) => {
                let here = running.cancel(cancel.task_id);
                tracing::info!(task_id = %cancel.task_id, running_here = here, "cancel requested");
            }
            ControlMessage::Pause(pause) => {
                let here = running.pause_if_running(pause.task_id);
                tracing::info!(task_id = %pause.task_id, running_here = here, "pause requested");
            }
            // A waiting task is held by nobody: one worker applies it (the pending queue).
            ControlMessage::Resume(_)
            | ControlMessage::Approval(_)
            | ControlMessage::Resolve(_) => {}
            // Applied once: by the holder when another worker forwards it here, else by
            // whichever worker reads it from the pending queue.
            // The forwarder saw this worker's lease; if the task is no longer (or not yet)
            // registered here, where it is now decides.
            ControlMessage::Inject(inject) if counted => {
                let here = running.inject_if_running(inject.task_id, &inject.text);
                tracing::info!(task_id = %inject.task_id, running_here = here, "guidance injected");
                if !here {
                    apply_or_requeue(fleet, running, &received.message, key_id).await;
                }
            }
            ControlMessage::Inject(_) => {}
        }
    }
    Ok(())
}

/// [`verify::authorized`] for the own queue: a database that is away refuses this copy (the
/// pending queue's copy is retried until it can be decided).
async fn authorized_here(fleet: &Fleet, received: &Received, counted: bool) -> bool {
    match verify::authorized(fleet, received, counted).await {
        Ok(authorized) => authorized,
        Err(err) => {
            tracing::debug!(error = %format!("{err:#}"), "control message left to the pending queue");
            false
        }
    }
}

/// Records the outcome of `message` for a task nobody runs, or hands it to the worker that
/// holds the task. `key_id`: the key that signed it (`None` when signing is off).
async fn apply(
    fleet: &Fleet,
    running: &RunningTasks,
    message: &ControlMessage,
    key_id: Option<&str>,
) -> anyhow::Result<()> {
    let task_id = message.task_id();
    match message {
        ControlMessage::Cancel(_) => {
            if running.cancel_if_running(task_id) {
                return Ok(());
            }
            if unheld::cancel_unstarted(Sink::of(fleet), task_id).await? {
                tracing::info!(%task_id, "cancelled before any worker took it");
                return Ok(());
            }
            match alive_holder(fleet, task_id).await? {
                Holder::Me => {
                    running.cancel(task_id);
                }
                Holder::Other(owner) => forward(fleet, owner, message, key_id).await?,
                Holder::Nobody(dead_owner) => {
                    if unheld::cancel_unheld(Sink::of(fleet), task_id, dead_owner).await? {
                        tracing::info!(%task_id, "cancelled a task nobody holds");
                        // A parent waiting for children takes them along.
                        super::delegation::cancel_children(fleet, task_id).await?;
                    }
                }
            }
        }
        ControlMessage::Pause(_) => {
            if running.pause_if_running(task_id) {
                return Ok(());
            }
            match alive_holder(fleet, task_id).await? {
                Holder::Me => {
                    running.pause_if_running(task_id);
                }
                Holder::Other(owner) => forward(fleet, owner, message, key_id).await?,
                Holder::Nobody(_) => {
                    tracing::info!(%task_id, "pause for a task no worker runs: nothing to pause");
                }
            }
        }
        ControlMessage::Inject(inject) => {
            if running.inject_if_running(task_id, &inject.text) {
                return Ok(());
            }
            match alive_holder(fleet, task_id).await? {
                Holder::Me => running.inject(task_id, &inject.text),
                Holder::Other(owner) => forward(fleet, owner, message, key_id).await?,
                Holder::Nobody(dead_owner) => {
                    let sink = Sink::of(fleet);
                    if !unheld::inject_unheld(sink, task_id, &inject.text, dead_owner).await? {
                        tracing::info!(%task_id, "inject for a task that is not running or waiting: ignored");
                    }
                }
            }
        }
        ControlMessage::Approval(approval) => {
            // Verified: the key that signed the message (CONTRACT v3 §15).
            let decided = super::approvals::decide_verified(
                Sink::of(fleet),
                &fleet.names.tasks_queue,
                task_id,
                &approval.tool_call_id,
                &approval.decision(),
                key_id,
            )
            .await?;
            let tool_call_id = bounded::quote(&approval.tool_call_id);
            tracing::info!(%task_id, %tool_call_id,
                decision = approval.decision.as_str(), outcome = ?decided, "approval decision");
        }
        ControlMessage::Resolve(resolve) => {
            // Verified: the key that signed the message (CONTRACT v3 §15).
            let outcome = super::resolutions::resolve_verified(
                Sink::of(fleet),
                &fleet.names.tasks_queue,
                task_id,
                &resolve.tool_call_id,
                &resolve.resolution(),
                key_id,
            )
            .await?;
            tracing::info!(%task_id, outcome = ?outcome, "resolve");
        }
        ControlMessage::Resume(resume) => {
            let budget = resume.budget.as_ref();
            if super::reconcile::resume_waiting(fleet, task_id, budget).await? {
                tracing::info!(%task_id, "waiting task resumed");
            } else {
                tracing::info!(%task_id, "resume for a task that does not wait for one: ignored");
            }
        }
    }
    Ok(())
}

/// Applies what reached a task's stops after its run stopped reading them: a cancel or
/// guidance that came while the run committed `waiting` or let the task go (the task was
/// still registered here, so the message was handed to it and not to the database). Once
/// the task is out of `running`, each is applied as for a task this worker does not run;
/// one that cannot be applied now goes back to the pending queue to be retried.
pub async fn apply_late(
    fleet: &Fleet,
    running: &RunningTasks,
    task_id: Uuid,
    stops: &super::interrupt::Stops,
) {
    use crate::contract::control::{Cancel, Inject};
    let mut late: Vec<ControlMessage> = stops
        .take_guidance()
        .into_iter()
        .map(|text| ControlMessage::Inject(Inject { task_id, text }))
        .collect();
    if stops.cancel.is_cancelled() {
        late.push(ControlMessage::Cancel(Cancel { task_id }));
    }
    // Already checked when they reached the task: signed again with the workers' own key.
    for message in late {
        apply_or_requeue(fleet, running, &message, None).await;
    }
}

/// Applies `message` as the pending queue's consumer would; if it cannot be applied now
/// (database away), puts it on the pending queue to be retried (one that can never be
/// applied is dropped, as there).
async fn apply_or_requeue(
    fleet: &Fleet,
    running: &RunningTasks,
    message: &ControlMessage,
    key_id: Option<&str>,
) {
    let Err(err) = apply(fleet, running, message, key_id).await else {
        return;
    };
    if pending::is_permanent(&err) {
        return pending::dropped(message, &err);
    }
    let task_id = message.task_id();
    tracing::warn!(%task_id, error = %format!("{err:#}"), "control message requeued");
    let signer = verify::signer_for(fleet, key_id);
    let to = ("", fleet.names.control_pending_queue.as_str());
    let headers = FieldTable::default();
    if let Err(err) = publish_to(&fleet.publisher, to, signer, message, headers).await {
        tracing::error!(%task_id, error = %format!("{err:#}"), "control message lost");
    }
}

/// Who holds a task's lease.
pub(super) enum Holder {
    Me,
    /// Another live worker.
    Other(Uuid),
    /// Nobody, or a worker that is gone (its control queue no longer exists).
    Nobody(Option<Uuid>),
}

/// Who holds `task_id`'s live lease, checking that another holder still lives.
pub(super) async fn alive_holder(fleet: &Fleet, task_id: Uuid) -> anyhow::Result<Holder> {
    let Some(owner) = crate::store::tasks::holder(&fleet.pool, task_id).await? else {
        return Ok(Holder::Nobody(None));
    };
    if owner == fleet.worker_id {
        return Ok(Holder::Me);
    }
    let queue = fleet.names.worker_control_queue(owner);
    match is_alive(fleet.publisher.broker(), &queue).await? {
        true => Ok(Holder::Other(owner)),
        false => Ok(Holder::Nobody(Some(owner))),
    }
}

async fn is_alive(broker: &Broker, queue: &str) -> anyhow::Result<bool> {
    amqp::topology::queue_exists(broker, queue).await
}

/// Sends `message` to the control queue of worker `owner` alone, signed again with the key
/// that signed it.
async fn forward(
    fleet: &Fleet,
    owner: Uuid,
    message: &ControlMessage,
    key_id: Option<&str>,
) -> anyhow::Result<()> {
    let queue = fleet.names.worker_control_queue(owner);
    let mut headers = FieldTable::default();
    headers.insert(FORWARDED.into(), AMQPValue::Boolean(true));
    let signer = verify::signer_for(fleet, key_id);
    publish_to(&fleet.publisher, ("", &queue), signer, message, headers).await
}

/// The header of a control message one worker forwards to the holder of its task.
const FORWARDED: &str = "x-agentd-forwarded";

/// Whether a delivery was forwarded by another worker (not the fanout's copy).
fn forwarded(delivery: &Delivery) -> bool {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get(FORWARDED))
        .is_some_and(|value| matches!(value, AMQPValue::Boolean(true)))
}
