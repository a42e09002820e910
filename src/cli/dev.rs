//! `agentd dev`: try agentd with no LLM account. One process runs the scripted demo model
//! ([`crate::scripted_model::demo`]), a worker pointed at it and the gateway with the live page, in the
//! namespace of `config/dev.toml` (database `agentd_dev`, queues `agentd_dev.*`), and makes
//! sure an agent named `demo` exists. It is a demo: the model is a script, not an LLM.

use std::process::ExitCode;

use super::out::outln;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::store;

/// The demo agent's name.
pub const AGENT_NAME: &str = "demo";

/// The demo agent's id, the same in every demo database so that docs can name it.
pub const AGENT_ID: uuid::Uuid = uuid::uuid!("00000000-0000-4000-8000-0000000000de");

/// Runs until SIGINT or SIGTERM. `config_hint` is the `--config` the other commands need.
pub async fn run(
    mut settings: Settings,
    latency: Duration,
    config_hint: &str,
) -> anyhow::Result<ExitCode> {
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        super::wait_for_signal().await;
        tracing::info!("signal received; stopping the demo");
        trigger.cancel();
    });
    let pool = store::prepare(&settings.database.url, 2).await?;
    let agent_id = demo_agent(&pool).await?;
    pool.close().await;
    let model =
        crate::scripted_model::demo::serve("127.0.0.1:0", latency, shutdown.clone()).await?;
    settings.llm.base_url = model.base_url();
    settings.llm.api_key = None;
    settings.llm.limits.clear();

    // The page's port is bound before anything else runs: a busy port fails the demo at
    // once, naming the port, instead of leaving a worker running without its page.
    let bound = crate::gateway::bind(settings.clone(), shutdown.clone()).await;
    let (addr, serving) = bound.map_err(|err| busy_port(err, &settings.gateway.bind))?;
    let mut worker = tokio::spawn(crate::worker::run(settings.clone(), shutdown.clone()));
    let mut gateway = tokio::spawn(serving);
    // The banner says "try it now": it is printed once the worker takes tasks.
    tokio::select! {
        ready = worker_consumes(&settings) => ready?,
        stopped = &mut worker => {
            shutdown.cancel();
            let _ = gateway.await;
            stopped??;
            anyhow::bail!("the demo's worker stopped while starting");
        }
    }
    // The banner is a courtesy: a closed stdout does not stop the demo.
    let _ = outln!(
        "agentd dev: a DEMO. The model is a local script, not an LLM: it plans, calls the \
         calculate tool and answers arithmetic questions, and says so for anything else.\n\
         \n  database  {db}\n  tasks     {queue}\n  model     {model}\n  agent     {agent_id} ({name})\n  page      http://{addr}/\n\
         \nTry, in another shell:\n  agentd --config {config_hint} submit --agent {agent_id} --wait \"What is 17 * 23 + 4?\"\n\
         \nCtrl-C stops it.",
        db = crate::amqp::broker::mask_password(&settings.database.url),
        queue = settings.amqp.tasks_queue,
        model = settings.llm.base_url,
        name = AGENT_NAME,
    );
    // Whichever part stops first (a signal, or a failure) stops the other.
    let (first, other) = tokio::select! {
        gateway_done = &mut gateway => (gateway_done, worker),
        worker_done = &mut worker => (worker_done, gateway),
    };
    shutdown.cancel();
    let other = other.await;
    first??;
    other??;
    Ok(ExitCode::SUCCESS)
}

/// Waits until a consumer (the demo's worker) is on the tasks queue.
async fn worker_consumes(settings: &Settings) -> anyhow::Result<()> {
    const POLL: Duration = Duration::from_millis(50);
    let broker = crate::amqp::Broker::new(&settings.amqp.url);
    let queue = &settings.amqp.tasks_queue;
    let consumed = loop {
        match crate::amqp::topology::consumer_count(&broker, queue).await {
            Ok(0) => tokio::time::sleep(POLL).await,
            Ok(_) => break Ok(()),
            Err(err) => break Err(err),
        }
    };
    broker.close().await;
    consumed
}

/// The gateway's bind error; a port in use is said plainly.
fn busy_port(err: anyhow::Error, bind: &str) -> anyhow::Error {
    let in_use = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    });
    if !in_use {
        return err;
    }
    let port = bind.rsplit(':').next().unwrap_or(bind);
    anyhow::anyhow!(
        "port {port} is in use (gateway.bind {bind}), so the demo cannot serve its page: \
         stop what listens there (another `agentd dev`?), or set another gateway.bind in a \
         --config file"
    )
}

/// Makes sure the `demo` agent exists (a row someone changed is left as it is).
async fn demo_agent(pool: &sqlx::PgPool) -> anyhow::Result<uuid::Uuid> {
    let agent = store::agents::NewAgent {
        name: AGENT_NAME.into(),
        model: crate::scripted_model::demo::MODEL.into(),
        max_iteration: Some(10),
        tools: None,
        approval_tools: None,
        approval_timeout_secs: None,
        on_approval_expiry: None,
        instructions: None,
        stall: None,
        on_unknown: None,
        tenant_id: None,
    };
    store::agents::ensure(pool, AGENT_ID, &agent).await?;
    Ok(AGENT_ID)
}
