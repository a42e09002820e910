//! `agentd tasks [--status S] [--agent A] [--since 2h] [--limit N] [--json]` (CONTRACT v3
//! §14 "Listing"): tasks across agents, newest first, as a table for people or one JSON
//! object per line for scripts. Wrong filters are refused before anything connects (exit 2).
//! With `database.read_url`, read from the read replica (store::readers).

use std::collections::HashMap;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::out::{errln, outln};
use crate::config::Settings;
use crate::core::listing::{self, MAX_LIMIT};
use crate::store::readers::Readers;
use crate::store::task_list::{self, TaskFilter};
use crate::store::{self, tasks::TaskRow};

/// The arguments of `agentd tasks`.
#[derive(Debug, Clone, clap::Args)]
pub struct TasksArgs {
    /// Only tasks with this status: pending, running, waiting, completed, failed,
    /// cancelled or rejected (comma-separated for several: failed,rejected).
    #[arg(long, value_parser = status_arg)]
    pub status: Option<Statuses>,
    /// Only this agent's tasks.
    #[arg(long)]
    pub agent: Option<Uuid>,
    /// Only tasks created within this age (30m, 2h, 7d, 1w) or since this RFC 3339 time.
    #[arg(long, value_name = "AGE|TIME", value_parser = since_arg)]
    pub since: Option<DateTime<Utc>>,
    /// At most this many tasks (newest first).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=MAX_LIMIT))]
    pub limit: i64,
    /// One JSON object per task and line (the row as `GET /v1/tasks` returns it).
    #[arg(long)]
    pub json: bool,
}

/// The statuses of `--status` (one value of clap's, comma-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statuses(pub Vec<String>);

fn status_arg(text: &str) -> Result<Statuses, String> {
    listing::parse_statuses(text)
        .map(Statuses)
        .map_err(|err| err.to_string())
}

fn since_arg(text: &str) -> Result<DateTime<Utc>, String> {
    listing::parse_since(text, Utc::now()).map_err(|err| err.to_string())
}

/// Prints the tasks the arguments select.
pub async fn run(settings: &Settings, args: &TasksArgs) -> anyhow::Result<ExitCode> {
    // With a read replica the primary is not migrated here: the replica follows its schema.
    let pool = match settings.database.read_url() {
        Some(_) => store::connect(&settings.database.url, 2).await?,
        None => store::open(&settings.database.url, 2).await?,
    };
    let readers = Readers::new(pool, &settings.database, 2)?;
    let filter = TaskFilter {
        statuses: args.status.clone().map(|s| s.0).unwrap_or_default(),
        agent_id: args.agent,
        since: args.since,
        after: None,
        tenant_id: None,
    };
    let (filter, limit) = (&filter, args.limit);
    let read = readers.read(|pool| async move {
        let page = task_list::page(&pool, filter, limit).await?;
        Ok((page, store::agents::list(&pool).await))
    });
    let read = read.await;
    readers.close().await;
    let (page, agents) = read?;
    if args.json {
        for task in &page.tasks {
            outln!("{}", serde_json::to_string(task)?)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let names: HashMap<Uuid, String> = agents?
        .into_iter()
        .map(|agent| (agent.agent_id, agent.name))
        .collect();
    outln!(
        "{:<36}  {:<9}  {:<20}  {:>4}  {:<16}  input",
        "task_id",
        "status",
        "created (UTC)",
        "iter",
        "agent"
    )?;
    for task in &page.tasks {
        outln!("{}", row(task, &names))?;
    }
    if page.tasks.is_empty() {
        errln!("no tasks match");
    } else if page.next.is_some() {
        errln!("(more tasks: raise --limit, up to {MAX_LIMIT}, or narrow the filters)");
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of the table.
fn row(task: &TaskRow, names: &HashMap<Uuid, String>) -> String {
    let agent = task
        .agent_id
        .map(|id| names.get(&id).cloned().unwrap_or_else(|| id.to_string()))
        .unwrap_or_else(|| "-".to_owned());
    format!(
        "{:<36}  {:<9}  {:<20}  {:>4}  {:<16}  {}",
        task.task_id,
        task.status,
        task.created_at.format("%Y-%m-%d %H:%M:%S"),
        task.iterations,
        clip(&agent, 16),
        clip(task.input.as_deref().unwrap_or("-"), 60),
    )
}

/// `text` on one line, at most `chars` characters (… when cut).
fn clip(text: &str, chars: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match line.char_indices().nth(chars.saturating_sub(1)) {
        Some((end, _)) if line.chars().count() > chars => format!("{}…", &line[..end]),
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_or_multi_line_text_is_one_short_line() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("a\nb\tc", 10), "a b c");
        assert_eq!(clip("abcdefghijkl", 5), "abcd…");
        assert_eq!(clip("ééééééé", 3), "éé…");
    }
}
