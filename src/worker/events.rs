//! The per-task event log: builds the progress events of CONTRACT §3 with a gapless seq,
//! hands them to the step that stores them in `events`, and publishes them (confirmed) to
//! the events fanout exchange once that step has committed, oldest first; what a broker
//! outage leaves unconfirmed goes out again, in order, before anything newer.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::amqp::publisher::OutgoingEvent;
use crate::core::machine::{DomainEvent, Outcome, RecursionRecord};
use crate::{metrics, store};

/// One progress event, exactly as published and stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub event_id: Uuid,
    pub task_id: Uuid,
    pub agent_id: Option<Uuid>,
    pub seq: i64,
    #[serde(rename = "type")]
    pub event_type: &'static str,
    pub trace_id: Option<Uuid>,
    pub iteration: Option<u32>,
    pub ts: DateTime<Utc>,
    pub data: Value,
}

/// Events produced by a task, waiting to be stored and published.
#[derive(Debug)]
pub struct EventLog {
    task_id: Uuid,
    agent_id: Option<Uuid>,
    last_seq: i64,
    /// Produced, not stored yet.
    pending: Vec<Encoded>,
    /// Stored (committed), not published yet: a broker outage leaves them here, in order,
    /// and they go out first at the next publish.
    unpublished: VecDeque<Encoded>,
}

/// An event with its JSON text, serialized once for both the table and the broker.
#[derive(Debug)]
pub struct Encoded {
    event: Event,
    json: String,
}

impl EventLog {
    /// A log whose next event gets `last_seq + 1`.
    pub fn new(task_id: Uuid, agent_id: Option<Uuid>, last_seq: i64) -> Self {
        Self {
            task_id,
            agent_id,
            last_seq,
            pending: Vec::new(),
            unpublished: VecDeque::new(),
        }
    }

    /// Appends an event with the next seq.
    pub fn push(
        &mut self,
        event_type: &'static str,
        trace_id: Option<Uuid>,
        iteration: Option<u32>,
        data: Value,
    ) {
        self.last_seq += 1;
        let event = Event {
            event_id: Uuid::now_v7(),
            task_id: self.task_id,
            agent_id: self.agent_id,
            seq: self.last_seq,
            event_type,
            trace_id,
            iteration,
            ts: Utc::now(),
            data,
        };
        let json = serde_json::to_string(&event).unwrap_or_default();
        self.pending.push(Encoded { event, json });
    }

    /// Appends the events of the core's domain events.
    pub fn push_domain(&mut self, event: &DomainEvent) {
        match event {
            DomainEvent::RecursionStarted {
                trace_id,
                iteration,
                step_id,
            } => self.push(
                "recursion.started",
                Some(*trace_id),
                Some(*iteration),
                json!({"iteration": iteration, "step_id": step_id}),
            ),
            DomainEvent::PlanUpdated {
                trace_id,
                iteration,
                plan,
            } => self.push(
                "plan.updated",
                Some(*trace_id),
                Some(*iteration),
                json!({"plan": plan_view(plan)}),
            ),
            DomainEvent::StepUpdated {
                trace_id,
                iteration,
                step_id,
                status,
            } => self.push(
                "step.updated",
                Some(*trace_id),
                Some(*iteration),
                json!({"step_id": step_id, "status": status}),
            ),
            DomainEvent::ContextCompacted {
                trace_id,
                iteration,
                before_tokens,
                after_tokens,
                folded_recursions,
            } => self.push(
                "context.compacted",
                Some(*trace_id),
                Some(*iteration),
                json!({"before_tokens": before_tokens, "after_tokens": after_tokens,
                       "folded_recursions": folded_recursions}),
            ),
            DomainEvent::RecursionCompleted(record) => self.push(
                "recursion.completed",
                Some(record.trace_id),
                Some(record.iteration),
                recursion_completed(record),
            ),
        }
    }

    /// Appends the terminal event of an outcome.
    pub fn push_outcome(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Completed { answer, iterations } => self.push(
                "task.completed",
                None,
                Some(*iterations),
                json!({"answer": answer, "iterations": iterations}),
            ),
            Outcome::Failed {
                reason,
                error,
                iterations,
                partial,
            } => self.push(
                "task.failed",
                None,
                Some(*iterations),
                json!({"reason": reason.as_str(), "error": error, "iterations": iterations,
                       "partial": partial}),
            ),
            Outcome::Cancelled { iterations } => self.push(
                "task.cancelled",
                None,
                Some(*iterations),
                json!({"iterations": iterations}),
            ),
        }
    }

    /// Stores the pending events inside the caller's transaction (one statement), for the
    /// one-off writers (a rejection, a cancel before start); follow with [`Self::publish`].
    pub async fn store(&self, conn: &mut PgConnection) -> sqlx::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let seqs: Vec<i64> = self.pending.iter().map(|e| e.event.seq).collect();
        let ids: Vec<Uuid> = self.pending.iter().map(|e| e.event.event_id).collect();
        let types: Vec<&str> = self.pending.iter().map(|e| e.event.event_type).collect();
        let payloads: Vec<&str> = self.pending.iter().map(|e| e.json.as_str()).collect();
        store::events::insert_many(conn, self.task_id, &seqs, &ids, &types, &payloads).await
    }

    /// Takes what the next step sends: the events produced since the last step (to be
    /// stored with it) behind the stored ones a broker outage left unsent.
    pub fn take_outbound(&mut self) -> Outbound {
        Outbound {
            backlog: self.unpublished.drain(..).collect(),
            fresh: std::mem::take(&mut self.pending),
        }
    }

    /// Puts back, oldest first, the stored events a step could not get confirmed; they go
    /// out before anything newer at the next step.
    pub fn restore(&mut self, undelivered: Vec<Encoded>) {
        for encoded in undelivered.into_iter().rev() {
            self.unpublished.push_front(encoded);
        }
    }

    /// Publishes the events the caller has stored and committed (and any left over), oldest
    /// first, and waits for their confirms. A failure is logged, not fatal: the events are
    /// in `events` already and the unconfirmed ones are retried, in order, next time.
    /// Returns whether everything went out.
    pub async fn publish(&mut self, publisher: &Publisher, exchange: &str) -> bool {
        let outbound = self.take_outbound();
        outbound.observe();
        let undelivered = outbound.deliver(publisher, exchange).await;
        let delivered = undelivered.is_empty();
        self.restore(undelivered);
        delivered
    }

    /// After the task's end: keeps trying to publish what is left for up to `patience`
    /// (the broker may be restarting). What still fails stays replayable from `events`.
    pub async fn publish_remaining(
        &mut self,
        publisher: &Publisher,
        exchange: &str,
        patience: std::time::Duration,
    ) {
        let give_up = tokio::time::Instant::now() + patience;
        let mut delay = std::time::Duration::from_millis(100);
        while !self.publish(publisher, exchange).await {
            if tokio::time::Instant::now() + delay > give_up {
                tracing::error!(
                    unpublished = self.unpublished.len(),
                    "giving up publishing; the events stay in the events table"
                );
                return;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(5));
        }
    }
}

/// The events one step sends: `backlog` (stored by an earlier step, not confirmed yet) goes
/// out first, then `fresh` (stored by this step).
#[derive(Debug)]
pub struct Outbound {
    backlog: Vec<Encoded>,
    fresh: Vec<Encoded>,
}

impl Outbound {
    /// Whether there is nothing to store or send.
    pub fn is_empty(&self) -> bool {
        self.backlog.is_empty() && self.fresh.is_empty()
    }

    /// Puts `undelivered` (stored by an earlier step, unconfirmed) before everything else.
    pub fn prepend(&mut self, undelivered: Vec<Encoded>) {
        if !undelivered.is_empty() {
            let backlog = std::mem::take(&mut self.backlog);
            self.backlog = undelivered.into_iter().chain(backlog).collect();
        }
    }

    /// The rows of the fresh events, for the step's write.
    pub fn rows(&self) -> Vec<store::step::EventRow<'_>> {
        self.fresh
            .iter()
            .map(|e| store::step::EventRow {
                seq: e.event.seq,
                event_id: e.event.event_id,
                event_type: e.event.event_type,
                json: &e.json,
            })
            .collect()
    }

    /// Counts the fresh events in the metrics (once their write has committed).
    pub fn observe(&self) {
        self.fresh
            .iter()
            .for_each(|e| metrics::observe_event(&e.event));
    }

    /// Sends every event, in order, and waits for the confirms. Returns the events not
    /// confirmed (the first failure and everything after it), oldest first.
    pub async fn deliver(self, publisher: &Publisher, exchange: &str) -> Vec<Encoded> {
        let events: Vec<Encoded> = self.backlog.into_iter().chain(self.fresh).collect();
        if events.is_empty() {
            return events;
        }
        let confirmed = metrics::time_publish(send_and_confirm(publisher, exchange, &events)).await;
        let confirmed = match confirmed {
            Ok(()) => events.len(),
            Err(partial) => {
                tracing::warn!(unpublished = events.len() - partial.confirmed,
                    error = %format!("{:#}", partial.error), "events stored but not published yet");
                partial.confirmed
            }
        };
        events.into_iter().skip(confirmed).collect()
    }
}

/// Sends the batch (confirms pipelined) and awaits the confirms in order.
async fn send_and_confirm(
    publisher: &Publisher,
    exchange: &str,
    events: &[Encoded],
) -> Result<(), Partial> {
    let outgoing: Vec<OutgoingEvent<'_>> = events
        .iter()
        .map(|e| OutgoingEvent {
            event_type: e.event.event_type,
            event_id: e.event.event_id,
            task_id: e.event.task_id,
            body: e.json.as_bytes(),
        })
        .collect();
    let sent = publisher.send_events(exchange, &outgoing).await;
    let mut confirmed = 0;
    for confirm in sent.confirms {
        let error = match confirm.await {
            Ok(confirmation) if confirmation.is_ack() => {
                confirmed += 1;
                continue;
            }
            Ok(_) => anyhow::anyhow!("the broker nacked an event"),
            Err(err) => {
                publisher.forget_channel().await;
                anyhow::Error::new(err).context("waiting for a publisher confirm")
            }
        };
        return Err(Partial { confirmed, error });
    }
    match sent.error {
        None => Ok(()),
        Some(error) => Err(Partial { confirmed, error }),
    }
}

/// A batch that went out only in part.
struct Partial {
    /// Events confirmed, counted from the first.
    confirmed: usize,
    error: anyhow::Error,
}

fn plan_view(plan: &[crate::core::state::PlanStep]) -> Value {
    plan.iter()
        .map(|step| {
            json!({"step_id": step.step_id, "description": step.description, "status": step.status})
        })
        .collect()
}

fn recursion_completed(record: &RecursionRecord) -> Value {
    json!({
        "iteration": record.iteration,
        "step_id": record.step_id,
        "action_type": record.action_type,
        "observe": record.observe,
        "thought": record.thought,
        "abstract": record.abstract_,
        "status": record.status,
        "error_log": record.error_log,
        "duration_ms": (record.finished_at - record.started_at).num_milliseconds(),
    })
}
