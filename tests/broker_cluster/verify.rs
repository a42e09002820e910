//! What must hold after the node loss: every task completed exactly once (its recursions
//! 1..n each recorded once, its stored events gapless with one terminal event, last), and
//! the subscriber on the cluster saw every task's whole stream after dedupe by
//! `(task_id, seq)`. Each broken promise becomes one line of the returned list.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::subscriber::Subscriber;
use super::support::harness::TestEnv;

const TERMINAL: [&str; 3] = ["task.completed", "task.failed", "task.cancelled"];

/// Checks every task of `ids`; `recursions` is how many each must have made.
pub async fn check(
    env: &TestEnv,
    ids: &[Uuid],
    subscriber: &Subscriber,
    recursions: u32,
) -> Vec<String> {
    let mut problems = Vec::new();
    let statuses: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT task_id, status FROM tasks WHERE task_id = ANY($1)")
            .bind(ids)
            .fetch_all(&env.pool)
            .await
            .expect("statuses");
    let statuses: HashMap<Uuid, String> = statuses.into_iter().collect();
    let iterations: Vec<(Uuid, Vec<i32>)> = sqlx::query_as(
        "SELECT task_id, array_agg(iteration ORDER BY iteration) FROM recursions \
         WHERE task_id = ANY($1) GROUP BY task_id",
    )
    .bind(ids)
    .fetch_all(&env.pool)
    .await
    .expect("recursions");
    let iterations: HashMap<Uuid, Vec<i32>> = iterations.into_iter().collect();
    let expected: Vec<i32> = (1..=i32::try_from(recursions).unwrap_or(i32::MAX)).collect();
    for task in ids {
        match statuses.get(task).map(String::as_str) {
            Some("completed") => {}
            other => problems.push(format!("{task}: status {other:?}, not completed")),
        }
        let seen = iterations.get(task).cloned().unwrap_or_default();
        if seen != expected {
            problems.push(format!("{task}: recursions {seen:?}, not {expected:?}"));
        }
    }
    problems.extend(stored_streams(env, ids).await);
    problems.extend(subscriber_streams(env, ids, subscriber).await);
    problems
}

/// Stored events: seqs 1..n, one terminal event, and it is the last.
async fn stored_streams(env: &TestEnv, ids: &[Uuid]) -> Vec<String> {
    let events: Vec<(Uuid, i64, String)> = sqlx::query_as(
        "SELECT task_id, seq, type FROM events WHERE task_id = ANY($1) ORDER BY task_id, seq",
    )
    .bind(ids)
    .fetch_all(&env.pool)
    .await
    .expect("events");
    let mut streams: HashMap<Uuid, BTreeMap<i64, String>> = HashMap::new();
    for (task, seq, kind) in events {
        streams.entry(task).or_default().insert(seq, kind);
    }
    ids.iter()
        .filter_map(|task| {
            let stream = streams.get(task).cloned().unwrap_or_default();
            whole(&stream)
                .err()
                .map(|why| format!("{task}: stored events {why}"))
        })
        .collect()
}

/// Waits (up to 45 s: the outbox republishes a stranded event within 30 s) until the
/// subscriber holds every stored event of every task, then checks its deduped streams.
async fn subscriber_streams(env: &TestEnv, ids: &[Uuid], subscriber: &Subscriber) -> Vec<String> {
    let stored: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT task_id, max(seq) FROM events WHERE task_id = ANY($1) GROUP BY task_id",
    )
    .bind(ids)
    .fetch_all(&env.pool)
    .await
    .expect("stored events");
    let stored: HashMap<Uuid, i64> = stored.into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let problems: Vec<String> = match subscriber.seen.lock() {
            Ok(seen) => ids
                .iter()
                .filter_map(|task| {
                    let stream = seen.streams.get(task).cloned().unwrap_or_default();
                    let last = stored.get(task).copied().unwrap_or(0);
                    let short = stream.keys().next_back().copied().unwrap_or(0) < last;
                    match whole(&stream) {
                        Ok(()) if !short => None,
                        Ok(()) => Some(format!("{task}: subscriber saw up to a seq < {last}")),
                        Err(why) => Some(format!("{task}: subscriber's stream {why}")),
                    }
                })
                .collect(),
            Err(_) => vec!["subscriber state poisoned".to_owned()],
        };
        if problems.is_empty() || Instant::now() > deadline {
            return problems;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A deduped stream is whole: seqs 1..n without a gap, exactly one terminal event, last.
fn whole(stream: &BTreeMap<i64, String>) -> Result<(), String> {
    let n = i64::try_from(stream.len()).unwrap_or(i64::MAX);
    if n == 0 || !stream.keys().copied().eq(1..=n) {
        return Err(format!("has seqs {:?}", stream.keys().collect::<Vec<_>>()));
    }
    let terminal: Vec<i64> = stream
        .iter()
        .filter(|(_, kind)| TERMINAL.contains(&kind.as_str()))
        .map(|(seq, _)| *seq)
        .collect();
    if terminal != [n] {
        return Err(format!("has terminal events at {terminal:?} of {n}"));
    }
    Ok(())
}
