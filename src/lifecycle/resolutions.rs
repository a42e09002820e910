//! Unknown outcomes held for a person (CONTRACT §14) outside a task's run: a person's
//! `resolve`, from a control message, the gateway or the CLI. The resolution is recorded in
//! `operator_actions` with its `tool.resolved` event in one transaction that holds the
//! task's row lock (the first resolution of a call wins); the one that resolves the last
//! held call also makes the task `pending` and enqueues its message before the commit, so
//! it resumes on whichever worker reads it, within a second, with `task.resumed` reason
//! `resolved`. What each outcome makes of the call is `core::unknown`'s rule, applied by
//! the run that resumes (`worker/tool_calls.rs`).

use uuid::Uuid;

use super::unheld::{Sink, store_events};
use crate::contract::events::{EventData, ToolResolved};
use crate::core::storable;
use crate::core::unknown::Resolution;
use crate::store::operator_actions::{self, Resolved};

/// What became of a resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Recorded; `resumed`: it was the last held call and the task was enqueued.
    Recorded { action_id: Uuid, resumed: bool },
    /// Another resolution came first (its outcome): this one changed nothing.
    AlreadyResolved(String),
    /// The task does not wait for a resolution (its status).
    NotWaiting(String),
    /// No such task, or no held call with that id.
    NotFound,
}

/// Records `resolution` for `tool_call_id` of `task_id`. Every door comes through here, so
/// what a person typed is made storable here (`core::storable`).
pub async fn resolve(
    sink: Sink<'_>,
    tasks_queue: &str,
    task_id: Uuid,
    tool_call_id: &str,
    resolution: &Resolution,
) -> anyhow::Result<Outcome> {
    resolve_verified(sink, tasks_queue, task_id, tool_call_id, resolution, None).await
}

/// [`resolve`], with who resolved as agentd verified it (CONTRACT v3 §15): the key that
/// signed the control message, the gateway token's caller or the OS user of `agentd
/// resolve`, kept in `operator_actions.verified_by`. `None`: nothing verified the person.
pub async fn resolve_verified(
    sink: Sink<'_>,
    tasks_queue: &str,
    task_id: Uuid,
    tool_call_id: &str,
    resolution: &Resolution,
    verified_by: Option<&str>,
) -> anyhow::Result<Outcome> {
    resolution.validate().map_err(anyhow::Error::msg)?;
    let resolution = resolution.storable();
    let tool_call_id = storable::text(tool_call_id);
    let mut tx = sink.pool.begin().await?;
    let recorded = operator_actions::resolve(
        &mut tx,
        task_id,
        &tool_call_id,
        &resolution,
        verified_by.map(storable::text).as_deref(),
    )
    .await?;
    let (action_id, agent_id, iterations, resumed) = match recorded {
        Resolved::Recorded {
            action_id,
            agent_id,
            iterations,
            resumed,
        } => (
            action_id,
            agent_id,
            u32::try_from(iterations).unwrap_or(0),
            resumed,
        ),
        other => {
            tx.rollback().await?;
            return Ok(match other {
                Resolved::AlreadyResolved(action) => Outcome::AlreadyResolved(action),
                Resolved::NotWaiting(status) => Outcome::NotWaiting(status),
                _ => Outcome::NotFound,
            });
        }
    };
    let event = EventData::ToolResolved(ToolResolved {
        tool_call_id: tool_call_id.clone().into_owned(),
        outcome: resolution.outcome,
        result: resolution.result.clone(),
        error: resolution.error.clone(),
        reason: resolution.reason.clone(),
        by: resolution.by.clone(),
        action_id,
    });
    if let Some(task) = &resumed {
        let Some(message) = super::reconcile::message_of(task) else {
            tx.rollback().await?;
            anyhow::bail!("task {task_id} has no agent or input to resume with");
        };
        // Enqueued before the commit: a failed publish leaves the resolution unrecorded.
        let body = serde_json::to_vec(&message)?;
        sink.publisher.publish_task(tasks_queue, &body).await?;
    }
    store_events(sink, tx, task_id, agent_id, iterations, vec![event]).await?;
    tracing::info!(%task_id, tool_call_id = %crate::core::bounded::quote(&tool_call_id),
        outcome = resolution.outcome.as_str(), resumed = resumed.is_some(), "tool call resolved");
    Ok(Outcome::Recorded {
        action_id,
        resumed: resumed.is_some(),
    })
}
