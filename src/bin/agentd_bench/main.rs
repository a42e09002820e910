//! `agentd-bench`: an end-to-end benchmark of the real worker on the local RabbitMQ and
//! PostgreSQL.
//!
//! ```text
//! cargo run --release --bin agentd-bench -- --tasks N --steps K --concurrency C [--llm-latency-ms L]
//! ```
//!
//! It creates a fresh database and uniquely named queues and exchanges, starts the scripted
//! OpenAI-compatible model over real loopback HTTP (every task makes K CALL_TOOL recursions
//! with `calculate`, then ANSWERs; each call waits L ms), runs `agentd worker` as a child
//! process with concurrency C, publishes N tasks (C in flight at a time), waits for every
//! terminal event, checks in `tasks` that every task completed, prints progress on stderr
//! and one JSON line on stdout, then stops the worker and drops what it created. Exit
//! status 1 when anything failed. `--workers N` runs N worker processes on the same queues
//! and database (each with concurrency C; C tasks stay in flight in all), and `database`
//! in the output says what a recursion cost PostgreSQL: commits, rows, WAL and table bytes.

mod database;
mod drive;
mod model;
mod procfs;
mod report;
mod setup;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;

use agentd::config::Settings;
use agentd::scripted_model::ScriptedModel;

use database::DbCounters;
use drive::Load;
use report::{Params, Resources};
use setup::BenchEnv;
use worker::Workers;

/// Benchmarks `agentd worker` end to end (see docs/performance.md).
#[derive(Debug, Parser)]
#[command(name = "agentd-bench", version)]
struct Args {
    /// Tasks to run.
    #[arg(long, default_value_t = 100)]
    tasks: usize,
    /// CALL_TOOL recursions per task before the ANSWER (so steps + 1 recursions and LLM calls).
    #[arg(long, default_value_t = 5)]
    steps: u32,
    /// worker.concurrency, and the number of tasks kept in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Worker processes (each with --concurrency), as a fleet on one host.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    /// Milliseconds the scripted model waits before each reply.
    #[arg(long, default_value_t = 0)]
    llm_latency_ms: u64,
    /// database.max_connections of the worker (default: the worker's own default).
    #[arg(long)]
    db_pool: Option<u32>,
    /// Set PostgreSQL's synchronous_commit on the bench database (an experiment: `off`
    /// shows what waiting for WAL flushes costs; the worker's code is unchanged).
    #[arg(long, value_parser = ["on", "off", "local"])]
    pg_synchronous_commit: Option<String>,
    /// Give up after this many seconds (default: generous, from the load).
    #[arg(long)]
    timeout_s: Option<u64>,
    /// The agentd binary to run (default: `agentd` next to this executable, rebuilt if older).
    #[arg(long, value_name = "PATH")]
    worker_bin: Option<PathBuf>,
    /// Fill the database first with this many ended tasks of another agent (each with
    /// `preload_events` events, five recursions, five LLM attempts and four tool calls):
    /// the growth run measures the per-recursion cost against a database that is not empty.
    #[arg(long, default_value_t = 0)]
    preload_tasks: u64,
    /// Events per preloaded task.
    #[arg(long, default_value_t = 10)]
    preload_events: u64,
}

impl Args {
    fn recursions(&self) -> u32 {
        self.steps.saturating_add(1)
    }

    fn timeout(&self) -> Duration {
        let per_task_ms = u64::from(self.recursions()) * (self.llm_latency_ms + 50);
        let waves = (self.tasks as u64).div_ceil(u64::from(self.concurrency));
        let auto = 60 + waves * per_task_ms / 1000;
        Duration::from_secs(self.timeout_s.unwrap_or(auto))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("agentd-bench: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("agentd-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The directory holding config/default.toml: the working directory, else the crate root.
fn config_dir() -> PathBuf {
    let here = PathBuf::from(".");
    if here.join("config/default.toml").is_file() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let binary = worker::locate(args.worker_bin.as_deref())?;
    let dir = config_dir();
    let settings = Settings::load_from(&dir.join("config/default.toml"), None)?;
    let grace = Duration::from_secs(settings.worker.shutdown_grace_secs + 5);
    let latency = Duration::from_millis(args.llm_latency_ms);
    let model = model::start(args.steps, latency).await?;
    let recursions = args.recursions();
    let sync = args.pg_synchronous_commit.as_deref();
    let env = BenchEnv::create(
        settings,
        model.base_url(),
        args.concurrency,
        recursions,
        sync,
    )
    .await?;
    if args.preload_tasks > 0 {
        let started = Instant::now();
        if let Err(err) = env.preload(args.preload_tasks, args.preload_events).await {
            env.cleanup().await;
            return Err(err);
        }
        eprintln!(
            "[bench] preloaded {} tasks and {} events in {:.1} s",
            args.preload_tasks,
            args.preload_tasks * args.preload_events,
            started.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "[bench] {} tasks x {} recursions, concurrency {}, LLM latency {} ms; database {}",
        args.tasks, recursions, args.concurrency, args.llm_latency_ms, env.settings.database.url
    );
    let worker_env = env.worker_env(args.db_pool);
    let mut workers = match Workers::spawn(args.workers, &binary, &dir, &worker_env, grace).await {
        Ok(workers) => workers,
        Err(err) => {
            env.cleanup().await;
            return Err(err);
        }
    };
    let result = measure(args, &env, &model, &mut workers).await;
    workers.stop(grace).await;
    let result = match result {
        Ok((summary, before)) => with_database(summary, &before, &env).await,
        Err(err) => Err(err),
    };
    let logs = workers.keep_logs();
    if !logs.is_empty() {
        eprintln!(
            "[bench] worker logs, warn level and above, shutdown included ({} lines): {logs:?}",
            workers.log_lines()
        );
    }
    env.cleanup().await;
    result
}

/// Adds what the run cost PostgreSQL per recursion, read once the workers have stopped.
async fn with_database(
    mut summary: serde_json::Value,
    before: &DbCounters,
    env: &BenchEnv,
) -> anyhow::Result<serde_json::Value> {
    let after = DbCounters::settled(&env.pool).await?;
    let recursions = summary["recursions"].as_u64().unwrap_or(0);
    summary["database_per_recursion"] = after.per_recursion(before, recursions);
    Ok(summary)
}

/// Waits for the worker, runs the load, checks and summarizes it. Reads the worker's peak
/// RSS before the caller stops it.
async fn measure(
    args: &Args,
    env: &BenchEnv,
    model: &ScriptedModel,
    workers: &mut Workers,
) -> anyhow::Result<(serde_json::Value, DbCounters)> {
    let events =
        agentd::amqp::subscriber::subscribe(env.broker(), &env.settings.amqp.events_exchange)
            .await
            .context("subscribing to the events exchange")?;
    let events = drive::spawn_receiver(events);
    wait_ready(env, workers).await?;
    let database_before = DbCounters::read(&env.pool).await?;
    let load = Load {
        tasks: args.tasks,
        window: usize::from(args.concurrency),
        agent_id: env.agent_id,
        queue: env.settings.amqp.tasks_queue.clone(),
        timeout: args.timeout(),
    };
    let load_before = procfs::load_average()?;
    let (bench_cpu, host_busy) = (procfs::process_cpu_secs("self")?, procfs::host_busy_secs()?);
    let worker_cpu = workers.cpu_secs()?;
    let processes = procfs::cpu_by_process();
    let followed = drive::follow(&load, &env.publisher, events, workers).await?;
    let services = procfs::cpu_by_service(&processes, &procfs::cpu_by_process());
    let resources = Resources {
        peak_rss_mib: workers.peak_rss_mib()?,
        worker_cpu_s: workers.cpu_secs()? - worker_cpu,
        bench_cpu_s: procfs::process_cpu_secs("self")? - bench_cpu,
        host_busy_s: procfs::host_busy_secs()? - host_busy,
        llm_calls: model.answered(),
        worker_log_lines: workers.log_lines(),
        postgres_cpu_s: services.get("postgres").copied().unwrap_or(0.0),
        rabbitmq_cpu_s: services.get("rabbitmq").copied().unwrap_or(0.0),
    };
    let stored = report::load(&env.pool, env.agent_id).await?;
    report::check(&followed, &stored, args.recursions())?;
    anyhow::ensure!(
        model.unreadable() == 0,
        "the scripted model could not read {} requests",
        model.unreadable()
    );
    let params = Params {
        tasks: args.tasks,
        steps: args.steps,
        concurrency: args.concurrency,
        workers: args.workers,
        llm_latency_ms: args.llm_latency_ms,
        db_pool: args.db_pool,
        pg_synchronous_commit: args.pg_synchronous_commit.clone(),
        host_load_1m: load_before,
        preloaded_tasks: args.preload_tasks,
        preloaded_events: args.preload_tasks * args.preload_events,
    };
    let summary = report::summary(&params, &followed, &stored, &resources);
    Ok((summary, database_before))
}

/// Waits until every worker consumes the tasks queue (at most 60 s).
async fn wait_ready(env: &BenchEnv, workers: &mut Workers) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        workers.ensure_alive()?;
        if env.task_consumers().await? as usize >= workers.count() {
            eprintln!(
                "[bench] workers (pids {:?}) consuming after {:.0} ms",
                workers.pids(),
                started.elapsed().as_secs_f64() * 1e3
            );
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the worker did not start consuming within 60 s; its log ends with:\n{}",
            workers.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
