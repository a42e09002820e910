//! `agentd approve|reject TASK_ID TOOL_CALL_ID`: records a person's decision about a gated
//! tool call (CONTRACT §7) in PostgreSQL at once, like the gateway does, and says what came
//! of it: the decision is the call's (and the task resumes when it was the last one it
//! waited for), or another decision came first.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;
use uuid::Uuid;

use crate::amqp;
use crate::config::Settings;
use crate::core::approval::{Decision, DecisionKind};
use crate::store;
use crate::worker::approvals::{Decided, decide};
use crate::worker::unheld::Sink;

/// The decision of `agentd approve`: as asked, `--edit` or `--respond`.
pub fn approval(
    edit: Option<String>,
    respond: Option<String>,
    by: Option<String>,
) -> anyhow::Result<Decision> {
    let json = |flag: &str, text: &str| -> anyhow::Result<Value> {
        serde_json::from_str(text).with_context(|| format!("{flag} is not JSON"))
    };
    let (kind, arguments, result) = match (edit, respond) {
        (Some(edit), _) => (DecisionKind::Edit, Some(json("--edit", &edit)?), None),
        (None, Some(respond)) => (
            DecisionKind::Respond,
            None,
            Some(json("--respond", &respond)?),
        ),
        (None, None) => (DecisionKind::Approve, None, None),
    };
    let decision = Decision {
        kind,
        arguments,
        result,
        reason: None,
        by: by.or_else(user),
    };
    decision.validate().map_err(anyhow::Error::msg)?;
    Ok(decision)
}

/// The decision of `agentd reject`.
pub fn rejection(reason: Option<String>, by: Option<String>) -> Decision {
    Decision {
        kind: DecisionKind::Reject,
        arguments: None,
        result: None,
        reason,
        by: by.or_else(user),
    }
}

fn user() -> Option<String> {
    std::env::var("USER").ok().filter(|user| !user.is_empty())
}

/// Records the decision and reports it; exit 1 when it changed nothing.
pub async fn run(
    settings: &Settings,
    task_id: Uuid,
    tool_call_id: &str,
    decision: Decision,
) -> anyhow::Result<ExitCode> {
    let pool = store::prepare(&settings.database.url, 2).await?;
    let publisher = amqp::connect_declared(settings).await?;
    let sink = Sink {
        pool: &pool,
        publisher: &publisher,
        exchange: &settings.amqp.events_exchange,
    };
    let queue = &settings.amqp.tasks_queue;
    let decided = decide(sink, queue, task_id, tool_call_id, &decision).await;
    publisher.broker().close().await;
    let kind = decision.kind.as_str();
    let code = match decided? {
        Decided::Recorded { resumed: true } => {
            println!("{kind} recorded for {tool_call_id}; task {task_id} resumes");
            ExitCode::SUCCESS
        }
        Decided::Recorded { resumed: false } => {
            println!(
                "{kind} recorded for {tool_call_id}; task {task_id} waits for other decisions"
            );
            ExitCode::SUCCESS
        }
        Decided::AlreadyDecided(earlier) => {
            eprintln!("tool call {tool_call_id} was decided already ({earlier}); nothing changed");
            ExitCode::FAILURE
        }
        Decided::NotWaiting(status) => {
            eprintln!("task {task_id} does not wait for a decision (it is {status})");
            ExitCode::FAILURE
        }
        Decided::NotFound => {
            eprintln!("no approval request for tool call {tool_call_id} of task {task_id}");
            ExitCode::FAILURE
        }
    };
    Ok(code)
}
