//! Approvals (CONTRACT §7) outside a task's run: a person's decision, from a control
//! message, the gateway or the CLI, and the expiry pass every worker runs.
//!
//! A decision is recorded with its `approval.decided` event in one transaction that holds
//! the task's row lock; the first decision of a call wins. The one that decides the last
//! request the task waits for also makes it `pending` and enqueues its message before the
//! commit (the claim of that message waits on the row until then), so the task resumes on
//! whichever worker reads it, within a second, with `task.resumed` reason `approval`. An
//! expired request is decided `expired` by `agentd`: with the agent's `on_approval_expiry`
//! = `reject` the model then gets an error result, with `fail` the task ends `failed`
//! (reason `approval_expired`) in the same transaction.

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::unheld::{Sink, store_events};
use crate::amqp::Publisher;
use crate::contract::events::{ApprovalDecided, EventData, TaskFailed};
use crate::core::approval::{Decision, DecisionKind, OnExpiry};
use crate::core::machine::FailReason;
use crate::core::storable;
use crate::store::approvals::{self, Recorded};
use crate::store::tasks::status;
use crate::store::unheld::Ending;

/// How often a worker looks for expired requests.
const EXPIRY_PERIOD: Duration = Duration::from_secs(1);
/// Expired requests handled per pass.
const EXPIRY_BATCH: i64 = 100;

/// What became of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Recorded; `resumed`: it was the last the task waited for and the task was enqueued.
    Recorded { resumed: bool },
    /// Another decision came first (its kind): this one changed nothing.
    AlreadyDecided(String),
    /// The task does not wait for approvals (its status).
    NotWaiting(String),
    /// No such task, or no request for that call.
    NotFound,
}

/// A task whose last request was decided, but whose row lacks the agent or the input to
/// enqueue it again with: the decision can never be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("task {0} has no agent or input to resume with")]
pub struct Unresumable(pub Uuid);

/// Records `decision` (checked by the caller) for `tool_call_id` of `task_id`. Every door
/// (a control message, the gateway, the CLI) comes through here, so what a person typed is
/// made storable here (`core::storable`: the reason, `by`, edited arguments, a result, and
/// the call id, which the run path stored the same way).
pub async fn decide(
    sink: Sink<'_>,
    tasks_queue: &str,
    task_id: Uuid,
    tool_call_id: &str,
    decision: &Decision,
) -> anyhow::Result<Decided> {
    decide_verified(sink, tasks_queue, task_id, tool_call_id, decision, None).await
}

/// [`decide`], with who decided as agentd verified it (CONTRACT v3 §15): kept in
/// `approvals.decided_by_verified` and `approval.decided`'s `verified_by`. `None`: nothing
/// verified the decider (an unsigned control message, a gateway without tokens).
pub async fn decide_verified(
    sink: Sink<'_>,
    tasks_queue: &str,
    task_id: Uuid,
    tool_call_id: &str,
    decision: &Decision,
    verified_by: Option<&str>,
) -> anyhow::Result<Decided> {
    let decision = storable_decision(decision);
    let tool_call_id = storable::text(tool_call_id);
    let verified_by = verified_by.map(storable::text);
    let decided = Decider {
        decision: &decision,
        verified_by: verified_by.as_deref(),
    };
    record(sink, tasks_queue, task_id, &tool_call_id, decided, None).await
}

/// A decision with who decided as agentd verified it.
#[derive(Clone, Copy)]
struct Decider<'a> {
    decision: &'a Decision,
    verified_by: Option<&'a str>,
}

/// `decision` with every NUL replaced.
fn storable_decision(decision: &Decision) -> Decision {
    Decision {
        kind: decision.kind,
        arguments: decision.arguments.clone().map(storable::json_owned),
        result: decision.result.clone().map(storable::json_owned),
        reason: decision.reason.clone().map(storable::owned),
        by: decision.by.clone().map(storable::owned),
    }
}

/// Records a decision; `fail`: the task ends `failed` with this error instead of resuming
/// (an expiry with `on_approval_expiry` = `fail`).
async fn record(
    sink: Sink<'_>,
    tasks_queue: &str,
    task_id: Uuid,
    tool_call_id: &str,
    decider: Decider<'_>,
    fail: Option<&str>,
) -> anyhow::Result<Decided> {
    let Decider {
        decision,
        verified_by,
    } = decider;
    let mut tx = sink.pool.begin().await?;
    let resume = fail.is_none();
    let recorded = approvals::decide(
        &mut tx,
        task_id,
        tool_call_id,
        decision,
        verified_by,
        resume,
    )
    .await?;
    let (agent_id, iterations, resumed) = match recorded {
        Recorded::Decided {
            agent_id,
            iterations,
            resumed,
        } => (agent_id, u32::try_from(iterations).unwrap_or(0), resumed),
        other => {
            tx.rollback().await?;
            return Ok(match other {
                Recorded::AlreadyDecided(kind) => Decided::AlreadyDecided(kind),
                Recorded::NotWaiting(status) => Decided::NotWaiting(status),
                _ => Decided::NotFound,
            });
        }
    };
    let mut events = vec![EventData::ApprovalDecided(ApprovalDecided {
        tool_call_id: tool_call_id.to_owned(),
        decision: decision.kind,
        by: decision.by.clone(),
        reason: decision.reason.clone(),
        arguments: decision.arguments.clone(),
        verified_by: verified_by.map(str::to_owned),
    })];
    if let Some(error) = fail {
        let reason = FailReason::ApprovalExpired;
        let ending = Ending {
            status: status::FAILED,
            fail_reason: Some(reason.as_str()),
            error: Some(error),
        };
        if crate::store::unheld::end_unheld(&mut tx, task_id, None, ending)
            .await?
            .is_some()
        {
            events.push(EventData::TaskFailed(TaskFailed {
                reason,
                error: error.to_owned(),
                iterations,
                partial: None,
                divergence: None,
            }));
        }
    }
    if let Some(task) = &resumed {
        let Some(message) = super::reconcile::message_of(task) else {
            tx.rollback().await?;
            return Err(Unresumable(task_id).into());
        };
        // Enqueued before the commit: a failed publish leaves the decision unrecorded.
        let body = serde_json::to_vec(&message)?;
        sink.publisher.publish_task(tasks_queue, &body).await?;
    }
    store_events(sink, tx, task_id, agent_id, iterations, events).await?;
    Ok(Decided::Recorded {
        resumed: resumed.is_some(),
    })
}

/// Decides every expired request of a waiting task `expired` (see the module doc). Returns
/// how many this pass decided.
pub async fn expire_once(
    pool: &PgPool,
    publisher: &Publisher,
    events_exchange: &str,
    tasks_queue: &str,
) -> anyhow::Result<usize> {
    let expired = {
        let mut tx = pool.begin().await?;
        let expired = approvals::lock_expired(&mut tx, EXPIRY_BATCH).await?;
        tx.rollback().await?;
        expired
    };
    let sink = Sink {
        pool,
        publisher,
        exchange: events_exchange,
    };
    let mut decided = 0;
    for request in expired {
        let on_expiry = OnExpiry::parse(request.on_expiry.as_deref()).unwrap_or_default();
        let decision = Decision {
            kind: DecisionKind::Expired,
            arguments: None,
            result: None,
            reason: Some("nobody decided before the approval request expired".into()),
            by: Some("agentd".into()),
        };
        let error = format!(
            "the approval request for tool call {} expired (on_approval_expiry = fail)",
            request.tool_call_id
        );
        let fail = (on_expiry == OnExpiry::Fail).then_some(error.as_str());
        let (task_id, call) = (request.task_id, request.tool_call_id.as_str());
        // The first decision wins: a person (or another worker's pass) may have come first.
        let decider = Decider {
            decision: &decision,
            verified_by: Some("agentd"),
        };
        if let Decided::Recorded { .. } =
            record(sink, tasks_queue, task_id, call, decider, fail).await?
        {
            tracing::info!(%task_id, tool_call_id = call, ?on_expiry, "approval request expired");
            decided += 1;
        }
    }
    Ok(decided)
}

/// Runs [`expire_once`] every second until `stop`.
pub fn spawn_expiry(
    pool: PgPool,
    publisher: Publisher,
    events_exchange: String,
    tasks_queue: String,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (pool, publisher) = (&pool, &publisher);
        let (events_exchange, tasks_queue) = (events_exchange.as_str(), tasks_queue.as_str());
        let pass = move || async move {
            expire_once(pool, publisher, events_exchange, tasks_queue).await?;
            Ok(())
        };
        super::sweep::every(EXPIRY_PERIOD, &stop, "the approval expiry pass", pass).await;
    })
}
