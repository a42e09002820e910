//! The operations commands of CONTRACT §14 beyond schedules and listing: `agentd agent
//! create`'s stall flags, and `agentd resolve TASK CALL --outcome O [--result JSON]
//! [--error TEXT] --reason TEXT`, which records a person's decision about a call whose
//! outcome is unknown (the task waits, reason `unknown_outcome`) in PostgreSQL at once, like
//! the gateway, and says what came of it; `agentd unknown` lists the calls that wait.

use std::process::ExitCode;

use anyhow::Context;
use uuid::Uuid;

use super::out::{errln, outln};
use crate::config::Settings;
use crate::core::stall::StallSettings;
use crate::core::unknown::{Resolution, ResolveOutcome};
use crate::lifecycle::resolutions::{Outcome, resolve_verified};
use crate::lifecycle::unheld::Sink;
use crate::{amqp, store};

/// The resolution of `agentd resolve`, checked.
pub fn resolution(
    outcome: &str,
    result: Option<String>,
    error: Option<String>,
    reason: String,
    by: Option<String>,
) -> anyhow::Result<Resolution> {
    let outcome = ResolveOutcome::parse(outcome)
        .with_context(|| format!("--outcome {outcome:?}: succeeded, failed, retry or skip"))?;
    let result = match result {
        Some(text) => Some(serde_json::from_str(&text).context("--result is not JSON")?),
        None => None,
    };
    let user = std::env::var("USER").ok().filter(|user| !user.is_empty());
    let resolution = Resolution {
        outcome,
        result,
        error,
        reason,
        by: by.or(user),
    };
    resolution.validate().map_err(anyhow::Error::msg)?;
    Ok(resolution)
}

/// Records the resolution and reports it; exit 1 when it changed nothing.
pub async fn run(
    settings: &Settings,
    task_id: Uuid,
    tool_call_id: &str,
    resolution: &Resolution,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let publisher = amqp::connect_declared(settings).await?;
    let sink = Sink {
        pool: &pool,
        publisher: &publisher,
        exchange: &settings.amqp.events_exchange,
    };
    let queue = &settings.amqp.tasks_queue;
    // Verified: the OS user running the command (CONTRACT v3 §15), as for approvals.
    let verified = super::approvals::os_user();
    let outcome = resolve_verified(
        sink,
        queue,
        task_id,
        tool_call_id,
        resolution,
        verified.as_deref(),
    )
    .await;
    super::control::close(&publisher).await;
    let name = resolution.outcome.as_str();
    let code = match outcome? {
        Outcome::Recorded { resumed: true, .. } => {
            outln!("{name} recorded for {tool_call_id}; task {task_id} resumes")?;
            ExitCode::SUCCESS
        }
        Outcome::Recorded { resumed: false, .. } => {
            outln!(
                "{name} recorded for {tool_call_id}; task {task_id} waits for other resolutions"
            )?;
            ExitCode::SUCCESS
        }
        Outcome::AlreadyResolved(earlier) => {
            errln!("tool call {tool_call_id} was resolved already ({earlier}); nothing changed");
            ExitCode::FAILURE
        }
        Outcome::NotWaiting(status) => {
            errln!("task {task_id} does not wait for a resolution (it is {status})");
            ExitCode::FAILURE
        }
        Outcome::NotFound => {
            errln!(
                "no held call {tool_call_id} of task {task_id} (see GET /v1/tool_calls?state=unknown)"
            );
            ExitCode::FAILURE
        }
    };
    Ok(code)
}

/// `--stall-repeat N --stall-action A` as `agents.stall` (`None`: neither given, the
/// default); refused as the gateway refuses them (a repeat of 1, ...).
pub fn stall_flags(
    repeat: Option<u32>,
    action: Option<&str>,
) -> anyhow::Result<Option<StallSettings>> {
    if repeat.is_none() && action.is_none() {
        return Ok(None);
    }
    let mut value = serde_json::Map::new();
    if let Some(repeat) = repeat {
        value.insert("repeat".into(), repeat.into());
    }
    if let Some(action) = action {
        value.insert("action".into(), action.into());
    }
    let settings = StallSettings::from_json(&serde_json::Value::Object(value))?;
    Ok(Some(settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::stall::StallAction;

    #[test]
    fn stall_flags_make_settings_and_refuse_a_repeat_of_one() {
        assert_eq!(stall_flags(None, None).unwrap(), None);
        let fail = stall_flags(Some(2), Some("fail")).unwrap().unwrap();
        assert_eq!((fail.repeat, fail.action), (2, StallAction::Fail));
        let off = stall_flags(Some(0), None).unwrap().unwrap();
        assert!(off.is_off());
        let error = stall_flags(Some(1), None).unwrap_err().to_string();
        assert!(error.contains("use 0 (off) or 2 or more"), "{error}");
    }

    #[test]
    fn resolve_flags_are_checked_before_anything_is_sent() {
        let ok = resolution(
            "succeeded",
            Some(r#"{"id": 1}"#.into()),
            None,
            "seen".into(),
            None,
        );
        assert_eq!(ok.unwrap().result, Some(serde_json::json!({"id": 1})));
        let bad_json = resolution("succeeded", Some("{".into()), None, "seen".into(), None);
        assert!(
            bad_json
                .unwrap_err()
                .to_string()
                .contains("--result is not JSON")
        );
        let blank = resolution("skip", None, None, " ".into(), None);
        assert!(blank.unwrap_err().to_string().contains("reason"));
        let misplaced = resolution("retry", Some("1".into()), None, "x".into(), None);
        assert!(misplaced.is_err());
    }
}
