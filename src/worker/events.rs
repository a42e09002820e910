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
    pending: Vec<Event>,
    /// Stored (committed), not published yet: a broker outage leaves them here, in order,
    /// and they go out first at the next publish.
    unpublished: VecDeque<Event>,
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
        self.pending.push(Event {
            event_id: Uuid::now_v7(),
            task_id: self.task_id,
            agent_id: self.agent_id,
            seq: self.last_seq,
            event_type,
            trace_id,
            iteration,
            ts: Utc::now(),
            data,
        });
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

    /// Stores the pending events inside the caller's transaction.
    pub async fn store(&self, conn: &mut PgConnection) -> sqlx::Result<()> {
        for event in &self.pending {
            let payload = serde_json::to_value(event).unwrap_or(Value::Null);
            store::events::insert(
                conn,
                event.task_id,
                event.seq,
                event.event_id,
                event.event_type,
                &payload,
            )
            .await?;
        }
        Ok(())
    }

    /// Publishes the events whose transaction committed, oldest first. A publish failure
    /// is logged, not fatal: the events are in `events` already, and the unpublished ones are
    /// retried, in order, at the next publish. Returns whether everything went out.
    pub async fn publish(&mut self, publisher: &Publisher, exchange: &str) -> bool {
        self.unpublished.extend(
            self.pending
                .drain(..)
                .inspect(crate::metrics::observe_event),
        );
        while let Some(event) = self.unpublished.front() {
            let body = serde_json::to_vec(event).unwrap_or_default();
            let publish = publisher.publish_event(
                exchange,
                event.event_type,
                event.event_id,
                event.task_id,
                &body,
            );
            let sent = crate::metrics::time_publish(publish).await;
            if let Err(err) = sent {
                tracing::warn!(seq = event.seq, unpublished = self.unpublished.len(),
                    error = %format!("{err:#}"), "events stored but not published yet");
                return false;
            }
            self.unpublished.pop_front();
        }
        true
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
