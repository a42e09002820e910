//! Forking a task from recursion N (CONTRACT §10), shared by `agentd fork` and
//! `POST /v1/tasks/{id}/fork`: the new task starts from the state the original had after
//! recursion N − 1, rebuilt from the trace tables by replaying the recorded replies and tool
//! results through the machine (no LLM call, no tool run); its first recursion is numbered
//! N, the recursions before N are not copied (the original's rows are the history), and its
//! row points back (`forked_from_task_id`, `forked_from_iteration = N`). A fork is a
//! branch, not a turn: it has no conversation.

use chrono::Utc;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::config::Settings;
use crate::contract::TaskMessage;
use crate::core::machine::{Machine, TaskInfo};
use crate::core::prompt::PromptTemplate;
use crate::store::{self, fork};

/// Why a fork was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    #[error("no task {0}")]
    NotFound(Uuid),
    #[error("{0}")]
    BadIteration(String),
    #[error("{0}")]
    Unforkable(String),
    /// The original's budget limits cost and its model has no price (CONTRACT §8): the
    /// worker would reject the fork at intake.
    #[error("the original's {0}")]
    Unpriced(String),
}

/// Creates and enqueues the fork of `task_id` from recursion `from_iteration`, with `input`
/// instead of the original's when given. It runs on the original's agent version unless
/// `agent_version` names another (CONTRACT §11). Returns the new task's id.
pub async fn fork_task(
    pool: &sqlx::PgPool,
    publisher: &Publisher,
    settings: &Settings,
    task_id: Uuid,
    from_iteration: i32,
    (input, agent_version): (Option<String>, Option<i32>),
) -> anyhow::Result<Result<Uuid, ForkError>> {
    let Some(original) = fork::original(pool, task_id).await? else {
        return Ok(Err(ForkError::NotFound(task_id)));
    };
    if from_iteration < 1 || from_iteration > original.iterations {
        return Ok(Err(ForkError::BadIteration(format!(
            "from_iteration must be between 1 and {} (the recursions task {task_id} ran)",
            original.iterations
        ))));
    }
    let (Some(agent_id), Some(original_input)) = (original.agent_id, original.input.clone()) else {
        return Ok(Err(ForkError::Unforkable(
            "the task's agent or input is unknown".into(),
        )));
    };
    let version = agent_version.or(original.agent_version);
    let agent = match version {
        Some(version) => store::agents::at_version(pool, agent_id, version).await?,
        None => store::agents::get(pool, agent_id).await?,
    };
    let Some(agent) = agent else {
        return Ok(Err(ForkError::Unforkable(match version {
            Some(version) => format!("agent {agent_id} has no version {version}"),
            None => format!("agent {agent_id} no longer exists"),
        })));
    };
    let past = fork::recursions_before(pool, task_id, from_iteration).await?;
    if past.len() != usize::try_from(from_iteration - 1).unwrap_or(0) {
        return Ok(Err(ForkError::Unforkable(format!(
            "the recursions before {from_iteration} are not all recorded"
        ))));
    }
    // A person's text, from the gateway or the CLI: made storable (NUL becomes U+FFFD).
    let input = input
        .map(crate::core::storable::owned)
        .filter(|text| !text.trim().is_empty())
        .unwrap_or(original_input);
    let budget = match crate::contract::intake::parse_budget(original.budget.clone()) {
        Ok(budget) => budget,
        Err(problem) => return Ok(Err(ForkError::Unforkable(problem))),
    };
    if let Some(budget) = &budget
        && let Err(err) = budget.validate(settings.prices.get(&agent.model), &agent.model)
    {
        return Ok(Err(ForkError::Unpriced(err.to_string())));
    }
    let mut limits = settings.limits.clone();
    if let Some(tokens) = agent
        .context_budget_tokens
        .and_then(|b| u32::try_from(b).ok())
    {
        limits.context_budget_tokens = tokens;
    }
    let new_id = Uuid::now_v7();
    let info = TaskInfo {
        task_id: new_id,
        agent_id,
        objective: input.clone(),
        constraints: serde_json::from_value(original.constraints.clone()).unwrap_or_default(),
        max_iteration: u32::try_from(agent.max_iteration).unwrap_or(1).max(1),
        created_at: Utc::now(),
        limits,
        conversation: Vec::new(),
        budget: budget.clone(),
        stall: agent.stall_settings(),
    };
    let template = template(settings)?.with_instructions(agent.instructions.as_deref());
    let machine = match Machine::rebuild(info.clone(), &past, &template) {
        Ok(machine) => machine,
        Err(problem) => return Ok(Err(ForkError::Unforkable(problem))),
    };
    let checkpoint = serde_json::to_string(&machine)?;
    let row = fork::NewFork {
        task_id: new_id,
        original: &original,
        from_iteration,
        input: &input,
        checkpoint: &checkpoint,
        agent_version: agent.version,
    };
    fork::insert(pool, &row).await?;
    let message = TaskMessage {
        task_id: Some(new_id),
        agent_id,
        input,
        conversation_id: None,
        constraints: info.constraints,
        stream: original.stream,
        budget,
        agent_version: None,
        channel: None,
        tenant_id: None,
        priority: None,
        rerun: None,
    };
    // If this publish fails, the reconciler enqueues the pending row later.
    publisher
        .publish_task(&settings.amqp.tasks_queue, &serde_json::to_vec(&message)?)
        .await?;
    Ok(Ok(new_id))
}

fn template(settings: &Settings) -> anyhow::Result<PromptTemplate> {
    let text = settings.worker.prompt_text()?;
    Ok(PromptTemplate::new(text)?)
}
