//! Cancelling a task wherever it is, shared by `agentd cancel` and the gateway's
//! `POST /v1/tasks/{task_id}/cancel`. A task no worker has taken yet is ended in the
//! database with its `task.cancelled` event (its queued message is then acknowledged unrun);
//! any other task gets a `cancel` message on the control exchange, which the worker running
//! it obeys within a second (CONTRACT §2).

use lapin::BasicProperties;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::config::AmqpSettings;
use crate::store;
use crate::worker::events::EventLog;

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
    names: &AmqpSettings,
    task_id: Uuid,
) -> anyhow::Result<CancelResult> {
    if let Some(agent_id) = store::tasks::cancel_unstarted(pool, task_id).await? {
        let last_seq = store::events::last_seq(pool, task_id).await?;
        let mut log = EventLog::new(task_id, agent_id, last_seq);
        log.push("task.cancelled", None, Some(0), json!({"iterations": 0}));
        let mut tx = pool.begin().await?;
        log.store(&mut tx).await?;
        tx.commit().await?;
        log.publish(publisher, &names.events_exchange).await;
        return Ok(CancelResult::CancelledBeforeStart);
    }
    let body = serde_json::to_vec(&json!({"task_id": task_id}))?;
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_type("cancel".into());
    publisher
        .publish(&names.control_exchange, "", &body, properties)
        .await?;
    Ok(CancelResult::CancelSent)
}
