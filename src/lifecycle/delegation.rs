//! Delegation (CONTRACT §10). An agent that lists `agents.delegates` is offered the built-in
//! tool `delegate {"agent_id", "input"}`. When a reply calls it, the recursion is committed
//! with its calls pending and the task waits (`waiting`, reason `child`, no lease, message
//! acknowledged); each call then becomes a child task (its own row with `parent_task_id`,
//! `root_task_id` and the call's id, its own message, lease, retries, events and trace, a
//! budget of what is left of the parent's). When the last child ends, the parent is freed and
//! enqueued in one transaction (`task.resumed`, reason `child`) by the worker that ended it,
//! or by the sweep every worker runs; the children's answers (or failures) are the calls'
//! results, and their tokens and cost count toward the parent's budget, so toward the root's.
//! Cancelling a parent cancels its children.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::fleet::Fleet;
use crate::amqp::Publisher;
use crate::amqp::control::send_control_signed;
use crate::contract::control::Cancel;
use crate::contract::{ControlMessage, TaskMessage};
use crate::core::types::{ToolCallRequest, ToolCallResult, ToolSpec};
use crate::store::children::{self, Child, NewChild};
use crate::store::tasks::status;

/// The built-in tool's name.
pub const DELEGATE: &str = "delegate";

/// How often a worker looks for parents whose children all ended.
const SWEEP_PERIOD: Duration = Duration::from_secs(2);
/// A parent freed less than this ago is left to the worker that ended its last child.
const SWEEP_GRACE_SECS: f64 = 1.0;

/// The `delegate` tool as offered to the model.
pub fn delegate_spec(delegates: &[Uuid]) -> ToolSpec {
    let ids: Vec<String> = delegates.iter().map(Uuid::to_string).collect();
    ToolSpec {
        name: DELEGATE.into(),
        description: format!(
            "Hand a sub-task to another agent and get its answer as this call's result. \
             agent_id must be one of: {}.",
            ids.join(", ")
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string", "enum": ids, "description": "The agent to delegate to"},
                "input": {"type": "string", "description": "The sub-task, as a request to that agent"}
            },
            "required": ["agent_id", "input"],
            "additionalProperties": false
        }),
    }
}

#[derive(Deserialize)]
struct DelegateArgs {
    agent_id: Uuid,
    input: String,
}

/// A delegate call still waiting for its child.
#[derive(Debug, Clone)]
pub struct Pending {
    pub tool_call_id: String,
    pub agent_id: Uuid,
    pub input: String,
    /// The child, when it was recorded already.
    pub child: Option<Uuid>,
}

/// What the reply's delegate calls come to.
#[derive(Debug, Default)]
pub struct Delegations {
    /// Calls with a result: refused, or answered by a child that ended.
    pub decided: HashMap<String, (ToolCallResult, &'static str)>,
    /// Calls whose child has not ended (or does not exist yet).
    pub pending: Vec<Pending>,
    /// Tokens and cost of the children that ended, for the parent's budget.
    pub spent: (u64, f64),
}

/// Sorts the reply's `delegate` calls: refused (an agent not in `delegates`, bad
/// arguments), answered (their child ended; `children` are the task's children, read on a
/// resume) or pending.
pub fn sort_calls(
    calls: &[ToolCallRequest],
    delegates: &[Uuid],
    children: &[Child],
) -> Delegations {
    let by_call: HashMap<&str, &Child> = children
        .iter()
        .filter_map(|c| Some((c.parent_tool_call_id.as_deref()?, c)))
        .collect();
    let mut out = Delegations::default();
    for call in calls.iter().filter(|c| c.name == DELEGATE) {
        let arguments = serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or(Value::String(call.arguments.clone()));
        let refuse = |error: String| {
            let result = ToolCallResult {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: arguments.clone(),
                success: false,
                result: None,
                error: Some(error),
                memo: None,
                duration_ms: 0,
            };
            (result, "failed")
        };
        let args = match serde_json::from_str::<DelegateArgs>(&call.arguments) {
            Ok(args) if !args.input.trim().is_empty() => args,
            Ok(_) => {
                out.decided.insert(
                    call.id.clone(),
                    refuse("delegate: input must not be empty".into()),
                );
                continue;
            }
            Err(err) => {
                let error =
                    format!("delegate: arguments must be {{\"agent_id\", \"input\"}}: {err}");
                out.decided.insert(call.id.clone(), refuse(error));
                continue;
            }
        };
        if !delegates.contains(&args.agent_id) {
            let error = format!(
                "delegate: agent {} is not one this agent may delegate to",
                args.agent_id
            );
            out.decided.insert(call.id.clone(), refuse(error));
            continue;
        }
        match by_call.get(call.id.as_str()) {
            Some(child) if status::is_terminal(&child.task.status) => {
                let task = &child.task;
                let tokens =
                    u64::try_from(task.prompt_tokens + task.completion_tokens).unwrap_or(0);
                out.spent.0 += tokens;
                out.spent.1 += task.cost_usd.unwrap_or(0.0);
                let (success, result, error) = match task.status.as_str() {
                    status::COMPLETED => (
                        true,
                        Some(json!({"task_id": task.task_id, "status": task.status,
                                    "answer": task.answer})),
                        None,
                    ),
                    other => {
                        let why = task
                            .error
                            .as_deref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default();
                        (
                            false,
                            None,
                            Some(format!(
                                "the delegated task {} ended {other}{why}",
                                task.task_id
                            )),
                        )
                    }
                };
                let state = if success { "succeeded" } else { "failed" };
                let result = ToolCallResult {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments,
                    success,
                    result,
                    error,
                    memo: None,
                    duration_ms: 0,
                };
                out.decided.insert(call.id.clone(), (result, state));
            }
            found => out.pending.push(Pending {
                tool_call_id: call.id.clone(),
                agent_id: args.agent_id,
                input: args.input,
                child: found.map(|c| c.task.task_id),
            }),
        }
    }
    out
}

/// Records and enqueues the children of a parent that has just been committed `waiting`
/// (reason child). A child recorded before (a resume that waits again) is not enqueued again.
pub async fn spawn_children(
    fleet: &Fleet,
    parent: Uuid,
    pending: &[Pending],
    stream: bool,
    budget: Option<Value>,
) -> anyhow::Result<()> {
    for call in pending.iter().filter(|p| p.child.is_none()) {
        let new_id = Uuid::now_v7();
        let child = NewChild {
            task_id: new_id,
            parent_task_id: parent,
            parent_tool_call_id: &call.tool_call_id,
            agent_id: call.agent_id,
            input: &call.input,
            stream,
            budget: budget.clone(),
        };
        let task_id = children::record(&fleet.pool, &child).await?;
        if task_id != new_id {
            continue;
        }
        let message = TaskMessage {
            task_id: Some(task_id),
            agent_id: call.agent_id,
            input: call.input.clone(),
            conversation_id: None,
            constraints: Vec::new(),
            stream,
            budget: budget.clone().and_then(|b| serde_json::from_value(b).ok()),
            agent_version: None,
            channel: None,
            tenant_id: None,
            priority: None,
            rerun: None,
        };
        // If this fails, the reconciler enqueues the pending child later.
        fleet
            .publisher
            .publish_task(&fleet.names.tasks_queue, &serde_json::to_vec(&message)?)
            .await?;
        tracing::info!(%parent, child = %task_id, agent = %call.agent_id, "task delegated");
    }
    Ok(())
}

/// After a task ended here: frees its parent if this was its last running child.
pub async fn task_ended(fleet: &Fleet, task_id: Uuid) {
    let freed = async {
        match children::parent_of(&fleet.pool, task_id).await? {
            Some(parent) => {
                free_parent(
                    &fleet.pool,
                    &fleet.publisher,
                    &fleet.names.tasks_queue,
                    parent,
                )
                .await
            }
            None => Ok(false),
        }
    };
    if let Err(err) = freed.await {
        tracing::warn!(%task_id, error = %format!("{err:#}"), "parent not freed yet");
    }
}

/// Frees and enqueues `parent` if it waits for children that all ended.
pub async fn free_parent(
    pool: &PgPool,
    publisher: &Publisher,
    tasks_queue: &str,
    parent: Uuid,
) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    let Some(task) = children::free_parent(&mut tx, parent).await? else {
        tx.rollback().await?;
        return Ok(false);
    };
    let Some(message) = super::reconcile::message_of(&task) else {
        tx.rollback().await?;
        anyhow::bail!("parent {parent} has no agent or input");
    };
    // Enqueued before the commit: its claim waits on the row until then.
    publisher
        .publish_task(tasks_queue, &serde_json::to_vec(&message)?)
        .await?;
    tx.commit().await?;
    tracing::info!(%parent, "every child ended; parent enqueued");
    Ok(true)
}

/// Cancels the children of a cancelled parent that have not ended (each the way any
/// cancel goes: a control message, so a child running anywhere stops within a second).
pub async fn cancel_children(fleet: &Fleet, parent: Uuid) -> anyhow::Result<()> {
    for child in children::running_children(&fleet.pool, parent).await? {
        let cancel = ControlMessage::Cancel(Cancel { task_id: child });
        send_control_signed(&fleet.publisher, &fleet.names, &fleet.control, &cancel).await?;
        tracing::info!(%parent, %child, "child cancelled with its parent");
    }
    Ok(())
}

/// Frees parents whose children all ended every [`SWEEP_PERIOD`] until `stop` (a child
/// that ended without a worker, or whose worker died before freeing it).
pub fn spawn_sweep(
    pool: PgPool,
    publisher: Publisher,
    tasks_queue: String,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pass = || sweep_once(&pool, &publisher, &tasks_queue);
        super::sweep::every(SWEEP_PERIOD, &stop, "the delegation sweep", pass).await;
    })
}

/// One sweep: frees the parents whose children all ended.
async fn sweep_once(pool: &PgPool, publisher: &Publisher, tasks_queue: &str) -> anyhow::Result<()> {
    let parents = {
        let mut conn = pool.acquire().await?;
        children::idle_parents(&mut conn, SWEEP_GRACE_SECS, 100).await?
    };
    for parent in parents {
        free_parent(pool, publisher, tasks_queue, parent).await?;
    }
    Ok(())
}
