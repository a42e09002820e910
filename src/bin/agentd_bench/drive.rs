//! Publishing the tasks and following them through their events.
//!
//! The load is closed-loop: `window` tasks (the worker's concurrency) are published at
//! once, then a new one each time one ends, until `tasks` were published. Every task is
//! therefore picked up as soon as it arrives, so publish → `task.started` measures the
//! dispatch path rather than time spent queued behind the worker's prefetch, and with
//! `tasks <= window` it is a plain burst. Events are timestamped the moment the bench
//! receives them, by a task that does nothing else.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use uuid::Uuid;

use agentd::amqp::Publisher;
use agentd::contract::events::{EventHead, EventType};

use crate::worker::Workers;

/// What to publish and for how long to wait.
pub struct Load {
    pub tasks: usize,
    pub window: usize,
    pub agent_id: Uuid,
    pub queue: String,
    pub timeout: Duration,
}

/// When the bench saw one task's milestones.
#[derive(Debug, Clone)]
pub struct TaskTimes {
    pub published: Instant,
    pub started: Option<Instant>,
    pub ended: Option<Instant>,
    /// The terminal event type.
    pub outcome: Option<String>,
}

/// Every task's times, the number of events received, and the first publish.
pub struct Followed {
    pub tasks: HashMap<Uuid, TaskTimes>,
    pub events: u64,
    pub first_publish: Instant,
    pub last_end: Instant,
}

/// One received event, reduced to what the bench needs.
pub struct Seen {
    task_id: Uuid,
    kind: String,
    at: Instant,
}

/// Forwards every event of `consumer`, timestamped on arrival.
pub fn spawn_receiver(mut consumer: lapin::Consumer) -> mpsc::UnboundedReceiver<Seen> {
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(delivery) = consumer.next().await {
            let at = Instant::now();
            let Ok(delivery) = delivery else { break };
            if let Some(head) = EventHead::from_slice(&delivery.data) {
                let seen = Seen {
                    task_id: head.task_id,
                    kind: head.event_type,
                    at,
                };
                if sender.send(seen).is_err() {
                    break;
                }
            }
        }
    });
    receiver
}

fn is_terminal(kind: &str) -> bool {
    EventType::parse(kind).is_some_and(|kind| kind.is_terminal())
}

/// The publishing side and the bookkeeping of one run.
struct Run<'a> {
    load: &'a Load,
    publisher: &'a Publisher,
    tasks: HashMap<Uuid, TaskTimes>,
    published: usize,
    started: usize,
    ended: usize,
    events: u64,
    recursions: u64,
    failures: mpsc::UnboundedSender<String>,
}

impl Run<'_> {
    /// Publishes the next task in its own tokio task (confirms are awaited concurrently).
    fn publish_next(&mut self) {
        let task_id = Uuid::now_v7();
        let input = format!(
            "bench task {}: add numbers with the calculate tool",
            self.published
        );
        let body = json!({"task_id": task_id, "agent_id": self.load.agent_id, "input": input});
        let times = TaskTimes {
            published: Instant::now(),
            started: None,
            ended: None,
            outcome: None,
        };
        self.tasks.insert(task_id, times);
        self.published += 1;
        let (publisher, queue) = (self.publisher.clone(), self.load.queue.clone());
        let failures = self.failures.clone();
        tokio::spawn(async move {
            let body = body.to_string();
            if let Err(err) = publisher.publish_task(&queue, body.as_bytes()).await {
                let _ = failures.send(format!("publishing task {task_id}: {err:#}"));
            }
        });
    }

    /// Records an event; publishes the next task when one ended.
    fn on_event(&mut self, seen: Seen) {
        self.events += 1;
        let Some(times) = self.tasks.get_mut(&seen.task_id) else {
            return;
        };
        match seen.kind.as_str() {
            "task.started" if times.started.is_none() => {
                times.started = Some(seen.at);
                self.started += 1;
            }
            "recursion.completed" => self.recursions += 1,
            kind if is_terminal(kind) && times.ended.is_none() => {
                times.ended = Some(seen.at);
                times.outcome = Some(seen.kind);
                self.ended += 1;
                if self.published < self.load.tasks {
                    self.publish_next();
                }
            }
            _ => {}
        }
    }

    fn progress(&self, since: Instant) {
        let secs = since.elapsed().as_secs_f64();
        eprintln!(
            "[bench] {secs:6.1} s: {}/{} ended, {} running, {} recursions ({:.0}/s)",
            self.ended,
            self.load.tasks,
            self.started - self.ended.min(self.started),
            self.recursions,
            self.recursions as f64 / secs.max(1e-9)
        );
    }
}

/// Publishes the load and waits for every terminal event, watching the worker, the
/// deadline and Ctrl-C.
pub async fn follow(
    load: &Load,
    publisher: &Publisher,
    mut events: mpsc::UnboundedReceiver<Seen>,
    workers: &mut Workers,
) -> anyhow::Result<Followed> {
    let (failures, mut failed) = mpsc::unbounded_channel();
    let mut run = Run {
        load,
        publisher,
        tasks: HashMap::with_capacity(load.tasks),
        published: 0,
        started: 0,
        ended: 0,
        events: 0,
        recursions: 0,
        failures,
    };
    let first_publish = Instant::now();
    while run.published < load.window.min(load.tasks) {
        run.publish_next();
    }
    let deadline = first_publish + load.timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_progress = Instant::now();
    while run.ended < load.tasks {
        tokio::select! {
            seen = events.recv() => run.on_event(seen.context("the event subscription closed")?),
            Some(failure) = failed.recv() => bail!(failure),
            _ = tick.tick() => {
                workers.ensure_alive()?;
                if Instant::now() > deadline {
                    bail!(timeout_message(&run, load.timeout));
                }
                if last_progress.elapsed() >= Duration::from_secs(2) {
                    run.progress(first_publish);
                    last_progress = Instant::now();
                }
            }
            _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        }
    }
    run.progress(first_publish);
    let last_end = run.tasks.values().filter_map(|t| t.ended).max();
    Ok(Followed {
        events: run.events,
        first_publish,
        last_end: last_end.unwrap_or_else(Instant::now),
        tasks: run.tasks,
    })
}

fn timeout_message(run: &Run<'_>, timeout: Duration) -> String {
    format!(
        "timed out after {} s: {} of {} tasks published, {} started, {} ended, {} recursions \
         completed; the worker is too slow for this load or stuck (raise --timeout-s, or see \
         its log)",
        timeout.as_secs(),
        run.published,
        run.load.tasks,
        run.started,
        run.ended,
        run.recursions
    )
}
