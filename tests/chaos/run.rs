//! Driving one chaos run: the environment, the mixed tasks, three worker processes, and the
//! faults spread over the run by progress (a fault fires once that share of the tasks has
//! ended, so it always lands while tasks run).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use super::faults::{self, Lcg};
use super::subscriber::Subscriber;
use super::support::harness::{self, TestEnv};
use super::support::process::WorkerProcess;
use super::support::words;
use super::verify::{self, Figures};

/// What to run.
pub struct Plan {
    pub tasks: usize,
    pub kills: usize,
    pub llm_delay_ms: u64,
    pub seed: u64,
}

const WORKERS: usize = 3;

/// One fault, fired when `at` of the tasks have ended.
enum Fault {
    Kill,
    RestartBroker,
    RestartPostgres,
}

pub async fn run(plan: Plan) -> Figures {
    let llm = words::start().await;
    let base_url = llm.base_url();
    let env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.llm.retry.initial_delay_ms = 50;
        s.llm.retry.max_delay_ms = 400;
        s.llm.retry.max_retries = 6;
        s.worker.concurrency = 8;
        s.worker.lease_secs = 3.0;
        // Kills land on whatever runs: keep the delivery limit out of the way.
        s.worker.max_deliveries = 30;
        s.worker.orphan_after_secs = 20.0;
        s.worker.tool_timeout_ms = 20_000;
        s.worker.recursion_timeout_ms = 60_000;
    })
    .await;
    let dir = harness::scratch_dir("chaos");
    let ledger = dir.join("executed.txt");
    let config = tools_config(&dir, &ledger);
    let agent = env
        .agent(None, Some(&["calculate", "t__charge", "t__upsert"]))
        .await;
    let subscriber = Subscriber::start(
        &env.settings.amqp.url,
        &env.settings.amqp.events_exchange,
        &format!("{}.chaos-subscriber", env.settings.amqp.events_exchange),
    )
    .await;
    let mut rng = Lcg::new(plan.seed);
    let started = Instant::now();
    let ids = publish_tasks(&env, agent, &plan, &mut rng).await;
    let spawn = || WorkerProcess::spawn_with_config(&env.settings, Some(&config), &[]);
    let mut workers: Vec<WorkerProcess> = (0..WORKERS).map(|_| spawn()).collect();
    let schedule = schedule(&plan, &mut rng);
    let (mut kills, mut restarts) = (0, 0);
    for (at, fault) in schedule {
        wait_for_progress(&env, plan.tasks, at).await;
        tokio::time::sleep(Duration::from_millis(rng.below(150))).await;
        match fault {
            Fault::Kill => {
                let victim = rng.below(WORKERS as u64) as usize;
                workers[victim].kill();
                workers[victim] = spawn();
                kills += 1;
            }
            Fault::RestartBroker => {
                tokio::task::spawn_blocking(faults::restart_broker)
                    .await
                    .expect("broker restart");
                restarts += 1;
            }
            Fault::RestartPostgres => {
                tokio::task::spawn_blocking(faults::restart_postgres)
                    .await
                    .expect("database restart");
                restarts += 1;
            }
        }
    }
    let ended = wait_for_progress(&env, plan.tasks, 1.0).await;
    let wall = started.elapsed();
    let figures = verify::check(&env, &ids, &subscriber, &ledger, ended).await;
    let figures = Figures {
        kills,
        restarts,
        wall_s: wall.as_secs_f64(),
        ..figures
    };
    println!("{}", figures.json_line());
    drop(workers);
    subscriber.stop().await;
    env.stop().await;
    figures
}

/// The faults: `kills` SIGKILLs spread over the run, the broker restart at about a third and
/// the database restart at about two thirds.
fn schedule(plan: &Plan, rng: &mut Lcg) -> Vec<(f64, Fault)> {
    let mut faults: Vec<(f64, Fault)> = (0..plan.kills)
        .map(|k| {
            let base = (k as f64 + 1.0) / (plan.kills as f64 + 1.0) * 0.85;
            let jitter = rng.below(50) as f64 / 1000.0;
            (base + jitter, Fault::Kill)
        })
        .collect();
    faults.push((0.33, Fault::RestartBroker));
    faults.push((0.66, Fault::RestartPostgres));
    faults.sort_by(|a, b| a.0.total_cmp(&b.0));
    faults
}

/// The config file: the test MCP server as `t`, recording executed keys in `ledger`.
fn tools_config(dir: &std::path::Path, ledger: &std::path::Path) -> PathBuf {
    let path = dir.join("tools.toml");
    let toml = format!(
        "[tools]\ncall_timeout_ms = 20000\n[[tools.mcp]]\nname = \"t\"\ncommand = \"{}\"\n\
         env = {{ AGENTD_TEST_MCP_LEDGER = \"{}\" }}\n",
        harness::test_mcp_server_bin(),
        ledger.display()
    );
    std::fs::write(&path, toml).expect("config file");
    path
}

/// Publishes the mixed tasks; returns their ids.
async fn publish_tasks(env: &TestEnv, agent: Uuid, plan: &Plan, rng: &mut Lcg) -> Vec<Uuid> {
    let delay = plan.llm_delay_ms;
    let mut ids = Vec::with_capacity(plan.tasks);
    for i in 0..plan.tasks {
        let task_id = Uuid::now_v7();
        let steps = 1 + rng.below(3);
        let (input, stream) = match i % 5 {
            0 => (
                format!(
                    r#"c{i} steps={steps} delay_ms={delay} tool=t__charge args={{"amount":{i}}}"#
                ),
                false,
            ),
            1 => (format!("c{i} steps={steps} delay_ms={delay}"), true),
            2 => (
                format!("c{i} steps={steps} delay_ms={delay} flaky=1"),
                false,
            ),
            3 => (
                format!(
                    r#"c{i} steps={steps} delay_ms={delay} tool=t__upsert args={{"name":"n{i}","value":"v"}}"#
                ),
                false,
            ),
            _ => (format!("c{i} steps={steps} delay_ms={delay}"), false),
        };
        let body = json!({"task_id": task_id, "agent_id": agent, "input": input,
                          "stream": stream});
        env.publish_raw(body.to_string().as_bytes()).await;
        ids.push(task_id);
    }
    ids
}

/// Waits until `share` of the tasks have ended (the database may be restarting: errors
/// are waited out); returns how many have.
async fn wait_for_progress(env: &TestEnv, tasks: usize, share: f64) -> usize {
    let goal = ((tasks as f64) * share).ceil() as i64;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let ended: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM tasks \
             WHERE status IN ('completed', 'failed', 'cancelled', 'rejected')",
        )
        .fetch_one(&env.pool)
        .await;
        if let Ok(ended) = ended
            && ended >= goal
        {
            return usize::try_from(ended).unwrap_or(0);
        }
        if Instant::now() > deadline {
            return usize::try_from(ended.unwrap_or(0)).unwrap_or(0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
