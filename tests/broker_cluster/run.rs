//! One run: the cluster, a test environment whose `amqp.url` lists the three nodes, worker
//! processes, the tasks, one node stopped once a share of the tasks has ended, then the
//! checks and the figures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use super::cluster::Cluster;
use super::subscriber::Subscriber;
use super::support::harness::TestEnv;
use super::support::process::WorkerProcess;
use super::support::words::{self, ByInput};
use agentd::scripted_model::ScriptedModel;

/// What to run.
pub struct Plan {
    pub tasks: usize,
    pub workers: usize,
    pub concurrency: u16,
    /// CALL_TOOL recursions per task (then one ANSWER).
    pub steps: u32,
    pub llm_delay_ms: u64,
    /// The share of tasks ended when the node is stopped.
    pub stop_at: f64,
}

/// What the run saw; `problems` lists every broken promise.
pub struct Outcome {
    pub figures: Value,
    pub problems: Vec<String>,
}

/// The cluster, the environment on it and the subscriber, made before any task.
struct Setup {
    cluster: Cluster,
    env: TestEnv,
    subscriber: Subscriber,
    cluster_start_s: f64,
    /// The tasks queue's leader and members right after it was declared.
    members: (Option<String>, Vec<String>),
    /// The fake LLM, which counts the requests per task input.
    llm: ScriptedModel,
}

async fn setup(plan: &Plan) -> Setup {
    let began = Instant::now();
    let cluster = tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("cluster start");
    let cluster_start_s = began.elapsed().as_secs_f64();
    let urls = cluster.urls();
    let llm = words::start().await;
    let (base_url, env_urls) = (llm.base_url(), urls.clone());
    let concurrency = plan.concurrency;
    // TestEnv connects (and declares the topology) after this runs: on the cluster, so the
    // tasks queue gets a replica on each of the three nodes.
    let env = TestEnv::without_worker(move |s| {
        s.amqp.url = env_urls;
        s.llm.base_url = base_url;
        s.worker.concurrency = concurrency;
        // A worker cut off from its tasks gives them back within seconds.
        s.worker.lease_secs = 3.0;
        s.worker.max_deliveries = 20;
        s.worker.orphan_after_secs = 20.0;
        // The fake LLM holds its replies while the node stops (seconds on a loaded
        // machine): an attempt must not time out meanwhile.
        s.llm.timeout_ms = 60_000;
        s.worker.recursion_timeout_ms = 90_000;
    })
    .await;
    let members =
        tokio::task::block_in_place(|| members(&cluster, 1, &env.settings.amqp.tasks_queue));
    let exchange = &env.settings.amqp.events_exchange;
    let queue = format!("{exchange}.cluster-subscriber");
    let subscriber = Subscriber::start(&urls, exchange, &queue).await;
    Setup {
        cluster,
        env,
        subscriber,
        cluster_start_s,
        members,
        llm,
    }
}

/// What happened while the tasks ran.
struct Drive {
    ids: Vec<Uuid>,
    workers: Vec<WorkerProcess>,
    victim: usize,
    stop: Value,
    ended: usize,
    wall: Duration,
}

pub async fn run(plan: Plan) -> Outcome {
    let setup = setup(&plan).await;
    let drive = drive(&setup, &plan).await;
    let Setup {
        cluster,
        env,
        subscriber,
        ..
    } = &setup;
    let queue = &env.settings.amqp.tasks_queue;
    let survivor = if drive.victim == 1 { 2 } else { 1 };
    let (left, after) = tokio::task::block_in_place(|| {
        (
            settled(cluster, survivor, queue),
            members(cluster, survivor, queue),
        )
    });
    let logs: Vec<String> = drive.workers.iter().map(WorkerProcess::log).collect();
    let mut problems = super::verify::check(env, &drive.ids, subscriber, plan.steps + 1).await;
    problems.extend(run_problems(&plan, &setup, &drive, &logs, left));
    let mut figures = figures(&plan, &setup, &drive, &logs);
    figures["leader_after"] = json!(after.0);
    figures["members_after"] = json!(after.1);
    figures["problems"] = json!(problems.len());
    if !problems.is_empty() {
        for (i, log) in logs.iter().enumerate() {
            eprintln!("---- worker {i} log (tail) ----\n{}", tail(log, 60));
        }
    }
    drop(drive);
    let Setup {
        cluster,
        env,
        subscriber,
        ..
    } = setup;
    subscriber.stop().await;
    env.stop().await;
    drop(cluster);
    Outcome { figures, problems }
}

/// Publishes the tasks, starts the workers, picks the node to stop once every worker is
/// connected, stops it when `plan.stop_at` of the tasks have ended, and waits for the rest.
async fn drive(setup: &Setup, plan: &Plan) -> Drive {
    let (cluster, env) = (&setup.cluster, &setup.env);
    let agent = env.agent(None, Some(&["calculate"])).await;
    let started = Instant::now();
    let ids = publish(env, agent, plan).await;
    let workers: Vec<WorkerProcess> = (0..plan.workers)
        .map(|_| WorkerProcess::spawn(&env.settings, &[("RUST_LOG", "info")]))
        .collect();
    let names: Vec<String> = workers
        .iter()
        .map(|w| format!("agentd-{}", w.pid()))
        .collect();
    let queue = &env.settings.amqp.tasks_queue;
    // rabbitmqctl takes seconds per call: the node is chosen before the moment to stop it.
    let (victim, mut stop) = tokio::task::block_in_place(|| choose_victim(cluster, &names, queue));
    wait_for_ended(env, plan.tasks, plan.stop_at, Duration::from_secs(60)).await;
    // No task ends while the node stops, however long that takes on a loaded machine: the
    // fake LLM holds its replies until the node is down, so tasks are in flight then.
    setup.llm.hold();
    stop["tasks_ended_at_stop"] = json!(count_ended(env).await);
    let stopping = Instant::now();
    tokio::task::block_in_place(|| cluster.stop_node(victim));
    stop["stop_s"] = json!(round(stopping.elapsed().as_secs_f64()));
    stop["tasks_ended_when_stopped"] = json!(count_ended(env).await);
    setup.llm.release();
    let ended = wait_for_ended(env, plan.tasks, 1.0, Duration::from_secs(90)).await;
    Drive {
        ids,
        workers,
        victim,
        stop,
        ended,
        wall: started.elapsed(),
    }
}

/// Broken promises of the run itself, and signs that it proved nothing (the node stopped
/// after the last task, no worker lost its connection).
fn run_problems(
    plan: &Plan,
    setup: &Setup,
    drive: &Drive,
    logs: &[String],
    left: (u64, u64),
) -> Vec<String> {
    let mut problems = Vec::new();
    if drive.ended < plan.tasks {
        problems.push(format!("{} of {} tasks ended", drive.ended, plan.tasks));
    }
    if setup.members.1.len() != 3 {
        let members = &setup.members.1;
        problems.push(format!("tasks queue members {members:?}, not 3 nodes"));
    }
    if left != (0, 0) {
        problems.push(format!(
            "tasks queue not empty at the end (ready, unacked): {left:?}"
        ));
    }
    let when_stopped = drive.stop["tasks_ended_when_stopped"].as_u64().unwrap_or(0);
    if when_stopped >= plan.tasks as u64 {
        problems.push("every task had ended before the node was down".to_owned());
    }
    let cut = drive.stop["worker_connections"].as_u64().unwrap_or(0);
    let lost = count_lines(logs, "task consumer lost; reconnecting") as u64;
    if cut == 0 || lost < cut {
        problems.push(format!(
            "{cut} workers on the stopped node, {lost} lost their consumer"
        ));
    }
    problems
}

/// The run's figures, one JSON object.
fn figures(plan: &Plan, setup: &Setup, drive: &Drive, logs: &[String]) -> Value {
    let asked: usize = (0..plan.tasks)
        .map(|i| setup.llm.calls_for(&input(i, plan)))
        .sum();
    let duplicates = setup
        .subscriber
        .seen
        .lock()
        .map(|s| s.duplicates)
        .unwrap_or(0);
    json!({
        "tasks": plan.tasks, "workers": plan.workers, "concurrency": plan.concurrency,
        "recursions_per_task": plan.steps + 1, "llm_delay_ms": plan.llm_delay_ms,
        "cluster_start_s": round(setup.cluster_start_s),
        "wall_s": round(drive.wall.as_secs_f64()),
        "stopped": drive.stop, "leader_before": setup.members.0,
        "members_before": setup.members.1,
        "worker_connects": count_lines(logs, "connected to RabbitMQ"),
        "consumer_lost": count_lines(logs, "task consumer lost; reconnecting"),
        "resumed_tasks": count_lines(logs, "resuming task"),
        "duplicate_messages_acked": count_lines(logs, "duplicate task message acknowledged"),
        "llm_calls_repeated": asked.saturating_sub(plan.tasks * (plan.steps as usize + 1)),
        "subscriber_duplicates": duplicates,
    })
}

/// Publishes the tasks; returns their ids.
async fn publish(env: &TestEnv, agent: Uuid, plan: &Plan) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(plan.tasks);
    for i in 0..plan.tasks {
        ids.push(env.submit(agent, &input(i, plan)).await);
    }
    ids
}

/// Task `i`'s input: its script for the stateless fake LLM.
fn input(i: usize, plan: &Plan) -> String {
    format!("c{i} steps={} delay_ms={}", plan.steps, plan.llm_delay_ms)
}

/// The node to stop: the one most worker connections are on, the tasks queue's leader
/// first among equals (then both the clients and the queue lose something). Waits until
/// every worker is connected (30 s at most). Returns its number and what it holds.
fn choose_victim(cluster: &Cluster, names: &[String], queue: &str) -> (usize, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut per_node = cluster.connections_per_node(1, names);
    while per_node.values().sum::<usize>() < names.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        per_node = cluster.connections_per_node(1, names);
    }
    let leader = members(cluster, 1, queue).0;
    let leader = leader.as_deref().and_then(|name| cluster.number_of(name));
    let victim = (1..=3)
        .max_by_key(|n| (per_node.get(n).copied().unwrap_or(0), leader == Some(*n)))
        .unwrap_or(1);
    let facts = json!({
        "node": cluster.nodes.get(&victim).map(|(name, _)| name.clone()),
        "worker_connections": per_node.get(&victim).copied().unwrap_or(0),
        "worker_connections_per_node": per_node.iter()
            .map(|(n, c)| (n.to_string(), *c)).collect::<HashMap<_, _>>(),
        "was_tasks_queue_leader": leader == Some(victim),
    });
    (victim, facts)
}

/// The tasks queue's (ready, unacknowledged) messages once they reach zero, or after 15 s:
/// a message left behind would be a task delivered again later.
fn settled(cluster: &Cluster, n: usize, queue: &str) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = cluster.queue_depth(n, queue);
        if found == (0, 0) || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The queue's leader and members as node `n` reports them.
fn members(cluster: &Cluster, n: usize, queue: &str) -> (Option<String>, Vec<String>) {
    let Some(found) = cluster.queue(n, queue) else {
        return (None, Vec::new());
    };
    let leader = found["leader"].as_str().map(str::to_owned);
    let members = found["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (leader, members)
}

async fn count_ended(env: &TestEnv) -> usize {
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks \
         WHERE status IN ('completed', 'failed', 'cancelled', 'rejected')",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap_or(0);
    usize::try_from(ended).unwrap_or(0)
}

/// Waits until `share` of the tasks have ended or `limit` passes; returns how many have.
async fn wait_for_ended(env: &TestEnv, tasks: usize, share: f64, limit: Duration) -> usize {
    let goal = ((tasks as f64) * share).ceil() as usize;
    let deadline = Instant::now() + limit;
    loop {
        let ended = count_ended(env).await;
        if ended >= goal || Instant::now() > deadline {
            return ended;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn count_lines(logs: &[String], needle: &str) -> usize {
    logs.iter().map(|log| log.matches(needle).count()).sum()
}

fn tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn round(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}
