//! `agentd submit`: publishes a task the way any producer would and, with --wait, waits for
//! its terminal event on a private reply queue (CONTRACT §9: `reply_to`, `correlation_id`)
//! and prints the answer.

use std::process::ExitCode;

use anyhow::Context;
use futures::StreamExt;
use serde_json::Value;
use sqlx::PgPool;
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
    let turn = match record_turn(settings, &task).await {
        Ok(turn) => turn,
        Err(err) => {
            // The message alone still makes a turn, placed when a worker records it.
            eprintln!(
                "warning: the turn was not recorded before publishing ({err:#}): turns \
                 published at about the same time may run in another order"
            );
            None
        }
    };
    if !wait {
        let published = publisher.publish_task(queue, &body).await;
        withdraw_unpublished(turn.as_ref(), task_id, published.is_err()).await;
        published?;
        println!("{task_id}");
        return Ok(ExitCode::SUCCESS);
    }
    // The reply queue exists before the task is published, so the reply cannot be missed.
    let (reply_to, mut replies) = amqp::subscriber::reply_queue(publisher.broker()).await?;
    let correlation_id = task_id.to_string();
    let published = publisher
        .publish_task_with_reply(queue, &body, &reply_to, &correlation_id)
        .await;
    withdraw_unpublished(turn.as_ref(), task_id, published.is_err()).await;
    published?;
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

/// A conversation turn is recorded as `pending` before it is published, which fixes its
/// place in the conversation whichever worker reads it first (CONTRACT §10). Returns the
/// pool it was recorded with; `None` for a task without a conversation or already recorded.
/// Without PostgreSQL the turn is published unrecorded, with a warning.
async fn record_turn(settings: &Settings, task: &TaskMessage) -> anyhow::Result<Option<PgPool>> {
    let (Some(task_id), Some(_)) = (task.task_id, task.conversation_id) else {
        return Ok(None);
    };
    let pool = crate::store::connect(&settings.database.url, 1).await?;
    let turn = crate::store::tasks::NewTask {
        task_id,
        agent_id: Some(task.agent_id),
        conversation_id: task.conversation_id,
        input: Some(&task.input),
        constraints: &task.constraints,
        stream: task.stream,
        reply: None,
    };
    let new = crate::store::conversations::record_turn(&pool, &turn)
        .await
        .context("recording the conversation turn")?;
    // A row that existed is not ours to withdraw.
    Ok(new.then_some(pool))
}

/// Withdraws a recorded turn whose message was not published.
async fn withdraw_unpublished(turn: Option<&PgPool>, task_id: Uuid, failed: bool) {
    if let (Some(pool), true) = (turn, failed) {
        let _ = crate::store::conversations::withdraw_turn(pool, task_id).await;
    }
}
