//! What must hold after a chaos run, checked against the tables, the subscriber's view and
//! the MCP server's record of executed calls, and the figures printed as one JSON line.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use super::subscriber::Subscriber;
use super::support::harness::TestEnv;

/// The run's figures.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub tasks: usize,
    pub kills: usize,
    pub restarts: usize,
    pub wall_s: f64,
    /// Tasks not ended (or ended more than once: impossible by the schema, counted anyway).
    pub lost: usize,
    /// `(task_id, iteration)` recorded more than once.
    pub duplicated_recursions: i64,
    /// Tasks whose stored events are not seqs 1..n with one terminal event, last.
    pub broken_streams: usize,
    /// Stored events the subscriber never received.
    pub stranded_events: usize,
    /// Events the subscriber received again (allowed: same event_id and seq).
    pub republished_events: u64,
    /// Side-effecting calls executed twice with one idempotency key.
    pub repeated_side_effects: usize,
    /// Tool calls left `unknown` (a kill during a side-effecting call).
    pub unknown_tool_calls: i64,
    /// Tasks by final status.
    pub statuses: HashMap<String, i64>,
}

impl Figures {
    pub fn json_line(&self) -> String {
        json!({
            "tasks": self.tasks, "kills": self.kills, "restarts": self.restarts,
            "wall_s": (self.wall_s * 10.0).round() / 10.0, "lost": self.lost,
            "duplicated_recursions": self.duplicated_recursions,
            "broken_streams": self.broken_streams, "stranded_events": self.stranded_events,
            "republished_events": self.republished_events,
            "repeated_side_effects": self.repeated_side_effects,
            "unknown_tool_calls": self.unknown_tool_calls, "statuses": self.statuses,
        })
        .to_string()
    }

    /// Every guarantee held.
    pub fn assert_clean(&self) {
        let line = self.json_line();
        assert!(
            self.kills > 0 && self.restarts == 2,
            "faults happened: {line}"
        );
        assert_eq!(self.lost, 0, "{line}");
        assert_eq!(self.duplicated_recursions, 0, "{line}");
        assert_eq!(self.broken_streams, 0, "{line}");
        assert_eq!(self.stranded_events, 0, "{line}");
        assert_eq!(self.repeated_side_effects, 0, "{line}");
        let completed = self.statuses.get("completed").copied().unwrap_or(0);
        assert_eq!(
            completed as usize, self.tasks,
            "every task completed: {line}"
        );
    }
}

pub async fn check(
    env: &TestEnv,
    ids: &[Uuid],
    subscriber: &Subscriber,
    ledger: &Path,
    ended: usize,
) -> Figures {
    let pool = &env.pool;
    let statuses: HashMap<String, i64> =
        sqlx::query_as::<_, (String, i64)>("SELECT status, count(*) FROM tasks GROUP BY 1")
            .fetch_all(pool)
            .await
            .expect("statuses")
            .into_iter()
            .collect();
    let duplicated_recursions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT task_id, iteration FROM recursions \
         GROUP BY 1, 2 HAVING count(*) > 1) d",
    )
    .fetch_one(pool)
    .await
    .expect("duplicates");
    let broken: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT task_id, count(*) AS n, max(seq) AS last, \
                count(*) FILTER (WHERE type IN ('task.completed', 'task.failed', \
                                                'task.cancelled')) AS terminal, \
                max(seq) FILTER (WHERE type IN ('task.completed', 'task.failed', \
                                                'task.cancelled')) AS terminal_seq \
             FROM events GROUP BY task_id) s \
         WHERE n <> last OR terminal <> 1 OR terminal_seq <> last",
    )
    .fetch_one(pool)
    .await
    .expect("streams");
    let unknown_tool_calls: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tool_calls WHERE state = 'unknown'")
            .fetch_one(pool)
            .await
            .expect("unknown calls");
    let stranded = wait_for_subscriber(env, ids, subscriber).await;
    let republished = subscriber.seen.lock().map(|s| s.duplicates).unwrap_or(0);
    Figures {
        tasks: ids.len(),
        lost: ids.len().saturating_sub(ended),
        duplicated_recursions,
        broken_streams: usize::try_from(broken).unwrap_or(usize::MAX),
        stranded_events: stranded,
        republished_events: republished,
        repeated_side_effects: repeated_keys(ledger),
        unknown_tool_calls,
        statuses,
        ..Figures::default()
    }
}

/// Waits (up to the outbox's promise, 30 s, and some) until the subscriber has every stored
/// event of every task; returns how many it still misses.
async fn wait_for_subscriber(env: &TestEnv, ids: &[Uuid], subscriber: &Subscriber) -> usize {
    let stored: HashMap<Uuid, i64> =
        sqlx::query_as::<_, (Uuid, i64)>("SELECT task_id, max(seq) FROM events GROUP BY 1")
            .fetch_all(&env.pool)
            .await
            .expect("stored events")
            .into_iter()
            .collect();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let missing: usize = match subscriber.seen.lock() {
            Ok(seen) => ids
                .iter()
                .map(|task| {
                    let last = stored.get(task).copied().unwrap_or(0);
                    let stream = seen.streams.get(task);
                    (1..=last)
                        .filter(|seq| !stream.is_some_and(|s| s.contains_key(seq)))
                        .count()
                })
                .sum(),
            Err(_) => usize::MAX,
        };
        if missing == 0 || Instant::now() > deadline {
            if missing > 0 {
                explain_stranded(env, ids, &stored, subscriber).await;
            }
            return missing;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Says which events the subscriber misses and how far the outbox thinks each such task was
/// confirmed, so that a failure tells a worker that never published from a subscriber
/// that stopped receiving.
async fn explain_stranded(
    env: &TestEnv,
    ids: &[Uuid],
    stored: &HashMap<Uuid, i64>,
    subscriber: &Subscriber,
) {
    let confirmed: HashMap<Uuid, i64> =
        sqlx::query_as::<_, (Uuid, i64)>("SELECT task_id, confirmed_seq FROM tasks")
            .fetch_all(&env.pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .collect();
    let Ok(seen) = subscriber.seen.lock() else {
        return;
    };
    let mut short: Vec<String> = Vec::new();
    for task in ids {
        let last = stored.get(task).copied().unwrap_or(0);
        let stream = seen.streams.get(task);
        let missing: Vec<i64> = (1..=last)
            .filter(|seq| !stream.is_some_and(|s| s.contains_key(seq)))
            .collect();
        if !missing.is_empty() {
            short.push(format!(
                "{task}: stored 1..={last}, confirmed {:?}, missing {missing:?}",
                confirmed.get(task)
            ));
        }
    }
    let received: usize = seen.streams.values().map(BTreeMap::len).sum();
    eprintln!(
        "the subscriber ({} consumers) received {received} events and misses events of {} \
         tasks; first ones:",
        seen.consumers,
        short.len()
    );
    for line in short.iter().take(10) {
        eprintln!("  {line}");
    }
    // What the broker holds for the subscriber, and who consumes it.
    let queues = std::process::Command::new("rabbitmqctl")
        .args([
            "-q",
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
        ])
        .args(["consumers", "state"])
        .output();
    if let Ok(out) = queues {
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| l.contains("chaos-subscriber")) {
            eprintln!("  broker: {line}");
        }
    }
}

/// Side-effecting calls (`charge` records the bare key) executed more than once per key.
fn repeated_keys(ledger: &Path) -> usize {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with("upsert ")) {
        *counts.entry(line).or_default() += 1;
    }
    counts.values().filter(|n| **n > 1).count()
}
