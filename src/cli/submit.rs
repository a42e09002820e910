//! `agentd submit`: publishes a task the way any producer would and, with --wait, waits for
//! its terminal event on a private reply queue (CONTRACT §9: `reply_to`, `correlation_id`)
//! and prints the answer.

use std::process::ExitCode;

use futures::StreamExt;
use serde_json::Value;
use uuid::Uuid;

use super::watch::describe;
use crate::amqp;
use crate::config::Settings;
use crate::contract::TaskMessage;

/// Publishes the task; prints its id, or waits for its end with `wait`.
pub async fn run(settings: &Settings, task: &TaskMessage, wait: bool) -> anyhow::Result<ExitCode> {
    // The id is printed and used as the correlation id, so it is chosen here when the
    // caller left it out.
    let task_id = task.task_id.unwrap_or_else(Uuid::now_v7);
    let task = TaskMessage {
        task_id: Some(task_id),
        ..task.clone()
    };
    let publisher = amqp::connect_declared(settings).await?;
    let body = serde_json::to_vec(&task)?;
    let queue = &settings.amqp.tasks_queue;
    if !wait {
        publisher.publish_task(queue, &body).await?;
        println!("{task_id}");
        return Ok(ExitCode::SUCCESS);
    }
    // The reply queue exists before the task is published, so the reply cannot be missed.
    let (reply_to, mut replies) = amqp::subscriber::reply_queue(publisher.broker()).await?;
    let correlation_id = task_id.to_string();
    publisher
        .publish_task_with_reply(queue, &body, &reply_to, &correlation_id)
        .await?;
    println!("{task_id}");
    while let Some(delivery) = replies.next().await {
        let delivery = delivery?;
        let ours = delivery
            .properties
            .correlation_id()
            .as_ref()
            .map(|id| id.as_str());
        if ours != Some(correlation_id.as_str()) {
            continue;
        }
        let event: Value = serde_json::from_slice(&delivery.data)?;
        eprintln!("{}", describe(&event, false));
        return Ok(match event.get("type").and_then(Value::as_str) {
            Some("task.completed") => {
                println!("{}", event["data"]["answer"].as_str().unwrap_or(""));
                ExitCode::SUCCESS
            }
            _ => ExitCode::FAILURE,
        });
    }
    anyhow::bail!("the reply queue closed before the task ended")
}
