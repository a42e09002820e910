//! `agentd watch`: prints progress events as they are published, one readable line each.

use std::process::ExitCode;

use futures::StreamExt;
use serde_json::Value;
use uuid::Uuid;

use crate::amqp;
use crate::config::Settings;

/// Follows the events exchange until interrupted.
pub async fn run(settings: &Settings, task: Option<Uuid>) -> anyhow::Result<ExitCode> {
    let publisher = amqp::connect_declared(settings).await?;
    let mut consumer =
        amqp::subscriber::subscribe(publisher.broker(), &settings.amqp.events_exchange).await?;
    eprintln!(
        "watching {} (Ctrl-C to stop)",
        settings.amqp.events_exchange
    );
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery?;
        let Ok(event) = serde_json::from_slice::<Value>(&delivery.data) else {
            continue;
        };
        if task.is_some_and(|task| event_task(&event) != Some(task)) {
            continue;
        }
        println!("{}", describe(&event, task.is_none()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The task id of an event.
fn event_task(event: &Value) -> Option<Uuid> {
    event
        .get("task_id")
        .and_then(Value::as_str)
        .and_then(|id| Uuid::parse_str(id).ok())
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
