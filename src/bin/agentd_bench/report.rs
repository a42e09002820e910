//! Checking a run (every task completed with the expected number of recursions, as the
//! `tasks` table says) and turning it into the final JSON line.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context as _;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::drive::Followed;

/// One task as stored.
#[derive(Debug, sqlx::FromRow)]
pub struct StoredTask {
    pub task_id: Uuid,
    pub status: String,
    pub iterations: i32,
    pub error: Option<String>,
}

/// What the database says about the run.
pub struct Stored {
    pub tasks: HashMap<Uuid, StoredTask>,
    pub recursions: i64,
}

/// Reads the tasks and counts the recursions.
pub async fn load(pool: &PgPool, agent_id: Uuid) -> anyhow::Result<Stored> {
    let rows: Vec<StoredTask> =
        sqlx::query_as("SELECT task_id, status, iterations, error FROM tasks WHERE agent_id = $1")
            .bind(agent_id)
            .fetch_all(pool)
            .await
            .context("reading the tasks table")?;
    let recursions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM recursions r JOIN tasks t USING (task_id) WHERE t.agent_id = $1",
    )
    .bind(agent_id)
    .fetch_one(pool)
    .await
    .context("counting recursions")?;
    let tasks = rows.into_iter().map(|row| (row.task_id, row)).collect();
    Ok(Stored { tasks, recursions })
}

/// Fails unless every published task is `completed` with `recursions` iterations.
pub fn check(followed: &Followed, stored: &Stored, recursions: u32) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for task_id in followed.tasks.keys() {
        let problem = match stored.tasks.get(task_id) {
            None => Some("no row in tasks".to_owned()),
            Some(row) if row.status != "completed" => Some(format!(
                "status {} ({})",
                row.status,
                row.error.as_deref().unwrap_or("no error")
            )),
            Some(row) if i64::from(row.iterations) != i64::from(recursions) => Some(format!(
                "completed after {} recursions, expected {recursions}",
                row.iterations
            )),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            problems.push(format!("task {task_id}: {problem}"));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    anyhow::bail!(
        "{} of {} tasks did not complete as expected:\n  {}",
        problems.len(),
        followed.tasks.len(),
        shown.join("\n  ")
    )
}

/// The p-th percentile (0..=100, nearest rank) of `values`; 0 when empty.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

fn millis(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e3
}

/// The run's parameters, as echoed in the report.
pub struct Params {
    pub tasks: usize,
    pub steps: u32,
    pub concurrency: u16,
    /// Worker processes.
    pub workers: u16,
    pub llm_latency_ms: u64,
    pub db_pool: Option<u32>,
    pub pg_synchronous_commit: Option<String>,
    /// The host's 1-minute load average just before the load started.
    pub host_load_1m: f64,
    /// Ended tasks and events put in the database before the run (the growth run).
    pub preloaded_tasks: u64,
    pub preloaded_events: u64,
}

/// Resource figures read from `/proc`.
pub struct Resources {
    pub peak_rss_mib: f64,
    pub worker_cpu_s: f64,
    pub bench_cpu_s: f64,
    pub host_busy_s: f64,
    pub llm_calls: u64,
    pub worker_log_lines: usize,
    /// CPU of every PostgreSQL process (the worker's backends included).
    pub postgres_cpu_s: f64,
    /// CPU of the RabbitMQ node (beam.smp and its helpers).
    pub rabbitmq_cpu_s: f64,
}

/// Per-task distributions, in milliseconds.
struct Distributions {
    /// publish → `task.started` received.
    start: Vec<f64>,
    /// publish → terminal event received.
    task: Vec<f64>,
    /// (task time − model latency × calls) / recursions.
    per_recursion: Vec<f64>,
}

fn distributions(followed: &Followed, stored: &Stored, llm_ms: f64) -> Distributions {
    let mut out = Distributions {
        start: Vec::new(),
        task: Vec::new(),
        per_recursion: Vec::new(),
    };
    for (task_id, times) in &followed.tasks {
        if let Some(started) = times.started {
            out.start.push(millis(times.published, started));
        }
        let (Some(ended), Some(row)) = (times.ended, stored.tasks.get(task_id)) else {
            continue;
        };
        let wall = millis(times.published, ended);
        out.task.push(wall);
        let calls = f64::from(row.iterations.max(1));
        out.per_recursion.push((wall - llm_ms * calls) / calls);
    }
    out
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// The final JSON object.
pub fn summary(params: &Params, followed: &Followed, stored: &Stored, res: &Resources) -> Value {
    let wall_s = millis(followed.first_publish, followed.last_end) / 1e3;
    let recursions = stored.recursions as f64;
    let mut d = distributions(followed, stored, params.llm_latency_ms as f64);
    json!({
        "tasks": params.tasks,
        "steps": params.steps,
        "concurrency": params.concurrency,
        "workers": params.workers,
        "llm_latency_ms": params.llm_latency_ms,
        "db_pool": params.db_pool,
        "pg_synchronous_commit": params.pg_synchronous_commit.as_deref().unwrap_or("server default"),
        "recursions": stored.recursions,
        "llm_calls": res.llm_calls,
        "events": followed.events,
        "events_per_recursion": round(followed.events as f64 / recursions.max(1.0), 2),
        "wall_s": round(wall_s, 3),
        "recursions_per_s": round(recursions / wall_s.max(1e-9), 1),
        "tasks_per_s": round(params.tasks as f64 / wall_s.max(1e-9), 1),
        "ms_per_recursion_p50": round(percentile(&mut d.per_recursion, 50.0), 3),
        "ms_per_recursion_p99": round(percentile(&mut d.per_recursion, 99.0), 3),
        "task_ms_p50": round(percentile(&mut d.task, 50.0), 2),
        "task_ms_p99": round(percentile(&mut d.task, 99.0), 2),
        "start_latency_ms_p50": round(percentile(&mut d.start, 50.0), 3),
        "start_latency_ms_p99": round(percentile(&mut d.start, 99.0), 3),
        "peak_rss_mib": round(res.peak_rss_mib, 1),
        "worker_cpu_s": round(res.worker_cpu_s, 2),
        "worker_cpu_ms_per_recursion": round(res.worker_cpu_s * 1e3 / recursions.max(1.0), 3),
        "bench_cpu_s": round(res.bench_cpu_s, 2),
        "host_busy_cpu_s": round(res.host_busy_s, 2),
        "host_cpu_ms_per_recursion": round(res.host_busy_s * 1e3 / recursions.max(1.0), 3),
        "postgres_cpu_s": round(res.postgres_cpu_s, 2),
        "postgres_cpu_ms_per_recursion": round(res.postgres_cpu_s * 1e3 / recursions.max(1.0), 3),
        "rabbitmq_cpu_s": round(res.rabbitmq_cpu_s, 2),
        "rabbitmq_cpu_ms_per_recursion": round(res.rabbitmq_cpu_s * 1e3 / recursions.max(1.0), 3),
        "host_load_1m": params.host_load_1m,
        "preloaded_tasks": params.preloaded_tasks,
        "preloaded_events": params.preloaded_events,
        "host_cores": std::thread::available_parallelism().map_or(1, usize::from),
        "worker_log_lines": res.worker_log_lines,
        "all_completed": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut values = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&mut values, 50.0), 3.0);
        assert_eq!(percentile(&mut values, 99.0), 5.0);
        assert_eq!(percentile(&mut values, 0.0), 1.0);
        assert_eq!(percentile(&mut [], 50.0), 0.0);
    }
}
