//! `agentd agent publish | versions | promote | canary | rollback | diff` (CONTRACT v3 §11):
//! an agent's immutable versions and the channels that serve them. AGENT is an agent_id or
//! a unique agent name.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::{Map, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::out::{errln, outln};
use crate::config::Settings;
use crate::core::{storable, versions as channel};
use crate::store::{self, versions};

/// The version commands, flattened into `agentd agent`.
#[derive(Debug, Subcommand)]
pub enum VersionCommand {
    /// Publish a new version (fields not given are copied from the latest) and print its
    /// number. It is not live until promoted (or served by a canary).
    Publish {
        agent: String,
        /// A file holding the agent's instructions (`-` for stdin), rendered verbatim once
        /// in the system message.
        #[arg(long, value_name = "FILE")]
        instructions_file: Option<PathBuf>,
        #[arg(long)]
        model: Option<String>,
        /// Comma-separated tool names the version may call.
        #[arg(long, value_delimiter = ',')]
        tools: Option<Vec<String>>,
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..=10_000))]
        max_iteration: Option<i32>,
        /// A request parameter sent with every LLM request (`temperature=0.2`, `seed=7`);
        /// the value is JSON when it parses as JSON, else a string; `key=null` removes it.
        #[arg(long = "param", value_name = "KEY=VALUE", value_parser = param_arg)]
        params: Vec<(String, Value)>,
        /// Why this version exists.
        #[arg(long)]
        note: Option<String>,
    },
    /// List an agent's versions and channels.
    Versions { agent: String },
    /// Make version V stable (`agents` then mirrors it; new tasks start on it).
    Promote { agent: String, version: i32 },
    /// Serve version V to W % of the tasks that name no version or channel (`--weight 0`
    /// ends the canary).
    Canary {
        agent: String,
        version: i32,
        #[arg(long, value_parser = clap::value_parser!(i32).range(0..=100))]
        weight: i32,
    },
    /// Return stable to the version it served before the last promote.
    Rollback { agent: String },
    /// Show what differs between two versions.
    Diff { agent: String, v1: i32, v2: i32 },
}

/// `KEY=VALUE` of `--param`.
fn param_arg(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err("a parameter needs a name before '='".into());
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
    Ok((storable::owned(key.to_owned()), storable::json_owned(value)))
}

/// Runs one version command.
pub async fn run(settings: &Settings, command: VersionCommand) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    match command {
        VersionCommand::Publish {
            agent,
            instructions_file,
            model,
            tools,
            max_iteration,
            params,
            note,
        } => {
            let agent_id = resolve(&pool, &agent).await?;
            let instructions = instructions_file.map(|path| read_text(&path)).transpose()?;
            let draft = versions::Draft {
                instructions,
                model: model.map(|m| storable::owned(m.trim().to_owned())),
                tools: tools.map(|t| t.into_iter().map(storable::owned).collect()),
                max_iteration,
                params: params.into_iter().collect::<Map<_, _>>(),
                note: note.map(storable::owned),
                ..versions::Draft::default()
            };
            if draft.model.as_deref().is_some_and(str::is_empty) {
                bail!("--model must not be blank");
            }
            let version = versions::publish(&pool, agent_id, &draft).await?;
            outln!("{version}")?;
        }
        VersionCommand::Versions { agent } => {
            let agent_id = resolve(&pool, &agent).await?;
            print_versions(&pool, agent_id).await?;
        }
        VersionCommand::Promote { agent, version } => {
            let agent_id = resolve(&pool, &agent).await?;
            versions::set_channel(&pool, agent_id, channel::STABLE, version, None).await?;
            outln!("stable = version {version}")?;
        }
        VersionCommand::Canary {
            agent,
            version,
            weight,
        } => {
            let agent_id = resolve(&pool, &agent).await?;
            versions::set_channel(&pool, agent_id, channel::CANARY, version, Some(weight)).await?;
            match weight {
                0 => outln!("canary ended (weight 0)")?,
                _ => outln!("canary = version {version} at {weight} %")?,
            }
        }
        VersionCommand::Rollback { agent } => {
            let agent_id = resolve(&pool, &agent).await?;
            let version = versions::rollback(&pool, agent_id).await?;
            outln!("stable = version {version}")?;
        }
        VersionCommand::Diff { agent, v1, v2 } => {
            let agent_id = resolve(&pool, &agent).await?;
            return diff(&pool, agent_id, v1, v2).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The agent named by id or by a unique name.
async fn resolve(pool: &PgPool, agent: &str) -> anyhow::Result<Uuid> {
    if let Ok(agent_id) = Uuid::parse_str(agent.trim()) {
        if store::agents::get(pool, agent_id).await?.is_none() {
            bail!("no agent {agent_id} (agentd agent list shows them)");
        }
        return Ok(agent_id);
    }
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT agent_id FROM agents WHERE name = $1")
        .bind(storable::text(agent))
        .fetch_all(pool)
        .await?;
    match ids.as_slice() {
        [agent_id] => Ok(*agent_id),
        [] => bail!(
            "no agent named {} (agentd agent list shows them)",
            crate::core::bounded::quote(agent)
        ),
        _ => bail!(
            "{} agents are named {agent:?}: give the agent_id",
            ids.len()
        ),
    }
}

/// A file's text (`-`: stdin), made storable.
pub fn read_text(path: &std::path::Path) -> anyhow::Result<String> {
    let text = match path.as_os_str() == "-" {
        true => std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
        false => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
    };
    Ok(storable::owned(text))
}

async fn print_versions(pool: &PgPool, agent_id: Uuid) -> anyhow::Result<()> {
    let all = versions::list(pool, agent_id).await?;
    let channels = versions::channels(pool, agent_id).await?;
    outln!(
        "{:>7}  {:<24}  {:>6}  {:<20}  {:<25}  note",
        "version",
        "model",
        "max_it",
        "channels",
        "created_at"
    )?;
    for v in &all {
        let served: Vec<String> = (channels.iter())
            .filter(|c| c.version == v.version)
            .map(|c| match c.channel.as_str() {
                channel::CANARY => format!("canary {} %", c.weight),
                name => name.to_owned(),
            })
            .collect();
        outln!(
            "{:>7}  {:<24}  {:>6}  {:<20}  {:<25}  {}",
            v.version,
            v.model,
            v.max_iteration,
            served.join(","),
            v.created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            v.note.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

async fn diff(pool: &PgPool, agent_id: Uuid, v1: i32, v2: i32) -> anyhow::Result<ExitCode> {
    let (Some(a), Some(b)) = (
        versions::get(pool, agent_id, v1).await?,
        versions::get(pool, agent_id, v2).await?,
    ) else {
        errln!(
            "agent {agent_id} has no version {} (agentd agent versions lists them)",
            if versions::get(pool, agent_id, v1).await?.is_none() {
                v1
            } else {
                v2
            }
        );
        return Ok(ExitCode::FAILURE);
    };
    let changes =
        crate::core::versions::diff(&serde_json::to_value(&a)?, &serde_json::to_value(&b)?);
    if changes.is_empty() {
        outln!("versions {v1} and {v2} define the same agent")?;
    }
    for change in changes {
        outln!("{change}")?;
    }
    Ok(ExitCode::SUCCESS)
}
