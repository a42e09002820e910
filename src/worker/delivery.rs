//! One task message from intake to disposition: parse it, find its agent, record and claim
//! the task, run it, and decide what happens to the message (a pure rule, [`disposition`]).

use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::deps::WorkerDeps;
use super::start::{budget_of, resume, started, task_info};
use super::task_run::{RunEnd, TaskRun};
use crate::contract::intake::{Rejection, TaskSpec, parse_task};
use crate::core::machine::Machine;
use crate::core::storable;
use crate::lifecycle::admission::{self, Admitted};
use crate::lifecycle::conversations::{self, Admission};
use crate::lifecycle::interrupt::Stops;
use crate::lifecycle::running::RunningTasks;
use crate::lifecycle::{control, delegation, unheld};
use crate::outbox;
use crate::store;
use crate::store::replies::ReplyRoute;
use crate::store::tasks::{Claim, NewTask, ResumePoint};

/// What to do with a delivery once it has been handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Done with it: the outcome is committed, or it was a duplicate.
    Ack,
    /// Put it back: the task is resumable and someone should pick it up again.
    Requeue,
    /// Move it to the dead-letter queue with this reason, then ack it.
    DeadLetter(String),
}

/// How handling a message ended, before it is mapped to a [`Disposition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    Rejected(String),
    Finished,
    Duplicate,
    Released,
    Failed(String),
}

/// The delivery rule: rejected input is dead-lettered, finished and duplicate tasks are
/// acknowledged, released or failed runs are requeued (the broker's delivery limit bounds
/// how often a task that keeps failing comes back).
pub fn disposition(handled: &Handled) -> Disposition {
    match handled {
        Handled::Rejected(reason) => Disposition::DeadLetter(reason.clone()),
        Handled::Finished | Handled::Duplicate => Disposition::Ack,
        Handled::Released | Handled::Failed(_) => Disposition::Requeue,
    }
}

/// When a task message reached this worker. A conversation turn recorded from it is placed
/// at that time, and waits `worker.turn_settle_ms` from it before admission (CONTRACT §10).
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub at: chrono::DateTime<Utc>,
    pub instant: tokio::time::Instant,
}

impl Arrival {
    /// A message that arrives now.
    pub fn now() -> Self {
        Self {
            at: Utc::now(),
            instant: tokio::time::Instant::now(),
        }
    }
}

/// Handles one task message body.
pub async fn handle(
    deps: &WorkerDeps,
    running: &RunningTasks,
    body: &[u8],
    content_type: Option<&str>,
    (reply, arrival): (Option<ReplyRoute>, Arrival),
    shutdown: &CancellationToken,
) -> Handled {
    let spec = match parse_task(body, content_type, deps.max_message_bytes) {
        Ok(spec) => spec,
        Err(rejection) => return reject(deps, rejection, reply.as_ref()).await,
    };
    // A rerun takes its source's agent, input and constraints (CONTRACT v3 §13).
    let spec = match super::rerun::resolve(&deps.fleet.pool, spec).await {
        Ok(Ok(spec)) => spec,
        Ok(Err(rejection)) => return reject(deps, rejection, reply.as_ref()).await,
        Err(err) => {
            tracing::error!(error = %format!("{err:#}"), "could not read a rerun's source");
            return Handled::Failed(format!("{err:#}"));
        }
    };
    let mut delays = store::transient::delays();
    loop {
        let span = tracing::info_span!("task", task_id = %spec.task_id);
        let err = match run(deps, running, &spec, (reply.as_ref(), arrival), shutdown)
            .instrument(span)
            .await
        {
            Ok(handled) => return handled,
            Err(err) => err,
        };
        tracing::error!(task_id = %spec.task_id, error = %format!("{err:#}"), "task run failed");
        // This worker no longer runs the task, whatever comes next: its lease goes, so that
        // the next delivery takes it up at once and, once the broker dead-letters a message
        // that keeps failing (delivery limit), the deaths consumer ends the task instead of
        // taking it for one a live worker runs.
        let _ =
            store::tasks::release_lease(&deps.fleet.pool, spec.task_id, deps.fleet.worker_id, 0)
                .await;
        // A database outage is waited out here rather than by requeueing, which would spend
        // the message's deliveries (x-delivery-limit) on an outage.
        if !store::transient::is_transient(&err) || shutdown.is_cancelled() {
            return Handled::Failed(format!("{err:#}"));
        }
        let delay = delays.next().unwrap_or_default();
        tokio::select! {
            () = shutdown.cancelled() => return Handled::Released,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

async fn run(
    deps: &WorkerDeps,
    running: &RunningTasks,
    spec: &TaskSpec,
    (reply, arrival): (Option<&ReplyRoute>, Arrival),
    shutdown: &CancellationToken,
) -> anyhow::Result<Handled> {
    // The agent is read, and a new task recorded and taken, in one statement; a task
    // whose row existed is claimed.
    let new_row = NewTask {
        received_at: Some(arrival.at),
        ..new_task(spec, reply)
    };
    let (owner, lease) = (deps.fleet.worker_id, deps.lease_secs);
    let budget = spec.budget.as_ref();
    // The version is chosen once (CONTRACT §11): a row pinned already keeps its own.
    let chosen = store::versions::choose_for_task(
        &deps.fleet.pool,
        spec.agent_id,
        spec.task_id,
        &spec.requested,
    )
    .await?;
    let version = match chosen {
        // None: no such agent; the lookup below finds none and rejects the task as unknown.
        Ok(version) => version,
        Err(unknown) => {
            let rejection = rejected(spec, unknown.to_string());
            return Ok(reject(deps, rejection, reply).await);
        }
    };
    let pinned = (spec.agent_id, version);
    let intake =
        store::tasks::take_at(&deps.fleet.pool, &new_row, pinned, owner, lease, budget).await?;
    if !intake.as_ref().is_some_and(|intake| intake.inserted)
        && let Some(reason) = super::known_id::mismatch(&deps.fleet.pool, spec, reply).await?
    {
        // Not this task's message: the stored task is left as it is (not rejected).
        tracing::warn!(task_id = %spec.task_id, %reason, "task message refused");
        return Ok(Handled::Rejected(reason));
    }
    let Some(store::tasks::Intake {
        agent,
        inserted,
        limited,
        row_tenant,
    }) = intake
    else {
        let reason = format!("unknown agent_id {}", spec.agent_id);
        return Ok(reject(deps, rejected(spec, reason), reply).await);
    };
    // A task runs in its agent's tenant (CONTRACT v3 §15); one recorded or sent for another
    // is rejected (a new one was not recorded: `take_at` checks the same).
    let named = row_tenant.as_deref().or(spec.tenant_id.as_deref());
    if let Err(reason) = crate::core::tenancy::task_tenant(named, &agent.tenant_id) {
        return Ok(reject(deps, rejected(spec, reason), reply).await);
    }
    // A limited tenant's slot this task may hold, given back when it stops running here.
    let slot = limited.then(|| agent.tenant_id.clone());
    if !inserted && let Some(route) = reply {
        // The row existed (a producer recorded it, a cancel ended it, or a redelivery):
        // the reply still goes where this message asks.
        store::replies::record_route(&deps.fleet.pool, spec.task_id, route).await?;
    }
    if inserted && let Err(reason) = budget_of(deps, spec, &agent) {
        return Ok(reject_taken(deps, spec, reason).await);
    }
    let start = match (inserted, limited) {
        (true, false) => Some(Start::Fresh { last_seq: 0 }),
        // Recorded held by its tenant's limit (CONTRACT v3 §15): admission decides.
        (true, true) => {
            match admission::admit(&deps.fleet, spec.task_id, &agent.tenant_id).await? {
                Admitted::Held => return Ok(Handled::Finished),
                Admitted::Run | Admitted::Gone => take(deps, spec, agent.version, shutdown).await?,
            }
        }
        (false, _) => take(deps, spec, agent.version, shutdown).await?,
    };
    let start = match start {
        Some(start) => start,
        None if shutdown.is_cancelled() => return Ok(Handled::Released),
        None => return Ok(Handled::Duplicate),
    };
    // One turn at a time per conversation, in order (CONTRACT §10): decided before the
    // task's earlier turns are read for its state.
    // A turn recorded here from its message first lets a turn published just before it,
    // and read by another worker, be recorded.
    let settle = inserted.then(|| arrival.instant + deps.turn_settle);
    let turn = conversations::Turn {
        task_id: spec.task_id,
        conversation_id: spec.conversation_id,
        settle,
    };
    match conversations::admit(&deps.fleet, turn, &agent, shutdown).await? {
        Admission::Run => {}
        Admission::Parked => {
            admission::give_back(&deps.fleet, slot.as_deref()).await;
            return Ok(Handled::Finished);
        }
        Admission::Released => {
            // Stopping during the settle wait: nothing ran, nothing was published.
            store::tasks::release_lease(&deps.fleet.pool, spec.task_id, deps.fleet.worker_id, 0)
                .await?;
            return Ok(Handled::Released);
        }
        Admission::Rejected(_) => {
            admission::give_back(&deps.fleet, slot.as_deref()).await;
            deps.replies.ended(spec.task_id);
            return Ok(Handled::Finished);
        }
    }
    // A rerun's settings come with its message, or (a continuation) from its row.
    let pool = &deps.fleet.pool;
    let replay = super::rerun::Replay::load(pool, spec.task_id, spec.rerun, !inserted).await?;
    let rerun_of = replay.as_ref().map(|replay| replay.spec.source_task_id);
    let taken = match start {
        Start::Fresh { last_seq } => {
            let info = task_info(deps, spec, &agent).await?;
            started(Machine::new(info), spec, &agent, (last_seq, rerun_of))
        }
        Start::Resumed(point) => resume(deps, spec, &agent, point, rerun_of).await?,
    };
    let stops = Stops::default();
    running.insert(spec.task_id, stops.clone());
    let heartbeat = spawn_heartbeat(deps, spec.task_id, stops.release.clone());
    let mut task_run = TaskRun::new(deps, taken, agent, spec.stream, stops.clone());
    task_run.replay = replay;
    let end = task_run.drive().await;
    heartbeat.cancel();
    running.remove(spec.task_id);
    if matches!(end, Ok(RunEnd::Finished(_) | RunEnd::Waiting)) {
        admission::give_back(&deps.fleet, slot.as_deref()).await;
    }
    match end? {
        RunEnd::Finished(_) => {
            // A task this intake recorded owes a reply only when its message asked for one,
            // and has no parent (a delegated child's row is recorded before its message is
            // sent): nothing to look up, two statements fewer per task. Both obligations
            // live in rows that each worker's sweep also reads (replies every 5 s, parents
            // in `lifecycle::sweep`), so a nudge left out here is never a loss.
            if !inserted || reply.is_some() {
                deps.replies.ended(spec.task_id);
            }
            conversations::turn_ended(&deps.fleet, spec.conversation_id).await;
            if !inserted {
                delegation::task_ended(&deps.fleet, spec.task_id).await;
            }
            Ok(Handled::Finished)
        }
        RunEnd::Waiting => {
            control::apply_late(&deps.fleet, running, spec.task_id, &stops).await;
            Ok(Handled::Finished)
        }
        RunEnd::Released => {
            let confirmed = task_run.confirmed.get();
            store::tasks::release_lease(
                &deps.fleet.pool,
                spec.task_id,
                deps.fleet.worker_id,
                confirmed,
            )
            .await?;
            control::apply_late(&deps.fleet, running, spec.task_id, &stops).await;
            Ok(Handled::Released)
        }
    }
}

/// How a task this worker took starts.
enum Start {
    /// From nothing; `last_seq`: events it has stored already (a parked turn's
    /// `task.waiting`).
    Fresh { last_seq: i64 },
    /// From its checkpoint.
    Resumed(ResumePoint),
}

/// Claims a task whose row existed. While another live worker holds it (a redelivery while its first
/// consumer still runs it), waits: the holder either finishes it (then this message is a
/// duplicate) or dies (its lease expires and this worker resumes it). A row still unpinned
/// is pinned to `version`, the one intake read the agent at. `None`: nothing to run.
async fn take(
    deps: &WorkerDeps,
    spec: &TaskSpec,
    version: Option<i32>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Start>> {
    let poll = Duration::from_secs_f64((deps.lease_secs / 4.0).clamp(0.05, 5.0));
    loop {
        let claim = store::tasks::claim(
            &deps.fleet.pool,
            spec.task_id,
            deps.fleet.worker_id,
            deps.lease_secs,
            version,
        )
        .await?;
        match claim {
            Claim::Fresh => {
                // A turn freed by its conversation has stored `task.waiting` already.
                let mut conn = deps.fleet.pool.acquire().await?;
                let last_seq = store::events::last_seq(&mut conn, spec.task_id).await?;
                return Ok(Some(Start::Fresh { last_seq }));
            }
            Claim::Resume(point) => return Ok(Some(Start::Resumed(point))),
            Claim::Ended(_) => {
                tracing::info!(task_id = %spec.task_id, ?claim, "duplicate task message acknowledged");
                // A cancel that came first left a tombstone: it found its task, which is
                // kept from now on like any cancelled one (store::steering).
                let (pool, input) = (&deps.fleet.pool, spec.input.as_str());
                store::steering::adopt_tombstone(pool, spec.task_id, spec.agent_id, input).await?;
                // Its runner may have died before its last events were confirmed.
                let (publisher, exchange) =
                    (&deps.fleet.publisher, &deps.fleet.names.events_exchange);
                outbox::flush_ended(&deps.fleet.pool, publisher, exchange, spec.task_id).await?;
                deps.replies.ended(spec.task_id);
                return Ok(None);
            }
            Claim::Missing => {
                tracing::info!(task_id = %spec.task_id, "task row gone; message acknowledged");
                return Ok(None);
            }
            // Its tenant is held to max_running (CONTRACT v3 §15): admission gives it a
            // slot (then it is claimed) or holds it (its message is acknowledged).
            Claim::Gated { tenant_id } => {
                match admission::admit(&deps.fleet, spec.task_id, &tenant_id).await? {
                    Admitted::Held => return Ok(None),
                    Admitted::Run | Admitted::Gone => {}
                }
            }
            Claim::Busy => {
                tracing::debug!(task_id = %spec.task_id, "task held by another worker; waiting");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(None),
                    () = tokio::time::sleep(poll) => {}
                }
            }
        }
    }
}

/// The rejection of a message that was read: its fields and `reason`.
fn rejected(spec: &TaskSpec, reason: String) -> Rejection {
    Rejection {
        reason: storable::owned(reason),
        task_id: Some(spec.task_id),
        agent_id: Some(spec.agent_id),
        input: Some(spec.input.clone()),
        conversation_id: spec.conversation_id,
        tenant_id: spec.tenant_id.as_deref().map(Box::from),
    }
}

fn new_task<'a>(spec: &'a TaskSpec, reply: Option<&'a ReplyRoute>) -> NewTask<'a> {
    NewTask {
        task_id: spec.task_id,
        agent_id: Some(spec.agent_id),
        conversation_id: spec.conversation_id,
        input: Some(&spec.input),
        constraints: &spec.constraints,
        stream: spec.stream,
        reply,
        received_at: None,
        tenant_id: spec.tenant_id.as_deref(),
        priority: spec.priority,
        rerun: spec.rerun,
    }
}

/// Ends a task this worker just recorded and took as `rejected` (its budget cannot be
/// kept): nothing ran, so `task.failed` (reason rejected) is its only event.
async fn reject_taken(deps: &WorkerDeps, spec: &TaskSpec, reason: String) -> Handled {
    tracing::warn!(task_id = %spec.task_id, %reason, "task message rejected");
    let ended = unheld::reject_taken(&deps.fleet, spec.task_id, Some(spec.agent_id), &reason).await;
    if let Err(err) = ended {
        tracing::error!(task_id = %spec.task_id, error = %format!("{err:#}"),
            "could not record the rejection");
    }
    Handled::Rejected(reason)
}

/// Renews the task's lease every third of its length; releases the task if it is lost.
fn spawn_heartbeat(
    deps: &WorkerDeps,
    task_id: Uuid,
    release: CancellationToken,
) -> CancellationToken {
    let stop = CancellationToken::new();
    let (pool, owner, secs) = (
        deps.fleet.pool.clone(),
        deps.fleet.worker_id,
        deps.lease_secs,
    );
    let stop_heartbeat = stop.clone();
    tokio::spawn(async move {
        let period = Duration::from_secs_f64((secs / 3.0).max(0.1));
        loop {
            tokio::select! {
                () = stop_heartbeat.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            match store::tasks::renew_lease(&pool, task_id, owner, secs).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(%task_id, "lease lost; letting the task go");
                    release.cancel();
                    return;
                }
                Err(err) => tracing::warn!(%task_id, error = %err, "lease renewal failed"),
            }
        }
    });
    stop
}

/// Records a rejected message (when its task id is known) and ends it `rejected`; its
/// producer gets the reply it asked for.
async fn reject(deps: &WorkerDeps, rejection: Rejection, reply: Option<&ReplyRoute>) -> Handled {
    tracing::warn!(task_id = ?rejection.task_id, reason = %rejection.reason, "task message rejected");
    if let Err(err) = unheld::reject(&deps.fleet, &rejection, reply).await {
        tracing::error!(task_id = ?rejection.task_id, error = %format!("{err:#}"),
            "could not record the rejection");
    }
    Handled::Rejected(rejection.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_rule() {
        assert_eq!(
            disposition(&Handled::Rejected("bad".into())),
            Disposition::DeadLetter("bad".into())
        );
        assert_eq!(disposition(&Handled::Finished), Disposition::Ack);
        assert_eq!(disposition(&Handled::Duplicate), Disposition::Ack);
        assert_eq!(disposition(&Handled::Released), Disposition::Requeue);
        assert_eq!(
            disposition(&Handled::Failed("db".into())),
            Disposition::Requeue
        );
    }
}
