//! One task at a time per conversation, in the order its turns were recorded (CONTRACT §10,
//! `agents.conversation_policy`). A turn is admitted under the conversation's advisory lock
//! once a worker holds it: while an earlier turn has not ended, or another turn holds the
//! conversation, it is parked (`waiting`, reason `conversation`, its lease released and its
//! message acknowledged; policy `enqueue`, the default) or ends `rejected` (policy
//! `reject`). When a turn ends, the next one is freed and enqueued in the same transaction
//! if it is parked; it then starts like a new task and sees the earlier turns' answers. A
//! sweep in every worker frees what a turn that ended elsewhere (or whose worker died) left
//! parked. Which turn is earlier: see `store::conversations`.

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::fleet::Fleet;
use super::unheld::{self, Sink, store_events};
use crate::amqp::Publisher;
use crate::contract::events::{EventData, TaskWaiting};
use crate::core::machine::WaitReason;
use crate::store::{agents::Agent, conversations};

/// How often a worker looks for parked turns of idle conversations.
const SWEEP_PERIOD: Duration = Duration::from_secs(2);
/// A parked turn younger than this is left to the turn that ends (it frees it at once).
const SWEEP_GRACE_SECS: f64 = 1.0;

/// What admission decided about a new turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The conversation is free (or the task has none): run it.
    Run,
    /// Parked until the conversation is free; its message can be acknowledged.
    Parked,
    /// Ended `rejected` (policy `reject`) with this reason.
    Rejected(String),
    /// Not decided: the worker is stopping; the task is released for another one.
    Released,
}

/// A task this worker holds, about to be admitted.
#[derive(Debug, Clone, Copy)]
pub struct Turn {
    pub task_id: Uuid,
    pub conversation_id: Option<Uuid>,
    /// Set for a turn this worker recorded from its message: admission waits until then,
    /// so that a turn published just before it and read by another worker is recorded
    /// first (`worker.turn_settle_ms`).
    pub settle: Option<tokio::time::Instant>,
}

/// Admits the turn (held by this worker): a turn admitted before (resumed after its worker
/// died) goes on. A shutdown during the settle wait admits nothing: the task is released.
pub async fn admit(
    fleet: &Fleet,
    turn: Turn,
    agent: &Agent,
    shutdown: &CancellationToken,
) -> anyhow::Result<Admission> {
    let Turn {
        task_id,
        conversation_id,
        settle,
    } = turn;
    let Some(conversation_id) = conversation_id else {
        return Ok(Admission::Run);
    };
    if let Some(until) = settle {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(Admission::Released),
            () = tokio::time::sleep_until(until) => {}
        }
    }
    let mut tx = fleet.pool.begin().await?;
    conversations::lock(&mut tx, conversation_id).await?;
    // A conversation belongs to one agent and tenant (CONTRACT v3 §15): another's turn is
    // rejected before it sees anything of it. A task runs in its agent's tenant.
    let tenant = agent.tenant_id.as_str();
    let owner =
        conversations::claim_owner(&mut tx, conversation_id, agent.agent_id, tenant).await?;
    if let Some(reason) = foreign_turn(conversation_id, &owner, agent.agent_id, tenant) {
        tx.commit().await?;
        tracing::warn!(%task_id, %conversation_id, %reason, "turn of another agent or tenant rejected");
        unheld::reject_taken(fleet, task_id, Some(agent.agent_id), &reason).await?;
        return Ok(Admission::Rejected(reason));
    }
    if conversations::admitted(&mut tx, task_id).await? {
        tx.commit().await?;
        return Ok(Admission::Run);
    }
    let Some(blocker) = conversations::blocker(&mut tx, conversation_id, task_id).await? else {
        conversations::admit(&mut tx, task_id).await?;
        tx.commit().await?;
        return Ok(Admission::Run);
    };
    if agent.conversation_policy.as_deref() == Some("reject") {
        tx.commit().await?;
        let reason = format!(
            "conversation {conversation_id} has a turn in progress or not ended yet ({blocker}) \
             and the agent's conversation_policy is reject"
        );
        unheld::reject_taken(fleet, task_id, Some(agent.agent_id), &reason).await?;
        return Ok(Admission::Rejected(reason));
    }
    if conversations::park(&mut tx, task_id, fleet.worker_id)
        .await?
        .is_none()
    {
        // The lease is gone: whoever holds the task now decides.
        tx.rollback().await?;
        return Ok(Admission::Parked);
    }
    tracing::info!(%task_id, %conversation_id, %blocker, "turn waits for its conversation");
    let waiting = EventData::TaskWaiting(TaskWaiting {
        reason: WaitReason::Conversation,
        tool_call_ids: Vec::new(),
    });
    let sink = Sink::of(fleet);
    store_events(sink, tx, task_id, Some(agent.agent_id), 0, vec![waiting]).await?;
    Ok(Admission::Parked)
}

/// Why a turn of `agent_id` and `tenant` may not join a conversation that `owner` holds,
/// `None` when it may.
pub fn foreign_turn(
    conversation_id: Uuid,
    owner: &conversations::Owner,
    agent_id: Uuid,
    tenant: &str,
) -> Option<String> {
    if owner.agent_id != agent_id {
        return Some(format!(
            "conversation {conversation_id} belongs to another agent ({}): a conversation_id \
             names one agent's conversation (use a new conversation_id)",
            owner.agent_id
        ));
    }
    (owner.tenant_id != tenant).then(|| {
        format!(
            "conversation {conversation_id} belongs to another tenant: a conversation_id names \
             one tenant's conversation (use a new conversation_id)"
        )
    })
}

/// Frees the next turn of `conversation_id` if it is parked and nothing holds the
/// conversation.
pub async fn free_next(
    pool: &PgPool,
    publisher: &Publisher,
    tasks_queue: &str,
    conversation_id: Uuid,
) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    conversations::lock(&mut tx, conversation_id).await?;
    let Some(next) = conversations::free_next(&mut tx, conversation_id).await? else {
        tx.rollback().await?;
        return Ok(false);
    };
    let Some(message) = super::reconcile::message_of(&next) else {
        tx.rollback().await?;
        anyhow::bail!("parked task {} has no agent or input", next.task_id);
    };
    // Enqueued before the commit: its claim waits on the row until then.
    publisher
        .publish_task(tasks_queue, &serde_json::to_vec(&message)?)
        .await?;
    tx.commit().await?;
    tracing::info!(task_id = %next.task_id, %conversation_id, "next turn of the conversation freed");
    Ok(true)
}

/// After a turn ended here: frees the next one (the sweep retries if this fails).
pub async fn turn_ended(fleet: &Fleet, conversation_id: Option<Uuid>) {
    let Some(conversation_id) = conversation_id else {
        return;
    };
    let (pool, publisher) = (&fleet.pool, &fleet.publisher);
    if let Err(err) = free_next(pool, publisher, &fleet.names.tasks_queue, conversation_id).await {
        tracing::warn!(%conversation_id, error = %format!("{err:#}"), "next turn not freed yet");
    }
}

/// Frees parked turns of idle conversations every [`SWEEP_PERIOD`] until `stop`.
pub fn spawn_sweep(
    pool: PgPool,
    publisher: Publisher,
    tasks_queue: String,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pass = || sweep_once(&pool, &publisher, &tasks_queue);
        super::sweep::every(SWEEP_PERIOD, &stop, "the conversation sweep", pass).await;
    })
}

async fn sweep_once(pool: &PgPool, publisher: &Publisher, tasks_queue: &str) -> anyhow::Result<()> {
    let parked = {
        let mut conn = pool.acquire().await?;
        conversations::with_parked(&mut conn, SWEEP_GRACE_SECS, 100).await?
    };
    for conversation_id in parked {
        free_next(pool, publisher, tasks_queue, conversation_id).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_joins_only_its_own_agents_and_tenants_conversation() {
        let (conversation, agent, other) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let owner = conversations::Owner {
            agent_id: agent,
            tenant_id: "default".into(),
        };
        assert_eq!(foreign_turn(conversation, &owner, agent, "default"), None);
        let reason = foreign_turn(conversation, &owner, other, "default").expect("other agent");
        assert!(reason.contains("another agent") && reason.contains(&agent.to_string()));
        let reason = foreign_turn(conversation, &owner, agent, "acme").expect("other tenant");
        assert!(reason.contains("another tenant") && !reason.contains("default"));
    }
}
