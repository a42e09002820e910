//! `agentd watch`: prints progress events as they are published, one readable line each.
//! `--task ID` first prints the task's stored events, then follows it live (deduplicated by
//! seq) and stops after its terminal event.

use std::process::ExitCode;

use futures::StreamExt;
use serde_json::Value;
use uuid::Uuid;

use super::follow::Follow;
use super::out::{errln, outln};
use crate::amqp;
use crate::config::Settings;
use crate::contract::events::{Event, EventData, EventHead, PlanStepView};
use crate::store::{self, tasks::status};

/// Follows the events exchange until interrupted, or one task until it ends.
pub async fn run(settings: &Settings, task: Option<Uuid>) -> anyhow::Result<ExitCode> {
    // A task id is looked up first: a missing database is said before anything waits.
    let pool = match task {
        Some(_) => Some(store::connect(&settings.database.url, 2).await?),
        None => None,
    };
    let publisher = amqp::connect_declared(settings).await?;
    let followed = match publisher.broker().channel().await {
        Ok(channel) => {
            let followed = follow(settings, &channel, task.zip(pool.as_ref())).await;
            amqp::broker::close_channel(&channel).await;
            followed
        }
        Err(err) => Err(err),
    };
    super::control::close(&publisher).await;
    followed
}

async fn follow(
    settings: &Settings,
    channel: &lapin::Channel,
    task: Option<(Uuid, &sqlx::PgPool)>,
) -> anyhow::Result<ExitCode> {
    let exchange = &settings.amqp.events_exchange;
    let mut consumer = amqp::subscriber::consume_fanout(channel, exchange).await?;
    match task {
        Some((task_id, pool)) => one_task(pool, &mut consumer, task_id).await,
        None => every_task(&mut consumer, exchange).await,
    }
}

/// Every event of every task, until interrupted.
async fn every_task(consumer: &mut lapin::Consumer, exchange: &str) -> anyhow::Result<ExitCode> {
    errln!("watching {exchange} (Ctrl-C to stop)");
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery?;
        let Ok(event) = serde_json::from_slice::<Value>(&delivery.data) else {
            continue;
        };
        outln!("{}", describe(&event, true))?;
    }
    anyhow::bail!("the subscription to {exchange} ended")
}

/// One task: its stored events, then live ones, until its terminal event.
async fn one_task(
    pool: &sqlx::PgPool,
    consumer: &mut lapin::Consumer,
    task_id: Uuid,
) -> anyhow::Result<ExitCode> {
    let mut follow = Follow::new(pool, task_id);
    let mut show = |event: &Value| outln!("{}", describe(event, false));
    match store::tasks::get(pool, task_id).await? {
        None => errln!("no task {task_id} yet: waiting for its events (Ctrl-C to stop)"),
        Some(task) if status::is_terminal(&task.status) => {
            if follow.catch_up(&mut show).await?.is_none() {
                errln!(
                    "task {task_id} has ended ({}); its events are gone",
                    task.status
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(_) => {}
    }
    follow.run(consumer, None, &mut show).await?;
    Ok(ExitCode::SUCCESS)
}

/// One line describing an event: its envelope, and its payload as the contract types it
/// (a payload this build cannot type is shown as its JSON).
pub fn describe(event: &Value, with_task: bool) -> String {
    let head = EventHead::from_value(event);
    let (kind, seq) = head
        .as_ref()
        .map_or(("", 0), |head| (head.event_type.as_str(), head.seq));
    let detail = Event::from_value(event)
        .and_then(|event| detail(&event.body))
        .unwrap_or_else(|| event.get("data").unwrap_or(&Value::Null).to_string());
    let task = match (&head, with_task) {
        (Some(head), true) => format!("{} ", head.task_id),
        _ => String::new(),
    };
    format!("{task}#{seq:<3} {kind:<20} {detail}")
}

/// The readable part of the payloads worth more than their JSON.
fn detail(data: &EventData) -> Option<String> {
    let text = match data {
        EventData::TaskStarted(started) => format!(
            "model {} · max_iteration {}",
            started.model, started.max_iteration
        ),
        EventData::RecursionStarted(started) => {
            let step = started.step_id.as_deref().unwrap_or("-");
            format!("recursion {} (step {step})", started.iteration)
        }
        EventData::PlanUpdated(updated) => plan_lines(&updated.plan),
        EventData::StepUpdated(step) => {
            format!("step {} -> {}", step.step_id, step.status.as_str())
        }
        EventData::ToolStarted(tool) => format!("{}({})", tool.name, tool.arguments),
        EventData::ToolCompleted(tool) if tool.success => {
            let result = tool.result.as_ref().unwrap_or(&Value::Null);
            format!("{} = {result} ({} ms)", tool.name, tool.duration_ms)
        }
        EventData::ToolCompleted(tool) => {
            let error = tool.error.as_deref().unwrap_or("");
            format!("{} failed: {error}", tool.name)
        }
        EventData::RecursionCompleted(done) => format!(
            "{} {} · {}{}",
            done.action_type.as_deref().unwrap_or(""),
            done.status.as_str(),
            done.abstract_,
            done.error_log
                .as_deref()
                .map(|e| format!(" · error: {e}"))
                .unwrap_or_default()
        ),
        EventData::LlmRetry(retry) => format!(
            "attempt {} failed ({}), retry in {} ms",
            retry.attempt, retry.error, retry.delay_ms
        ),
        EventData::LlmDelta(delta) => delta.content.clone(),
        EventData::TaskCompleted(done) => format!(
            "answer after {} recursions:\n{}",
            done.iterations, done.answer
        ),
        EventData::TaskFailed(failed) => format!("{}: {}", failed.reason.as_str(), failed.error),
        EventData::TaskCancelled(cancelled) => format!("after {} recursions", cancelled.iterations),
        _ => return None,
    };
    Some(text)
}

fn plan_lines(plan: &[PlanStepView]) -> String {
    let lines: Vec<String> = plan
        .iter()
        .map(|step| {
            format!(
                "\n      [{}] {} {}",
                step.status.as_str(),
                step.step_id,
                step.description
            )
        })
        .collect();
    format!("{} steps{}", plan.len(), lines.concat())
}
