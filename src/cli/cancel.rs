//! `agentd cancel TASK_ID`: ends a task `cancelled` wherever it is. A task not yet taken by
//! a worker is ended in the database (its queued message is then acknowledged unrun); a
//! running one is cancelled by its worker through the `agentd.control` exchange.

use std::process::ExitCode;

use lapin::BasicProperties;
use serde_json::json;
use uuid::Uuid;

use crate::amqp;
use crate::config::Settings;
use crate::store;
use crate::worker::events::EventLog;

/// Cancels the task and reports where it was.
pub async fn run(settings: &Settings, task_id: Uuid) -> anyhow::Result<ExitCode> {
    let pool = store::prepare(&settings.database.url, 2).await?;
    let publisher = amqp::connect_declared(settings).await?;
    if let Some(agent_id) = store::tasks::cancel_unstarted(&pool, task_id).await? {
        let last_seq = store::events::last_seq(&pool, task_id).await?;
        let mut log = EventLog::new(task_id, agent_id, last_seq);
        log.push("task.cancelled", None, Some(0), json!({"iterations": 0}));
        let mut tx = pool.begin().await?;
        log.store(&mut tx).await?;
        tx.commit().await?;
        log.publish(&publisher, &settings.amqp.events_exchange)
            .await;
        println!("cancelled {task_id} before it started");
    } else {
        let body = serde_json::to_vec(&json!({"task_id": task_id}))?;
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_type("cancel".into());
        publisher
            .publish(&settings.amqp.control_exchange, "", &body, properties)
            .await?;
        println!("cancel sent for {task_id}");
    }
    publisher.broker().close().await;
    Ok(ExitCode::SUCCESS)
}
