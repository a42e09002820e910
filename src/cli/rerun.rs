//! `agentd rerun TASK [--llm live] [--tools live] [--agent-version V | --channel C]`
//! (CONTRACT v3 §13): publishes one rerun of an ended task and prints the new task_id. An
//! unknown or unfinished task is a clear error (exit 1), and nothing is published.

use std::process::ExitCode;

use uuid::Uuid;

use super::out::{errln, outln};
use crate::config::Settings;
use crate::core::rerun::{RerunMode, RerunSpec};
use crate::lifecycle::rerun::{RerunAs, publish_rerun};
use crate::store;

/// The arguments of `agentd rerun`.
#[derive(Debug, Clone, clap::Args)]
pub struct RerunArgs {
    /// The ended task to rerun.
    pub task_id: Uuid,
    /// Where the model's replies come from: `recorded` (the source's record, no provider
    /// call; the default) or `live`.
    #[arg(long, default_value = "recorded", value_parser = llm_mode)]
    pub llm: RerunMode,
    /// Where tool results come from: `recorded` (the source's results; side-effecting
    /// tools never run; the default) or `live`.
    #[arg(long, default_value = "recorded", value_parser = tools_mode)]
    pub tools: RerunMode,
    /// Run on this agent version instead of the source's.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..), conflicts_with = "channel")]
    pub agent_version: Option<i32>,
    /// Run on the version this channel serves (`stable`, `canary`, ...).
    #[arg(long)]
    pub channel: Option<String>,
}

fn llm_mode(text: &str) -> Result<RerunMode, String> {
    RerunMode::parse(text, "llm").map_err(|_| "use recorded or live".to_owned())
}

fn tools_mode(text: &str) -> Result<RerunMode, String> {
    RerunMode::parse(text, "tools").map_err(|_| "use recorded or live".to_owned())
}

/// Publishes the rerun and prints its task_id.
pub async fn run(settings: &Settings, args: &RerunArgs) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 1).await?;
    let publisher = crate::amqp::connect_declared(settings).await?;
    let rerun = RerunSpec {
        source_task_id: args.task_id,
        llm: args.llm,
        tools: args.tools,
    };
    let asked = RerunAs {
        agent_version: args.agent_version,
        channel: args.channel.clone(),
        tenant_id: None,
    };
    let queue = &settings.amqp.tasks_queue;
    let published = publish_rerun(&pool, &publisher, queue, rerun, asked).await;
    super::control::close(&publisher).await;
    match published? {
        Ok(task_id) => {
            outln!("{task_id}")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(problem) => {
            errln!("agentd: cannot rerun: {problem}; nothing was published");
            Ok(ExitCode::FAILURE)
        }
    }
}
