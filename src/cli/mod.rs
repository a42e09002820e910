//! The commands of the `agentd` binary. Each opens only the connections it needs.

pub mod approvals;
pub mod asyncapi;
pub mod cancel;
pub mod control;
pub mod dev;
pub mod eval;
pub mod follow;
pub mod out;
pub mod prune;
pub mod replay;
pub mod rerun;
pub mod resolve;
pub mod schedule;
pub mod settings;
pub mod submit;
pub mod tasks;
pub mod telemetry;
pub mod token;
pub mod tools;
pub mod trace;
pub mod versions;
pub mod watch;

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use out::{errln, outln};

use crate::config::Settings;
use crate::store;

/// `agentd worker`: runs until SIGINT or SIGTERM, then drains.
pub async fn worker(settings: Settings) -> anyhow::Result<ExitCode> {
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received; shutting down");
        trigger.cancel();
    });
    crate::worker::run(settings, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// `agentd serve`: the HTTP gateway, until SIGINT or SIGTERM.
pub async fn serve(settings: Settings) -> anyhow::Result<ExitCode> {
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received; stopping the gateway");
        trigger.cancel();
    });
    crate::gateway::run(settings, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(err) => {
            tracing::warn!(error = %err, "cannot listen for SIGTERM; only SIGINT stops the worker");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// `agentd migrate`.
pub async fn migrate(settings: &Settings) -> anyhow::Result<ExitCode> {
    store::prepare(&settings.database.url, 2).await?;
    outln!("migrations applied")?;
    Ok(ExitCode::SUCCESS)
}

/// `agentd agent create`: prints the new agent_id.
pub async fn agent_create(
    settings: &Settings,
    agent: &store::agents::NewAgent,
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let agent_id = store::agents::create(&pool, agent).await?;
    outln!("{agent_id}")?;
    Ok(ExitCode::SUCCESS)
}

/// `agentd agent list`.
pub async fn agent_list(settings: &Settings) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let agents = store::agents::list(&pool).await?;
    outln!(
        "{:<36}  {:<20}  {:<24}  {:>5}  tools",
        "agent_id",
        "name",
        "model",
        "max_it"
    )?;
    for agent in agents {
        let tools = agent
            .tools
            .map_or_else(|| "(all built-in)".to_owned(), |tools| tools.join(","));
        outln!(
            "{:<36}  {:<20}  {:<24}  {:>5}  {tools}",
            agent.agent_id,
            agent.name,
            agent.model,
            agent.max_iteration
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentd fork ID --from N [--input TEXT]`: creates and enqueues the fork, prints its id.
pub async fn fork(
    settings: &Settings,
    task_id: uuid::Uuid,
    from_iteration: i32,
    fork_as: (Option<String>, Option<i32>),
) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let publisher = crate::amqp::connect_declared(settings).await?;
    let forked = crate::lifecycle::fork::fork_task(
        &pool,
        &publisher,
        settings,
        task_id,
        from_iteration,
        fork_as,
    )
    .await;
    control::close(&publisher).await;
    match forked? {
        Ok(new_id) => {
            outln!("{new_id}")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(problem) => {
            errln!("agentd: cannot fork: {problem}");
            Ok(ExitCode::FAILURE)
        }
    }
}
