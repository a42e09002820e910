//! A task that runs longer than RabbitMQ's consumer timeout completes exactly once. This test
//! lowers the broker-wide `consumer_timeout` (and the channel tick that enforces it) with
//! `rabbitmqctl eval`, so it runs alone (the `serial` tier: no other test runs meanwhile),
//! and the settings are restored when it ends.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;
use crate::support::process::WorkerProcess;
use crate::support::words::{self, ByInput};
use serde_json::Value;

fn rabbit_env(key: &str, value: u64) {
    let expr = format!("application:set_env(rabbit, {key}, {value}).");
    let status = Command::new("rabbitmqctl")
        .args(["-q", "eval", &expr])
        .status()
        .expect("rabbitmqctl");
    assert!(status.success(), "rabbitmqctl eval {expr}");
}

/// How long the task runs at least (three recursions whose replies come after 2 s each),
/// against a consumer timeout of 1 s.
const OUTLIVED: Duration = Duration::from_secs(6);

/// Restores the broker defaults even when the test fails.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        rabbit_env("consumer_timeout", 1_800_000);
        rabbit_env("channel_tick_interval", 60_000);
    }
}

#[tokio::test]
async fn a_task_longer_than_the_consumer_timeout_completes_exactly_once() {
    let _alone = crate::alone().await;
    let llm = words::start().await;
    let base_url = llm.base_url();
    let env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.lease_secs = 10.0;
        s.worker.max_deliveries = 100;
    })
    .await;
    let agent = env.agent(None, None).await;
    let _restore = Restore;
    rabbit_env("consumer_timeout", 1_000);
    rabbit_env("channel_tick_interval", 500);
    let input = "long steps=3 delay_ms=2000";
    let started = Instant::now();
    let task_id = env.submit(agent, input).await;
    let worker = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(task_id).await;
    let took = started.elapsed();
    assert_eq!(
        task.status,
        "completed",
        "{:?}\n{}",
        task.error,
        worker.log()
    );
    // Three recursions of 2 s each: the task ran for 6 s, six times the consumer timeout.
    assert!(
        took > OUTLIVED,
        "the task outlived the 1 s consumer timeout: {took:?}"
    );
    assert_eq!(llm.calls_for(input), 4, "each recursion asked once");
    let events = env.stored_events(task_id).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "task.started").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "task.completed").count(), 1);
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], Value::from(index + 1));
    }
    let log = worker.log();
    assert!(
        log.contains("reconnecting"),
        "the broker did cut the consumer: {log}"
    );
    assert!(
        env.dead_letter_now().await.is_none(),
        "nothing dead-lettered"
    );
    drop(worker);
    env.stop().await;
}
