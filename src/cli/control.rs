//! `agentd inject|pause|resume`: publishes a control message to `agentd.control` (CONTRACT
//! §2); the worker that holds the task (pause, inject) or the first worker to read it
//! (resume) acts within a second, and one published while no worker runs waits in
//! `agentd.control.pending`. A task that does not exist or has ended is refused first, with
//! the reason and exit 1, as the gateway answers 404 or 409: such a message would change
//! nothing.

use std::process::ExitCode;

use uuid::Uuid;

use super::out::{errln, outln};
use crate::amqp;
use crate::amqp::control::send_control_signed;
use crate::config::Settings;
use crate::contract::ControlMessage;
use crate::contract::control::Inject;
use crate::core::budget::Budget;
use crate::store::{self, tasks::TaskRow, tasks::status};

/// Publishes `message` when its task can take it, and says what happened.
pub async fn send(settings: &Settings, message: ControlMessage) -> anyhow::Result<ExitCode> {
    if let ControlMessage::Inject(inject) = &message
        && let Some(refusal) = Inject::refusal(&inject.text, settings.control.max_inject_bytes)
    {
        errln!("agentd: {refusal}; no inject sent");
        return Ok(ExitCode::FAILURE);
    }
    let pool = store::connect(&settings.database.url, 1).await?;
    let task = store::tasks::get(&pool, message.task_id()).await;
    pool.close().await;
    if let Some(refusal) = refusal(message.task_id(), task?.as_ref()) {
        errln!("agentd: {refusal}; no {} sent", message.kind());
        return Ok(ExitCode::FAILURE);
    }
    let publisher = amqp::connect_declared(settings).await?;
    let (names, control) = (&settings.amqp, &settings.control);
    let sent = send_control_signed(&publisher, names, control, &message).await;
    close(&publisher).await;
    sent?;
    outln!("{} sent for {}", message.kind(), message.task_id())?;
    Ok(ExitCode::SUCCESS)
}

/// Why a control message for `task_id` (whose row is `task`) would change nothing.
pub fn refusal(task_id: Uuid, task: Option<&TaskRow>) -> Option<String> {
    match task {
        None => Some(format!("no task {task_id}")),
        Some(task) if status::is_terminal(&task.status) => Some(format!(
            "task {task_id} has already ended ({})",
            task.status
        )),
        Some(_) => None,
    }
}

/// Closes the publisher's channel, then the connection: a connection closed while its
/// channel is still open makes lapin log an error on a clean exit.
pub async fn close(publisher: &amqp::Publisher) {
    publisher.close().await;
    publisher.broker().close().await;
}

/// Parses a `--budget` argument (JSON, checked as a task message's budget is).
pub fn budget_arg(text: &str) -> Result<Budget, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))?;
    crate::contract::intake::parse_budget(Some(value))?
        .ok_or_else(|| "the budget must be a JSON object".to_owned())
}

/// Parses a duration such as `30s`, `5m` or `1h` (a whole number and s, m, h, d or w).
pub fn duration_arg(text: &str) -> Result<std::time::Duration, String> {
    let age = store::prune::parse_age(text)?;
    age.to_std()
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| format!("'{text}' must be longer than 0"))
}
