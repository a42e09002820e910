//! The worker's operations listener over real HTTP: `/healthz`, `/readyz`, and a scrape of
//! `/metrics` before and after real tasks (an LLM retry, a tool call, an answer, a rejected
//! message that is dead-lettered) showing the counters and histograms moved; and, from the
//! real binary, an MCP server connected at start reported up from the first scrape, and the
//! scheduler's holder gauge and fire counter on two worker binaries. The
//! recorder is the process's: the exact moves hold only while no other test runs a task
//! in this process, hence the `serial` tier.

use std::collections::HashMap;

use crate::support::harness::{self, TestEnv};
use crate::support::process::WorkerProcess;
use crate::support::wait::{
    self, NEXT_STEP_WITHIN, Says, WORKER_READY_WITHIN, WORKER_STOPS_WITHIN,
};
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply};
use serde_json::json;
use uuid::Uuid;

/// `name{labels sorted}` → value, from Prometheus text format.
fn parse(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            Some((normalize(key), value.parse().ok()?))
        })
        .collect()
}

fn normalize(key: &str) -> String {
    match key.split_once('{') {
        Some((name, labels)) => {
            let mut labels: Vec<&str> = labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .collect();
            labels.sort_unstable();
            format!("{name}{{{}}}", labels.join(","))
        }
        None => key.to_owned(),
    }
}

struct Scrape(HashMap<String, f64>);

impl Scrape {
    async fn take(addr: &str) -> Scrape {
        let (status, body) = harness::http_get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        Scrape(parse(&body))
    }

    fn get(&self, key: &str) -> f64 {
        self.0.get(&normalize(key)).copied().unwrap_or(0.0)
    }
}

async fn wait_ok(addr: &str, path: &str) -> String {
    wait::until(
        format!("{path} answers 200"),
        WORKER_READY_WITHIN,
        || async {
            let (status, body) = harness::http_get(addr, path).await;
            (status == 200).then_some(body)
        },
    )
    .await
}

/// How much each series must have moved across the test's two tasks: one completed after
/// an LLM retry (500), a calculate call and an answer; one rejected (unknown agent).
const EXPECTED: [(&str, f64); 16] = [
    ("agentd_tasks_started_total", 1.0),
    (
        r#"agentd_tasks_ended_total{status="completed",reason="none"}"#,
        1.0,
    ),
    (
        r#"agentd_tasks_ended_total{status="rejected",reason="rejected"}"#,
        1.0,
    ),
    ("agentd_dead_letters_total", 1.0),
    (r#"agentd_llm_attempts_total{status="http_500"}"#, 1.0),
    (r#"agentd_llm_attempts_total{status="200"}"#, 2.0),
    (
        r#"agentd_llm_call_duration_seconds_count{result="ok"}"#,
        2.0,
    ),
    ("agentd_llm_retries_total", 1.0),
    (r#"agentd_llm_tokens_total{kind="prompt"}"#, 22.0),
    (
        r#"agentd_recursions_total{action_type="CALL_TOOL",status="done"}"#,
        1.0,
    ),
    (
        r#"agentd_recursions_total{action_type="ANSWER",status="done"}"#,
        1.0,
    ),
    (
        r#"agentd_tool_calls_total{tool="calculate",success="true"}"#,
        1.0,
    ),
    (
        r#"agentd_tool_call_duration_seconds_count{tool="calculate"}"#,
        1.0,
    ),
    ("agentd_task_iterations_count", 1.0),
    ("agentd_task_iterations_sum", 2.0),
    (r#"agentd_events_total{type="tool.completed"}"#, 1.0),
];

#[tokio::test]
async fn health_readiness_and_metrics_after_real_tasks() {
    let _alone = crate::alone().await;
    let addr = harness::free_local_addr();
    let env = TestEnv::start_with(|s| s.metrics.bind = addr.clone()).await;
    assert_eq!(wait_ok(&addr, "/healthz").await, "ok\n");
    let ready = wait_ok(&addr, "/readyz").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&ready).ok(),
        Some(json!({"ready": true, "broker": "ok", "database": "ok"}))
    );
    let before = Scrape::take(&addr).await;
    run_tasks(&env).await;
    let after = settled_scrape(&addr, &before).await;
    let moved = |key: &str| after.get(key) - before.get(key);
    for (key, delta) in EXPECTED {
        assert_eq!(moved(key), delta, "{key}");
    }
    // One observation per published batch (a step's events go out with pipelined confirms).
    assert!(moved(r#"agentd_event_publish_duration_seconds_count{result="ok"}"#) >= 3.0);
    assert!(moved("agentd_recursion_duration_seconds_count") >= 2.0);
    assert_eq!(after.get("agentd_tasks_in_flight"), 0.0);

    env.stop().await;
    wait::until_true(
        "the listener stops with the worker",
        WORKER_STOPS_WITHIN,
        || async { harness::http_get(&addr, "/healthz").await.0 == 0 },
    )
    .await;
}

/// A completed task (LLM retry, tool call, answer) and a rejected, dead-lettered message.
async fn run_tasks(env: &TestEnv) {
    let agent = env.agent(None, None).await;
    env.fake.script(
        "metrics-run",
        vec![
            ModelReply::status(500, "overloaded"),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("42"),
        ],
    );
    let task_id = env.submit(agent, "metrics-run").await;
    let rejected = Uuid::now_v7();
    let body =
        json!({"task_id": rejected, "agent_id": Uuid::now_v7(), "input": "nobody runs this"});
    env.publish_raw(body.to_string().as_bytes()).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    assert_eq!(env.wait_terminal(rejected).await.status, "rejected");
}

/// Scrapes until the dead letter is counted and nothing is in flight (or
/// [`NEXT_STEP_WITHIN`]; the caller's assertions then say what is missing).
async fn settled_scrape(addr: &str, before: &Scrape) -> Scrape {
    let deadline = tokio::time::Instant::now() + NEXT_STEP_WITHIN;
    loop {
        let scrape = Scrape::take(addr).await;
        let settled = scrape.get("agentd_dead_letters_total")
            > before.get("agentd_dead_letters_total")
            && scrape.get("agentd_tasks_in_flight") == 0.0;
        if settled || tokio::time::Instant::now() > deadline {
            return scrape;
        }
        tokio::time::sleep(wait::POLL).await;
    }
}

/// The gauge of a server that connected at start and never went down: its state was
/// decided before the metrics recorder existed. A process of its own (the real binary), so
/// that no other test has installed the process-wide recorder earlier.
#[tokio::test]
async fn an_mcp_server_connected_at_start_is_reported_up() {
    let _alone = crate::alone().await;
    let env = TestEnv::without_worker(|_| {}).await;
    let dir = harness::scratch_dir("metrics-mcp");
    let addr = harness::free_local_addr();
    let config = dir.join("metrics.toml");
    let toml = format!(
        "[metrics]\nbind = \"{addr}\"\n\n[[tools.mcp]]\nname = \"upsrv\"\ncommand = \"{}\"\n",
        harness::test_mcp_server_bin()
    );
    std::fs::write(&config, toml).expect("config file");
    let worker = WorkerProcess::spawn_with_config(&env.settings, Some(&config), &[]);
    let what = Says(|| format!("the listener answers: {}", worker.log()));
    wait::until_true(what, WORKER_READY_WITHIN, || async {
        harness::http_get(&addr, "/healthz").await.0 == 200
    })
    .await;
    let up = r#"agentd_mcp_server_up{server="upsrv"}"#;
    let scrape = Scrape::take(&addr).await;
    assert_eq!(
        scrape.0.get(&normalize(up)),
        Some(&1.0),
        "{up}: {:?}",
        scrape.0
    );
    drop(worker);
    env.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The scheduler's metrics from two worker binaries (each a process, and a recorder, of its
/// own): the one that holds the scheduler lock reports `agentd_scheduler_holder` 1 and
/// counts the fires it decides in `agentd_schedule_fires_total{decision}`; the other
/// reports 0 and counts none.
#[tokio::test]
async fn the_scheduler_holder_reports_itself_and_counts_its_fires() {
    let _alone = crate::alone().await;
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let addrs = [harness::free_local_addr(), harness::free_local_addr()];
    let first = WorkerProcess::spawn(&env.settings, &[("AGENTD__METRICS__BIND", &addrs[0])]);
    let holder = r#"agentd_scheduler_holder"#;
    let enqueued = r#"agentd_schedule_fires_total{decision="enqueued"}"#;
    // Seeded at 0 before the first fire.
    let what = Says(|| format!("the first worker holds the scheduler: {}", first.log()));
    wait::until_true(what, WORKER_READY_WITHIN, || async {
        let (status, body) = harness::http_get(&addrs[0], "/metrics").await;
        status == 200 && Scrape(parse(&body)).get(holder) == 1.0
    })
    .await;
    let second = WorkerProcess::spawn(&env.settings, &[("AGENTD__METRICS__BIND", &addrs[1])]);
    let draft = agentd::scheduler::spec::Draft {
        agent_id: agent,
        every: Some("1s".to_owned()),
        input: "metrics-schedule".to_owned(),
        ..Default::default()
    };
    agentd::scheduler::manage::create(&env.pool, &env.settings, draft, chrono::Utc::now())
        .await
        .expect("the schedule is created");
    let what = Says(|| format!("the holder counts fires: {}", first.log()));
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        Scrape::take(&addrs[0]).await.get(enqueued) >= 2.0
    })
    .await;
    let what = Says(|| format!("the second worker serves metrics: {}", second.log()));
    wait::until_true(what, WORKER_READY_WITHIN, || async {
        harness::http_get(&addrs[1], "/metrics").await.0 == 200
    })
    .await;
    let standby = Scrape::take(&addrs[1]).await;
    let seeded = |scrape: &Scrape, key: &str| scrape.0.get(&normalize(key)).copied();
    assert_eq!(seeded(&standby, holder), Some(0.0), "{:?}", standby.0);
    assert_eq!(
        seeded(&standby, enqueued),
        Some(0.0),
        "the standby decides nothing"
    );
    assert_eq!(Scrape::take(&addrs[0]).await.get(holder), 1.0);
    drop(second);
    drop(first);
    env.stop().await;
}
