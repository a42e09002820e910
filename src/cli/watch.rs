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

fn text<'a>(data: &'a Value, key: &str) -> &'a str {
    data.get(key).and_then(Value::as_str).unwrap_or("")
}

/// One line describing an event.
pub fn describe(event: &Value, with_task: bool) -> String {
    let kind = text(event, "type");
    let seq = event.get("seq").and_then(Value::as_i64).unwrap_or(0);
    let data = event.get("data").unwrap_or(&Value::Null);
    let detail = match kind {
        "task.started" => format!(
            "model {} · max_iteration {}",
            text(data, "model"),
            data["max_iteration"]
        ),
        "recursion.started" => {
            let step = data["step_id"].as_str().unwrap_or("-");
            format!("recursion {} (step {step})", data["iteration"])
        }
        "plan.updated" => plan_lines(data),
        "step.updated" => format!("step {} -> {}", text(data, "step_id"), text(data, "status")),
        "tool.started" => format!("{}({})", text(data, "name"), data["arguments"]),
        "tool.completed" if data["success"] == Value::Bool(true) => {
            format!(
                "{} = {} ({} ms)",
                text(data, "name"),
                data["result"],
                data["duration_ms"]
            )
        }
        "tool.completed" => format!("{} failed: {}", text(data, "name"), text(data, "error")),
        "recursion.completed" => format!(
            "{} {} · {}{}",
            text(data, "action_type"),
            text(data, "status"),
            text(data, "abstract"),
            data.get("error_log")
                .and_then(Value::as_str)
                .map(|e| format!(" · error: {e}"))
                .unwrap_or_default()
        ),
        "llm.retry" => format!(
            "attempt {} failed ({}), retry in {} ms",
            data["attempt"],
            text(data, "error"),
            data["delay_ms"]
        ),
        "llm.delta" => text(data, "content").to_owned(),
        "task.completed" => format!(
            "answer after {} recursions:\n{}",
            data["iterations"],
            text(data, "answer")
        ),
        "task.failed" => format!("{}: {}", text(data, "reason"), text(data, "error")),
        "task.cancelled" => format!("after {} recursions", data["iterations"]),
        _ => data.to_string(),
    };
    let task = if with_task {
        format!("{} ", text(event, "task_id"))
    } else {
        String::new()
    };
    format!("{task}#{seq:<3} {kind:<20} {detail}")
}

fn plan_lines(data: &Value) -> String {
    let steps = data
        .get("plan")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let lines: Vec<String> = steps
        .iter()
        .map(|step| {
            format!(
                "\n      [{}] {} {}",
                text(step, "status"),
                text(step, "step_id"),
                text(step, "description")
            )
        })
        .collect();
    format!("{} steps{}", steps.len(), lines.concat())
}
