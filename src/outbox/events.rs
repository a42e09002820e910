//! The per-task event log: builds the progress events of CONTRACT §3 (typed, see
//! [`crate::contract::events`]) with a gapless seq, hands them to the step that stores them
//! in `events`, and publishes them (confirmed) to the events fanout exchange once that step
//! has committed, oldest first; what a broker outage leaves unconfirmed goes out again, in
//! order, before anything newer. Stored events nobody confirmed (their worker died) come
//! back through [`Encoded::stored`] and go out the same way (the outbox, `outbox/mod.rs`).

use std::borrow::Cow;
use std::collections::VecDeque;

use chrono::Utc;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::amqp::publisher::OutgoingEvent;
use crate::contract::events::{
    BudgetExceeded, BudgetWarning, ContextCompacted, Event, EventData, PlanStepView, PlanUpdated,
    RecursionCompleted, RecursionStarted, StepUpdated, TaskCancelled, TaskCompleted, TaskFailed,
    TaskWaiting,
};
use crate::core::budget::{Reading, amount};
use crate::core::machine::{DomainEvent, Outcome, RecursionRecord, WaitReason};
use crate::core::rerun::Divergence;
use crate::{metrics, store};

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
    pub seq: i64,
    pub event_id: Uuid,
    pub task_id: Uuid,
    pub event_type: Cow<'static, str>,
    pub json: String,
    /// The typed event, for events produced by this process (metrics count them once
    /// their write commits); `None` for stored events read back to be published again.
    event: Option<Event>,
}

impl Encoded {
    /// A stored event read back from `events` (its payload is the published JSON).
    pub fn stored(row: store::events::StoredEvent) -> Self {
        Self {
            seq: row.seq,
            event_id: row.event_id,
            task_id: row.task_id,
            event_type: Cow::Owned(row.event_type),
            json: row.payload,
            event: None,
        }
    }

    fn new(event: Event) -> Self {
        let json = serde_json::to_string(&event).unwrap_or_default();
        // Every event's payload passes here: whatever outside text it quotes (an input, a
        // guidance, a streamed token) is stored and published as the same storable text.
        let json = match crate::core::storable::json_text(&json) {
            Cow::Borrowed(_) => json,
            Cow::Owned(storable) => storable,
        };
        Self {
            seq: event.seq,
            event_id: event.event_id,
            task_id: event.task_id,
            event_type: Cow::Borrowed(event.event_type().as_str()),
            json,
            event: Some(event),
        }
    }

    /// The row of this event.
    pub fn row(&self) -> store::step::EventRow<'_> {
        store::step::EventRow {
            seq: self.seq,
            event_id: self.event_id,
            event_type: &self.event_type,
            json: &self.json,
        }
    }
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
    pub fn push(&mut self, trace_id: Option<Uuid>, iteration: Option<u32>, data: EventData) {
        self.last_seq += 1;
        let event = Event {
            event_id: Uuid::now_v7(),
            task_id: self.task_id,
            agent_id: self.agent_id,
            seq: self.last_seq,
            trace_id,
            iteration,
            ts: Utc::now(),
            body: data,
        };
        self.pending.push(Encoded::new(event));
    }

    /// The seq of the newest event produced so far (0 when none).
    pub fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// Appends the events of the core's domain events.
    pub fn push_domain(&mut self, event: &DomainEvent) {
        match event {
            DomainEvent::RecursionStarted {
                trace_id,
                iteration,
                step_id,
            } => self.push(
                Some(*trace_id),
                Some(*iteration),
                EventData::RecursionStarted(RecursionStarted {
                    iteration: *iteration,
                    step_id: step_id.clone(),
                }),
            ),
            DomainEvent::PlanUpdated {
                trace_id,
                iteration,
                plan,
            } => self.push(
                Some(*trace_id),
                Some(*iteration),
                EventData::PlanUpdated(PlanUpdated {
                    plan: plan_view(plan),
                }),
            ),
            DomainEvent::StepUpdated {
                trace_id,
                iteration,
                step_id,
                status,
            } => self.push(
                Some(*trace_id),
                Some(*iteration),
                EventData::StepUpdated(StepUpdated {
                    step_id: step_id.clone(),
                    status: *status,
                }),
            ),
            DomainEvent::ContextCompacted {
                trace_id,
                iteration,
                before_tokens,
                after_tokens,
                folded_recursions,
            } => self.push(
                Some(*trace_id),
                Some(*iteration),
                EventData::ContextCompacted(ContextCompacted {
                    before_tokens: *before_tokens,
                    after_tokens: *after_tokens,
                    folded_recursions: *folded_recursions,
                }),
            ),
            DomainEvent::BudgetWarning { iteration, reading } => self.push(
                None,
                Some(*iteration),
                EventData::BudgetWarning(BudgetWarning {
                    limit: reading.limit,
                    used: rounded(reading),
                    max: reading.max,
                }),
            ),
            DomainEvent::BudgetExceeded {
                iteration,
                reading,
                action,
            } => self.push(
                None,
                Some(*iteration),
                EventData::BudgetExceeded(BudgetExceeded {
                    limit: reading.limit,
                    used: rounded(reading),
                    max: reading.max,
                    action: *action,
                }),
            ),
            DomainEvent::RecursionCompleted(record) => self.push(
                Some(record.trace_id),
                Some(record.iteration),
                EventData::RecursionCompleted(recursion_completed(record)),
            ),
            DomainEvent::Stalled {
                trace_id,
                iteration,
                count,
                action,
            } => {
                let stalled = crate::contract::events::TaskStalled {
                    count: *count,
                    action: *action,
                };
                self.push(
                    Some(*trace_id),
                    Some(*iteration),
                    EventData::TaskStalled(stalled),
                );
            }
        }
    }

    /// Appends `task.waiting` (the task is about to be let go until someone frees it).
    pub fn push_waiting(&mut self, iteration: u32, reason: WaitReason, tool_call_ids: Vec<String>) {
        let waiting = TaskWaiting {
            reason,
            tool_call_ids,
        };
        self.push(None, Some(iteration), EventData::TaskWaiting(waiting));
    }

    /// Appends the terminal event of an outcome.
    pub fn push_outcome(&mut self, outcome: &Outcome) {
        let (iterations, data) = terminal_event(outcome);
        self.push(None, Some(iterations), data);
    }

    /// Takes what the next step sends: the events produced since the last step (to be
    /// stored with it) behind the stored ones a broker outage left unsent.
    pub fn take_outbound(&mut self) -> Outbound {
        Outbound {
            backlog: self.unpublished.drain(..).collect(),
            fresh: std::mem::take(&mut self.pending),
        }
    }

    /// Puts back, oldest first, stored events not confirmed yet (a step's leftovers, or
    /// events read back from `events`); they go out before anything newer at the next step.
    pub fn restore(&mut self, undelivered: Vec<Encoded>) {
        for encoded in undelivered.into_iter().rev() {
            self.unpublished.push_front(encoded);
        }
    }

    /// Whether stored events wait to be published.
    pub fn has_unpublished(&self) -> bool {
        !self.unpublished.is_empty()
    }
}

/// The `iteration` and the data of the terminal event of an outcome.
pub fn terminal_event(outcome: &Outcome) -> (u32, EventData) {
    match outcome {
        Outcome::Completed { answer, iterations } => (
            *iterations,
            EventData::TaskCompleted(TaskCompleted {
                answer: answer.clone(),
                iterations: *iterations,
            }),
        ),
        Outcome::Failed {
            reason,
            error,
            iterations,
            partial,
        } => (
            *iterations,
            EventData::TaskFailed(TaskFailed {
                reason: *reason,
                error: error.clone(),
                iterations: *iterations,
                partial: partial.clone(),
                // A rerun that parted from its source says where (CONTRACT v3 §13): the
                // machine keeps it as the error's text.
                divergence: reason
                    .is_rerun_divergence()
                    .then(|| Divergence::from_error_text(error))
                    .flatten(),
            }),
        ),
        Outcome::Cancelled { iterations } => (
            *iterations,
            EventData::TaskCancelled(TaskCancelled {
                iterations: *iterations,
            }),
        ),
    }
}

/// The events one step sends: `backlog` (stored earlier, not confirmed yet) goes out first,
/// then `fresh` (stored by this step).
#[derive(Debug)]
pub struct Outbound {
    backlog: Vec<Encoded>,
    fresh: Vec<Encoded>,
}

impl Outbound {
    /// Stored events to send, nothing to store.
    pub fn stored(backlog: Vec<Encoded>) -> Self {
        Self {
            backlog,
            fresh: Vec::new(),
        }
    }

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
        self.fresh.iter().map(Encoded::row).collect()
    }

    /// The highest seq this step stores (0 when it stores none).
    pub fn last_fresh_seq(&self) -> i64 {
        self.fresh.last().map_or(0, |e| e.seq)
    }

    /// Counts the fresh events in the metrics (once their write has committed).
    pub fn observe(&self) {
        self.fresh
            .iter()
            .filter_map(|e| e.event.as_ref())
            .for_each(metrics::observe_event);
    }

    /// Sends every event, in order, and waits for the confirms. Returns the events not
    /// confirmed (the first failure and everything after it), oldest first, and the seq of
    /// the last event confirmed (0 when none was).
    pub async fn deliver(self, publisher: &Publisher, exchange: &str) -> Delivered {
        let events: Vec<Encoded> = self.backlog.into_iter().chain(self.fresh).collect();
        if events.is_empty() {
            return Delivered::default();
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
        let last_confirmed = confirmed
            .checked_sub(1)
            .and_then(|i| events.get(i))
            .map_or(0, |e| e.seq);
        Delivered {
            last_confirmed,
            undelivered: events.into_iter().skip(confirmed).collect(),
        }
    }
}

/// What [`Outbound::deliver`] achieved.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The seq of the last event the broker confirmed (0 when none).
    pub last_confirmed: i64,
    /// The events not confirmed, oldest first.
    pub undelivered: Vec<Encoded>,
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
            event_type: &e.event_type,
            event_id: e.event_id,
            task_id: e.task_id,
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

fn plan_view(plan: &[crate::core::state::PlanStep]) -> Vec<PlanStepView> {
    plan.iter()
        .map(|step| PlanStepView {
            step_id: step.step_id.clone(),
            description: step.description.clone(),
            status: step.status,
        })
        .collect()
}

fn recursion_completed(record: &RecursionRecord) -> RecursionCompleted {
    RecursionCompleted {
        iteration: record.iteration,
        step_id: record.step_id.clone(),
        action_type: record.action_type.clone(),
        observe: record.observe.clone(),
        thought: record.thought.clone(),
        abstract_: record.abstract_.clone(),
        status: record.status,
        error_log: record.error_log.clone(),
        duration_ms: (record.finished_at - record.started_at).num_milliseconds(),
    }
}

/// A reading's use as the event shows it: whole tokens and calls, cost to a millionth of a
/// USD, seconds to a tenth.
fn rounded(reading: &Reading) -> f64 {
    amount(reading.limit, reading.used)
        .as_f64()
        .unwrap_or(reading.used)
}
