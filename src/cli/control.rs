//! `agentd pause|resume`: publishes a control message to `agentd.control` (CONTRACT §2);
//! the worker that holds the task (pause) or the first worker to read it (resume) acts
//! within a second, and one published while no worker runs waits in
//! `agentd.control.pending`.

use std::process::ExitCode;

use crate::amqp;
use crate::cancel::send_control;
use crate::config::Settings;
use crate::contract::ControlMessage;
use crate::core::budget::Budget;

/// Publishes `message` and says so.
pub async fn send(settings: &Settings, message: ControlMessage) -> anyhow::Result<ExitCode> {
    let publisher = amqp::connect_declared(settings).await?;
    send_control(&publisher, &settings.amqp, &message).await?;
    println!("{} sent for {}", message.kind(), message.task_id());
    publisher.broker().close().await;
    Ok(ExitCode::SUCCESS)
}

/// Parses a `--budget` argument (JSON, checked as a task message's budget is).
pub fn budget_arg(text: &str) -> Result<Budget, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))?;
    crate::worker::intake::parse_budget(Some(value))?
        .ok_or_else(|| "the budget must be a JSON object".to_owned())
}
