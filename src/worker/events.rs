//! The per-task event log: builds the progress events of CONTRACT §3 with a gapless seq,
//! stores them in `events` inside the step's transaction, then publishes them (confirmed)
//! to the events fanout exchange once the transaction has committed.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::amqp::publisher::OutgoingEvent;
use crate::core::machine::{DomainEvent, Outcome, RecursionRecord};
use crate::store;

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
struct Encoded {
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

    /// Whether events wait to be stored.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The seq of the newest event produced.
    pub fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// Stores the pending events inside the caller's transaction (one statement).
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

    /// Publishes the events whose transaction committed, oldest first, confirms awaited
    /// together. A publish failure is logged, not fatal: the events are in `events`
    /// already, and the unpublished ones are retried, in order, at the next publish.
    /// Returns whether everything went out.
    pub async fn publish(&mut self, publisher: &Publisher, exchange: &str) -> bool {
        for encoded in self.pending.drain(..) {
            crate::metrics::observe_event(&encoded.event);
            self.unpublished.push_back(encoded);
        }
        if self.unpublished.is_empty() {
            return true;
        }
        let batch: Vec<OutgoingEvent<'_>> = self
            .unpublished
            .iter()
            .map(|e| OutgoingEvent {
                event_type: e.event.event_type,
                event_id: e.event.event_id,
                task_id: e.event.task_id,
                body: e.json.as_bytes(),
            })
            .collect();
        let sent = crate::metrics::time_publish(publisher.publish_events(exchange, &batch)).await;
        drop(batch);
        match sent {
            Ok(()) => {
                self.unpublished.clear();
                true
            }
            Err(partial) => {
                self.unpublished
                    .drain(..partial.confirmed.min(self.unpublished.len()));
                tracing::warn!(unpublished = self.unpublished.len(),
                    error = %format!("{:#}", partial.error), "events stored but not published yet");
                false
            }
        }
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
