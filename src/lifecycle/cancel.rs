//! Cancelling a task wherever it is, shared by `agentd cancel` and the gateway's
//! `POST /v1/tasks/{task_id}/cancel`. A task no worker has taken yet is ended in the
//! database with its `task.cancelled` event (its queued message is then acknowledged unrun);
//! any other task gets a `cancel` message on the control exchange, which the worker running
//! it obeys within a second (CONTRACT §2).

use sqlx::PgPool;
use uuid::Uuid;

use super::unheld::{self, Sink};
use crate::amqp::Publisher;
use crate::amqp::control::send_control_signed;
use crate::config::Settings;
use crate::contract::ControlMessage;
use crate::contract::control::Cancel;

/// What [`cancel_task`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    /// The task had not started: it is now `cancelled`, with its terminal event.
    CancelledBeforeStart,
    /// The task had started (or ended): a cancel message went to the control exchange.
    CancelSent,
}

/// Cancels `task_id`: ends it at once when unstarted, else asks its worker to stop it.
pub async fn cancel_task(
    pool: &PgPool,
    publisher: &Publisher,
    settings: &Settings,
    task_id: Uuid,
) -> anyhow::Result<CancelResult> {
    let names = &settings.amqp;
    let sink = Sink {
        pool,
        publisher,
        exchange: &names.events_exchange,
    };
    if unheld::cancel_unstarted(sink, task_id).await? {
        return Ok(CancelResult::CancelledBeforeStart);
    }
    let cancel = ControlMessage::Cancel(Cancel { task_id });
    send_control_signed(publisher, names, &settings.control, &cancel).await?;
    Ok(CancelResult::CancelSent)
}
