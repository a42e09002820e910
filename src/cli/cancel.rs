//! `agentd cancel TASK_ID`: ends a task `cancelled` wherever it is. A task not yet taken by
//! a worker is ended in the database (its queued message is then acknowledged unrun); a
//! running one is cancelled by its worker through the `agentd.control` exchange. The logic
//! is [`crate::cancel::cancel_task`], shared with the gateway.

use std::process::ExitCode;

use uuid::Uuid;

use crate::amqp;
use crate::cancel::{CancelResult, cancel_task};
use crate::config::Settings;
use crate::store;

/// Cancels the task and reports where it was.
pub async fn run(settings: &Settings, task_id: Uuid) -> anyhow::Result<ExitCode> {
    let pool = store::prepare(&settings.database.url, 2).await?;
    let publisher = amqp::connect_declared(settings).await?;
    match cancel_task(&pool, &publisher, &settings.amqp, task_id).await? {
        CancelResult::CancelledBeforeStart => println!("cancelled {task_id} before it started"),
        CancelResult::CancelSent => println!("cancel sent for {task_id}"),
    }
    publisher.broker().close().await;
    Ok(ExitCode::SUCCESS)
}
