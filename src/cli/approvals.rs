//! `agentd approve|reject TASK_ID TOOL_CALL_ID`: records a person's decision about a gated
//! tool call (CONTRACT §7) in PostgreSQL at once, like the gateway does, and says what came
//! of it: the decision is the call's (and the task resumes when it was the last one it
//! waited for), or another decision came first. `agentd approvals [--task ID]` lists the
//! calls that wait for a decision, each with the commands that decide it.

use std::process::ExitCode;

use super::out::{errln, outln};

use anyhow::Context;
use chrono::SecondsFormat;
use serde_json::Value;
use uuid::Uuid;

use crate::amqp;
use crate::config::Settings;
use crate::core::approval::{Decision, DecisionKind};
use crate::lifecycle::approvals::{Decided, decide_verified};
use crate::lifecycle::unheld::Sink;
use crate::store;
use crate::store::approvals::ApprovalRow;

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
    let pool = store::open(&settings.database.url, 2).await?;
    let publisher = amqp::connect_declared(settings).await?;
    let sink = Sink {
        pool: &pool,
        publisher: &publisher,
        exchange: &settings.amqp.events_exchange,
    };
    let queue = &settings.amqp.tasks_queue;
    // Verified: the OS user running the command (CONTRACT v3 §15), not $USER.
    let verified = os_user();
    let decided = decide_verified(
        sink,
        queue,
        task_id,
        tool_call_id,
        &decision,
        verified.as_deref(),
    )
    .await;
    super::control::close(&publisher).await;
    let kind = decision.kind.as_str();
    let code = match decided? {
        Decided::Recorded { resumed: true } => {
            outln!("{kind} recorded for {tool_call_id}; task {task_id} resumes")?;
            ExitCode::SUCCESS
        }
        Decided::Recorded { resumed: false } => {
            outln!("{kind} recorded for {tool_call_id}; task {task_id} waits for other decisions")?;
            ExitCode::SUCCESS
        }
        Decided::AlreadyDecided(earlier) => {
            errln!("tool call {tool_call_id} was decided already ({earlier}); nothing changed");
            ExitCode::FAILURE
        }
        Decided::NotWaiting(status) => {
            errln!("task {task_id} does not wait for a decision (it is {status})");
            ExitCode::FAILURE
        }
        Decided::NotFound => {
            errln!("no approval request for tool call {tool_call_id} of task {task_id}");
            ExitCode::FAILURE
        }
    };
    Ok(code)
}

/// The OS user this process runs as, as the system knows it (not `$USER`, which anyone
/// sets): the owner of `/proc/self` named through `/etc/passwd`, `uid N` when it has no
/// name there; `None` where there is no `/proc` (not Linux).
pub fn os_user() -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata("/proc/self").ok()?.uid();
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        Some(user_name(&passwd, uid).unwrap_or_else(|| format!("uid {uid}")))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The name of `uid` in a passwd file's text.
fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

/// Longest arguments text shown for a pending call, in characters.
const ARGUMENTS_SHOWN: usize = 200;

/// `agentd approvals [--task ID] [--limit N]`: the tool calls waiting for a decision, oldest
/// first; exit 1 when `--task` names no task.
pub async fn list(settings: &Settings, task: Option<Uuid>, limit: i64) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(limit > 0, "--limit must be > 0");
    let pool = store::connect(&settings.database.url, 2).await?;
    if let Some(task_id) = task {
        let Some(row) = store::tasks::get(&pool, task_id).await? else {
            errln!("agentd: no task {task_id}");
            return Ok(ExitCode::FAILURE);
        };
        if row.wait_reason.as_deref() != Some("approval") {
            errln!(
                "task {task_id} waits for no decision (it is {})",
                row.status
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    let pending = store::approvals::pending(&pool, task, limit).await?;
    if pending.is_empty() {
        errln!("no tool call waits for a decision");
    }
    for approval in &pending {
        outln!("task {}", approval.task_id)?;
        for line in describe_pending(approval) {
            outln!("  {line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A pending approval for people: the call, when it was asked and expires, and the commands
/// that decide it.
pub fn describe_pending(approval: &ApprovalRow) -> Vec<String> {
    let arguments = approval
        .arguments
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    let arguments = match arguments.chars().count() > ARGUMENTS_SHOWN {
        true => format!(
            "{}…",
            arguments.chars().take(ARGUMENTS_SHOWN).collect::<String>()
        ),
        false => arguments,
    };
    let effect = approval.effect.as_deref().unwrap_or("side_effect");
    let when = |at: chrono::DateTime<chrono::Utc>| at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let (task, call) = (approval.task_id, shell_word(&approval.tool_call_id));
    vec![
        format!(
            "call {call} · {}({arguments}) [{effect}] · requested {} · expires {}",
            approval.name,
            when(approval.requested_at),
            when(approval.expires_at)
        ),
        format!("  approve: agentd approve {task} {call}   (or --edit JSON, --respond JSON)"),
        format!("  reject:  agentd reject {task} {call} --reason TEXT"),
    ]
}

/// `word` as one shell word: as it is when plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.:/@+=,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_os_user_is_named_from_the_passwd_file() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\n# comment\nana:x:1000:1000::/home/ana:/bin/sh\n";
        assert_eq!(user_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_name(passwd, 1000).as_deref(), Some("ana"));
        assert_eq!(user_name(passwd, 7), None);
        assert!(os_user().is_some_and(|user| !user.is_empty()));
    }

    #[test]
    fn a_call_id_becomes_one_shell_word() {
        assert_eq!(shell_word("call_1"), "call_1");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
