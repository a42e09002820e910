//! Publishing a rerun (CONTRACT v3 §13), shared by `agentd rerun` and
//! `POST /v1/tasks/{id}/rerun`: one task message whose `rerun` names the source and the
//! modes. The source is checked here so a typo gets a clear answer at once (it exists and
//! has ended); the worker checks it again at intake, with its tenant, and takes the
//! source's agent, input, constraints and version from it.

use uuid::Uuid;

use crate::amqp::Publisher;
use crate::contract::TaskMessage;
use crate::core::rerun::RerunSpec;
use crate::store::{reruns, tasks::status};

/// Why a rerun was refused before anything was published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RerunError {
    #[error("no task {0}")]
    NotFound(Uuid),
    #[error("task {0} has not ended (it is {1}): only an ended task can be rerun")]
    NotEnded(Uuid, String),
    #[error("task {0} has no agent or input: it was rejected before it was read")]
    Unread(Uuid),
}

/// What a rerun asks for besides its source and modes.
#[derive(Debug, Clone, Default)]
pub struct RerunAs {
    /// Run on this agent version instead of the source's.
    pub agent_version: Option<i32>,
    /// Run on this channel's version instead of the source's.
    pub channel: Option<String>,
    /// The tenant the caller acts for (the gateway's token); the worker refuses a source of
    /// another tenant.
    pub tenant_id: Option<String>,
}

/// Publishes the rerun of `rerun.source_task_id`; returns the new task's id.
pub async fn publish_rerun(
    pool: &sqlx::PgPool,
    publisher: &Publisher,
    tasks_queue: &str,
    rerun: RerunSpec,
    asked: RerunAs,
) -> anyhow::Result<Result<Uuid, RerunError>> {
    let id = rerun.source_task_id;
    let Some(source) = reruns::source(pool, id).await? else {
        return Ok(Err(RerunError::NotFound(id)));
    };
    if asked.tenant_id.as_deref().is_some_and(|tenant| {
        tenant != source.tenant_id && tenant != crate::core::tenancy::ALL_TENANTS
    }) {
        return Ok(Err(RerunError::NotFound(id)));
    }
    if !status::is_terminal(&source.status) {
        return Ok(Err(RerunError::NotEnded(id, source.status)));
    }
    let (Some(agent_id), Some(input)) = (source.agent_id, source.input) else {
        return Ok(Err(RerunError::Unread(id)));
    };
    let task_id = Uuid::now_v7();
    let message = TaskMessage {
        task_id: Some(task_id),
        agent_id,
        input,
        conversation_id: None,
        // The source's are taken by the worker: a rerun names none of its own.
        constraints: Vec::new(),
        stream: false,
        budget: None,
        agent_version: asked.agent_version,
        channel: asked.channel,
        tenant_id: Some(source.tenant_id),
        priority: None,
        rerun: Some(rerun),
    };
    publisher
        .publish_task(tasks_queue, &serde_json::to_vec(&message)?)
        .await?;
    Ok(Ok(task_id))
}
