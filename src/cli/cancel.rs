//! `agentd cancel TASK_ID`: ends a task `cancelled` wherever it is. A task not yet taken by
//! a worker is ended in the database (its queued message is then acknowledged unrun); a
//! running one is cancelled by its worker through the `agentd.control` exchange. The logic
//! is [`crate::lifecycle::cancel::cancel_task`], shared with the gateway. An id with no task yet is
//! still cancelled (CONTRACT §2: a cancel may precede its task's message), and says so; a
//! task that has ended is refused with exit 1.

use std::process::ExitCode;

use uuid::Uuid;

use super::out::{errln, outln};
use crate::amqp;
use crate::config::Settings;
use crate::lifecycle::cancel::{CancelResult, cancel_task};
use crate::store::{self, tasks::status};

/// Cancels the task and reports where it was.
pub async fn run(settings: &Settings, task_id: Uuid) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let known = match store::tasks::get(&pool, task_id).await? {
        Some(task) if status::is_terminal(&task.status) => {
            errln!(
                "agentd: task {task_id} has already ended ({}); nothing to cancel",
                task.status
            );
            return Ok(ExitCode::FAILURE);
        }
        Some(_) => true,
        None => false,
    };
    let publisher = amqp::connect_declared(settings).await?;
    let cancelled = cancel_task(&pool, &publisher, settings, task_id).await;
    super::control::close(&publisher).await;
    match cancelled? {
        CancelResult::CancelledBeforeStart if !known => {
            outln!("cancelled {task_id} before it started")?;
            errln!(
                "note: no task {task_id} exists yet; the cancel is recorded, and a task \
                 message with this id that arrives later is acknowledged unrun"
            );
        }
        CancelResult::CancelledBeforeStart => outln!("cancelled {task_id} before it started")?,
        CancelResult::CancelSent => outln!("cancel sent for {task_id}")?,
    }
    Ok(ExitCode::SUCCESS)
}
