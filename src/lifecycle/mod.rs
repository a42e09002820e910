//! A task's life between runs: what happens to a task while no run holds it, and the
//! commands people use on it. A run (`worker/`) hands a task here when it waits or ends;
//! this room never runs a task itself, it makes the task `pending` again and enqueues its
//! message, and whichever worker reads it runs it.
//!
//! - Calls held for a person: `approvals` (decide, and the expiry pass), `resolutions`
//!   (resolve a call whose outcome is unknown).
//! - Turns, shares and children: `conversations` (one turn at a time per conversation),
//!   `admission` (a tenant's fair share of running tasks), `delegation` (child tasks and
//!   freeing their parent).
//! - Ending or steering a task no worker holds: `unheld`; a task a dead worker left:
//!   `reconcile` (orphans), `deaths` (dead-lettered messages).
//! - Control messages (`control/`): the consumers every worker runs, who may steer, and the
//!   registry of the tasks this worker runs (`running`, `interrupt`) that they reach.
//! - The commands the CLI and the gateway share: `cancel`, `fork`, `rerun` (and `approvals::decide`,
//!   `resolutions::resolve`).
//! - Evaluation runs: `evals` (make a run, publish its reruns, and the pass that fills its
//!   items when they end).
//! - `sweep`: the shape of every periodic pass.

pub mod admission;
pub mod approvals;
pub mod cancel;
pub mod control;
pub mod conversations;
pub mod deaths;
pub mod delegation;
pub mod evals;
mod fleet;
pub mod fork;
pub mod interrupt;
pub mod reconcile;
pub mod rerun;
pub mod resolutions;
pub mod running;
pub mod sweep;
pub mod unheld;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
pub use fleet::Fleet;
use running::RunningTasks;

/// Starts the loops every worker runs beside its consumer for the tasks no run holds: the
/// two control consumers, dead letters, the reconciler, the outbox, conversation, tenant,
/// delegation and tombstone sweeps, and the approval expiry pass. They end at `shutdown`.
/// A new loop is one more line here.
pub fn spawn(
    fleet: &Fleet,
    settings: &Settings,
    running: &RunningTasks,
    shutdown: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let shared = Arc::new(fleet.clone());
    let (pool, publisher, names) = (&fleet.pool, &fleet.publisher, &fleet.names);
    let mut loops = control::spawn(Arc::clone(&shared), running.clone(), shutdown.clone());
    loops.push(deaths::spawn(
        shared,
        settings.worker.max_deliveries,
        shutdown.clone(),
    ));
    loops.push(reconcile::spawn(
        pool.clone(),
        publisher.clone(),
        names.tasks_queue.clone(),
        Duration::from_secs_f64(settings.worker.orphan_after_secs),
        shutdown.clone(),
    ));
    loops.push(sweep::spawn_outbox(
        pool.clone(),
        publisher.clone(),
        names.events_exchange.clone(),
        shutdown.clone(),
    ));
    loops.push(conversations::spawn_sweep(
        pool.clone(),
        publisher.clone(),
        names.tasks_queue.clone(),
        shutdown.clone(),
    ));
    loops.push(admission::spawn_sweep(
        pool.clone(),
        publisher.clone(),
        names.tasks_queue.clone(),
        shutdown.clone(),
    ));
    loops.push(delegation::spawn_sweep(
        pool.clone(),
        publisher.clone(),
        names.tasks_queue.clone(),
        shutdown.clone(),
    ));
    loops.push(evals::spawn_sweep(pool.clone(), shutdown.clone()));
    loops.push(control::spawn_tombstone_sweep(
        pool.clone(),
        settings.control.tombstone_secs,
        shutdown.clone(),
    ));
    loops.push(approvals::spawn_expiry(
        pool.clone(),
        publisher.clone(),
        names.events_exchange.clone(),
        names.tasks_queue.clone(),
        shutdown.clone(),
    ));
    loops
}
