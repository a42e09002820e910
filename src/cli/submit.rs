//! `agentd submit`: publishes a task the way any producer would and, with --wait, follows
//! its events until the terminal one and prints the answer.

use std::process::ExitCode;

use futures::StreamExt;
use serde_json::Value;
use uuid::Uuid;

use super::watch::{describe, event_task};
use crate::amqp;
use crate::config::Settings;
use crate::contract::TaskMessage;

/// Publishes the task; prints its id, or follows it to the end with `wait`.
pub async fn run(settings: &Settings, task: &TaskMessage, wait: bool) -> anyhow::Result<ExitCode> {
    // The id is printed and followed, so it is chosen here when the caller left it out.
    let task_id = task.task_id.unwrap_or_else(Uuid::now_v7);
    let task = TaskMessage {
        task_id: Some(task_id),
        ..task.clone()
    };
    let publisher = amqp::connect_declared(settings).await?;
    // Subscribe before publishing so that no event can be missed.
    let mut events = match wait {
        true => Some(
            amqp::subscriber::subscribe(publisher.broker(), &settings.amqp.events_exchange).await?,
        ),
        false => None,
    };
    let body = serde_json::to_vec(&task)?;
    publisher
        .publish_task(&settings.amqp.tasks_queue, &body)
        .await?;
    println!("{task_id}");
    let Some(events) = events.as_mut() else {
        return Ok(ExitCode::SUCCESS);
    };
    while let Some(delivery) = events.next().await {
        let delivery = delivery?;
        let Ok(event) = serde_json::from_slice::<Value>(&delivery.data) else {
            continue;
        };
        if event_task(&event) != Some(task_id) {
            continue;
        }
        eprintln!("{}", describe(&event, false));
        match event.get("type").and_then(Value::as_str) {
            Some("task.completed") => {
                println!("{}", event["data"]["answer"].as_str().unwrap_or(""));
                return Ok(ExitCode::SUCCESS);
            }
            Some("task.failed" | "task.cancelled") => return Ok(ExitCode::FAILURE),
            _ => {}
        }
    }
    anyhow::bail!("the event stream ended before the task did")
}
