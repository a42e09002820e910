//! How a taken task starts its run: a new one gets its machine from the task, its agent
//! and its budget, then `task.started`; a resumed one gets its checkpoint back, the events
//! nobody confirmed, its guidance and a new budget if one came, then `task.resumed`.

use chrono::Utc;
use uuid::Uuid;

use super::deps::WorkerDeps;
use super::task_run::Taken;
use crate::contract::events::{EventData, ResumeReason, TaskResumed, TaskStarted};
use crate::contract::intake::TaskSpec;
use crate::core::budget::Budget;
use crate::core::machine::{Machine, TaskInfo};
use crate::outbox;
use crate::outbox::events::EventLog;
use crate::store::tasks::ResumePoint;
use crate::store::{self, agents::Agent};

/// Earlier turns of a conversation shown to a new turn (the core shortens them further).
const CONVERSATION_TURNS: i64 = 5;

/// What the core needs to know about the task: input, budget, limits, earlier turns.
pub(super) async fn task_info(
    deps: &WorkerDeps,
    spec: &TaskSpec,
    agent: &Agent,
) -> sqlx::Result<TaskInfo> {
    let conversation = match spec.conversation_id {
        Some(conversation_id) => {
            store::tasks::conversation_turns(
                &deps.fleet.pool,
                conversation_id,
                spec.task_id,
                agent.agent_id,
                CONVERSATION_TURNS,
            )
            .await?
        }
        None => Vec::new(),
    };
    // Checked at intake: an invalid agent budget is refused there.
    let budget = budget_of(deps, spec, agent).unwrap_or_default();
    let mut limits = deps.limits.clone();
    if let Some(budget) = agent
        .context_budget_tokens
        .and_then(|b| u32::try_from(b).ok())
    {
        limits.context_budget_tokens = budget;
    }
    Ok(TaskInfo {
        task_id: spec.task_id,
        agent_id: agent.agent_id,
        objective: spec.input.clone(),
        constraints: spec.constraints.clone(),
        max_iteration: u32::try_from(agent.max_iteration).unwrap_or(1).max(1),
        created_at: Utc::now(),
        limits,
        conversation,
        budget,
        stall: agent.stall_settings(),
    })
}

/// The task's budget: its message's, else its agent's; refused when invalid, or when it
/// limits cost and the agent's model has no price (CONTRACT §8).
pub(super) fn budget_of(
    deps: &WorkerDeps,
    spec: &TaskSpec,
    agent: &Agent,
) -> Result<Option<Budget>, String> {
    let budget = match (&spec.budget, &agent.budget) {
        (Some(budget), _) => budget.clone(),
        (None, None) => return Ok(None),
        (None, Some(stored)) => match crate::contract::intake::parse_budget(Some(stored.0.clone()))
        {
            Ok(Some(budget)) => budget,
            Ok(None) => return Ok(None),
            Err(problem) => return Err(format!("the agent's {problem}")),
        },
    };
    let price = deps.prices.get(&agent.model);
    budget
        .validate(price, &agent.model)
        .map_err(|err| err.to_string())?;
    Ok(Some(budget))
}

/// A task's first run with `machine` (new, or a fork's rebuilt one): `task.started` first,
/// after the `last_seq` events it has stored already; `rerun_of`: its rerun's source.
pub(super) fn started(
    machine: Machine,
    spec: &TaskSpec,
    agent: &Agent,
    (last_seq, rerun_of): (i64, Option<Uuid>),
) -> Taken {
    let mut log = EventLog::new(spec.task_id, Some(agent.agent_id), last_seq);
    let started = TaskStarted {
        input: spec.input.clone(),
        max_iteration: agent.max_iteration,
        model: agent.model.clone(),
        agent_name: agent.name.clone(),
        conversation_id: spec.conversation_id,
        agent_version: agent.version,
        rerun_of,
    };
    log.push(None, None, EventData::TaskStarted(started));
    Taken {
        machine,
        log,
        confirmed_seq: 0,
    }
}

/// Takes a task over from its checkpoint; its stored events that nobody confirmed go out
/// first, before `task.resumed`.
pub(super) async fn resume(
    deps: &WorkerDeps,
    spec: &TaskSpec,
    agent: &Agent,
    point: ResumePoint,
    rerun_of: Option<Uuid>,
) -> anyhow::Result<Taken> {
    let last_seq =
        store::events::last_seq(&mut *deps.fleet.pool.acquire().await?, spec.task_id).await?;
    if last_seq == 0 {
        // Nothing published yet: a fork (its machine rebuilt by whoever created it, CONTRACT
        // §10) starts from its checkpoint with `task.started`; anything else from nothing.
        let forked = point
            .checkpoint
            .as_deref()
            .map(serde_json::from_str::<Machine>);
        let machine = match forked {
            Some(Ok(machine)) => machine,
            _ => Machine::new(task_info(deps, spec, agent).await?),
        };
        return Ok(started(machine, spec, agent, (0, rerun_of)));
    }
    let machine = match point
        .checkpoint
        .as_deref()
        .map(serde_json::from_str::<Machine>)
    {
        Some(Ok(machine)) => machine,
        Some(Err(err)) => anyhow::bail!("unreadable checkpoint: {err}"),
        None => Machine::new(task_info(deps, spec, agent).await?),
    };
    tracing::info!(task_id = %spec.task_id, iteration = machine.iteration(), "resuming task");
    let mut log = EventLog::new(spec.task_id, Some(agent.agent_id), last_seq);
    log.restore(outbox::unconfirmed(&deps.fleet.pool, spec.task_id, point.confirmed_seq).await?);
    let mut machine = machine;
    let reason = match &point.resumed {
        None => ResumeReason::Recovered,
        Some((why, budget)) => {
            if let Some(budget) = budget {
                match crate::contract::intake::parse_budget(Some(budget.clone())) {
                    Ok(Some(budget)) => machine.replace_budget(budget),
                    Ok(None) => {}
                    Err(problem) => tracing::warn!(%problem, "resume budget ignored"),
                }
            }
            match why.as_str() {
                "budget" => ResumeReason::Budget,
                "approval" => ResumeReason::Approval,
                "child" => ResumeReason::Child,
                "resolved" => ResumeReason::Resolved,
                _ => ResumeReason::Resumed,
            }
        }
    };
    for text in &point.guidance {
        machine.add_guidance(text);
    }
    let resumed = TaskResumed {
        iteration: machine.iteration(),
        reason,
    };
    log.push(
        None,
        Some(machine.iteration()),
        EventData::TaskResumed(resumed),
    );
    Ok(Taken {
        machine,
        log,
        confirmed_seq: point.confirmed_seq,
    })
}
