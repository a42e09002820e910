//! Reruns (CONTRACT v3 §13) in the run of a task: a rerun message is completed from its
//! source at intake ([`resolve`]: the source must exist, have ended and belong to the same
//! tenant; the new task takes its agent, input, constraints and, unless the message names
//! one, its agent version), and a rerun's run loads the source's record once
//! ([`Replay::load`]) for the LLM-call and tool-call paths, which ask the core
//! (`core::rerun`) what to do with each call.

use super::llm_call::{LlmEnd, Timing};
use super::task_run::TaskRun;
use super::tool_plan::{Plan, parsed};
use crate::contract::intake::{Rejection, TaskSpec};
use crate::core::bounded;
use crate::core::machine::LlmCall;
use crate::core::outcome::FailReason;
use crate::core::request_key::request_key;
use crate::core::rerun::{
    LlmReplay, RecordedAnswers, RecordedTools, RerunMode, RerunSpec, ToolReplay, replay_llm,
};
use crate::core::types::{ToolCallRequest, ToolCallResult};
use crate::core::versions::Requested;
use crate::ports::LlmRequest;
use crate::store::reruns::{self, Source};
use crate::store::tasks::status;

/// The spec of a rerun message completed from its source, or why the task is rejected.
/// A message that is not a rerun comes back as it is.
pub async fn resolve(
    pool: &sqlx::PgPool,
    spec: TaskSpec,
) -> anyhow::Result<Result<TaskSpec, Rejection>> {
    let Some(rerun) = spec.rerun else {
        return Ok(Ok(spec));
    };
    let source = reruns::source(pool, rerun.source_task_id).await?;
    Ok(completed(spec, rerun, source))
}

/// The pure part of [`resolve`]: checks the source and fills the spec from it.
fn completed(
    spec: TaskSpec,
    rerun: RerunSpec,
    source: Option<Source>,
) -> Result<TaskSpec, Rejection> {
    let id = rerun.source_task_id;
    let source = match source {
        // A source in another tenant is not named as such: it is not this tenant's task.
        Some(source)
            if spec
                .tenant_id
                .as_deref()
                .is_none_or(|tenant| tenant == source.tenant_id) =>
        {
            source
        }
        Some(_) => {
            let tenant = spec.tenant_id.as_deref().unwrap_or_default();
            let reason = format!(
                "rerun source {id} is not a task of tenant {}",
                bounded::quote(tenant)
            );
            return Err(rejection(&spec, reason));
        }
        None => {
            let reason = format!("rerun source {id} is not a known task");
            return Err(rejection(&spec, reason));
        }
    };
    if !status::is_terminal(&source.status) {
        let reason = format!(
            "rerun source {id} has not ended (it is {}): only an ended task can be rerun",
            source.status
        );
        return Err(rejection(&spec, reason));
    }
    let (Some(agent_id), Some(input)) = (source.agent_id, source.input.clone()) else {
        let reason = format!("rerun source {id} has no agent or input: it was never read");
        return Err(rejection(&spec, reason));
    };
    if !spec.agent_id.is_nil() && spec.agent_id != agent_id {
        let reason = format!(
            "agent_id {} is not the agent of rerun source {id} ({agent_id}): leave it out",
            spec.agent_id
        );
        return Err(rejection(&spec, reason));
    }
    if !spec.input.is_empty() && spec.input != input {
        let reason = format!("input differs from rerun source {id}'s: leave it out");
        return Err(rejection(&spec, reason));
    }
    let requested = match (spec.requested, source.agent_version) {
        (Requested::Default, Some(version)) => Requested::Version(version),
        (requested, _) => requested,
    };
    Ok(TaskSpec {
        agent_id,
        input,
        constraints: source.constraints.map(|c| c.0).unwrap_or_default(),
        conversation_id: None,
        requested,
        tenant_id: Some(source.tenant_id),
        ..spec
    })
}

/// A rejection of `spec` (a rerun whose source does not qualify).
fn rejection(spec: &TaskSpec, reason: String) -> Rejection {
    Rejection {
        reason: crate::core::storable::owned(bounded::reason_owned(reason)),
        task_id: Some(spec.task_id),
        agent_id: (!spec.agent_id.is_nil()).then_some(spec.agent_id),
        input: (!spec.input.is_empty()).then(|| spec.input.clone()),
        conversation_id: None,
        tenant_id: spec.tenant_id.as_deref().map(Box::from),
    }
}

/// A rerun's view of its source's record, loaded once per run.
#[derive(Debug)]
pub struct Replay {
    pub spec: RerunSpec,
    /// The source's successful attempts (read only when `llm` is `recorded`).
    pub answers: RecordedAnswers,
    /// The source's tool calls not used yet (read only when `tools` is `recorded`).
    pub tools: RecordedTools,
}

impl Replay {
    /// The replay of `task_id`: from `rerun` when its message carried it, else, when
    /// `row_existed`, from its row (a continuation's message is rebuilt from the row and
    /// carries no `rerun`). `None`: not a rerun.
    pub async fn load(
        pool: &sqlx::PgPool,
        task_id: uuid::Uuid,
        rerun: Option<RerunSpec>,
        row_existed: bool,
    ) -> sqlx::Result<Option<Box<Self>>> {
        let spec = match rerun {
            Some(spec) => spec,
            None if !row_existed => return Ok(None),
            None => match reruns::of_task(pool, task_id).await? {
                Some(spec) => spec,
                None => return Ok(None),
            },
        };
        let source = spec.source_task_id;
        let answers = match spec.llm {
            RerunMode::Recorded => reruns::recorded_answers(pool, source).await?,
            RerunMode::Live => RecordedAnswers::new(),
        };
        let tools = match spec.tools {
            RerunMode::Recorded => RecordedTools::new(reruns::recorded_tools(pool, source).await?),
            RerunMode::Live => RecordedTools::default(),
        };
        tracing::info!(%task_id, source = %source, llm = spec.llm.as_str(),
            tools = spec.tools.as_str(), recorded_calls = answers.len(), "rerun");
        Ok(Some(Box::new(Self {
            spec,
            answers,
            tools,
        })))
    }
}

impl TaskRun<'_> {
    /// Whether this run answers its LLM calls from a source's record.
    pub(super) fn replays_llm(&self) -> bool {
        self.replay
            .as_ref()
            .is_some_and(|replay| replay.spec.llm == RerunMode::Recorded)
    }

    /// Answers `call` from the source's record when its canonical request key is the
    /// source's (the attempt is kept as an `llm_calls` row, `served_from` = `recorded`,
    /// with the body the client would have sent); else the task parts from its source.
    pub(super) fn answer_from_record(&mut self, call: &LlmCall) -> LlmEnd {
        let key = request_key(&self.model, &call.messages, &self.tool_specs);
        let Some(replay) = self.replay.as_deref() else {
            return LlmEnd::Done(Err("internal: no record to answer from".to_owned()));
        };
        let response = match replay_llm(&replay.answers, call.iteration, &key) {
            LlmReplay::Answer(response) => response.clone(),
            LlmReplay::Diverged(divergence) => {
                return LlmEnd::Parted(FailReason::RerunDiverged, divergence);
            }
            LlmReplay::Unrecorded(divergence) => {
                return LlmEnd::Parted(FailReason::RerunUnrecorded, divergence);
            }
        };
        let started_at = chrono::Utc::now();
        let request = LlmRequest {
            model: &self.model,
            messages: &call.messages,
            tools: &self.tool_specs,
            stream: self.stream,
            on_delta: None,
            params: self.params.as_deref(),
        };
        let exchange = crate::llm::recorded_exchange(&request, response);
        let mode = (self.deps.record, &*self.deps.redactor);
        self.recording
            .keep(mode, |_| key, &exchange.sent, exchange.response);
        let timing = Timing {
            started_at,
            latency_ms: 0,
            queued_ms: None,
            served_from: Some(crate::llm::SERVED_FROM_RECORD),
        };
        self.record_attempt(call, 1, timing, &exchange.result);
        LlmEnd::Done(exchange.result.map_err(|error| error.to_string()))
    }

    /// Per call of a reply: whether it would run (always, for a task that is not a rerun),
    /// decided on a copy of the source's calls, so nothing is used up.
    pub(super) fn runs_in_rerun(&self, calls: &[ToolCallRequest]) -> Vec<bool> {
        let Some(replay) = self.replay.as_deref() else {
            return vec![true; calls.len()];
        };
        let (iteration, mut tools) = (self.machine.iteration(), replay.tools.clone());
        calls
            .iter()
            .map(|call| {
                let effect = self.deps.tools.effect_of(&call.name);
                let arguments = parsed(call);
                let call = (iteration, call.name.as_str(), &arguments);
                tools.decide(replay.spec.tools, call, effect) == ToolReplay::Run
            })
            .collect()
    }

    /// A rerun's plans for the calls of a reply (CONTRACT v3 §13): a call its source made
    /// (same recursion, name and arguments) gets the source's outcome without running; with
    /// `tools` = `recorded`, a side-effecting call the source did not make is not run. The
    /// plans of any other task come back as they are.
    pub(super) fn replay_tools(
        &mut self,
        calls: &[ToolCallRequest],
        plans: Vec<Plan>,
    ) -> Vec<Plan> {
        let iteration = self.machine.iteration();
        let Some(replay) = self.replay.as_deref_mut() else {
            return plans;
        };
        let mode = replay.spec.tools;
        calls
            .iter()
            .zip(plans)
            .map(|(call, plan)| {
                let Plan::Run { effect, key, .. } = &plan else {
                    return plan;
                };
                let (effect, key) = (*effect, key.clone());
                let arguments = parsed(call);
                let decided =
                    replay
                        .tools
                        .decide(mode, (iteration, &call.name, &arguments), effect);
                let (success, result, error, duration_ms) = match decided {
                    ToolReplay::Run => return plan,
                    ToolReplay::Recorded(source) => {
                        let result = source
                            .success
                            .then(|| source.result.unwrap_or(serde_json::Value::Null));
                        (source.success, result, source.error, source.duration_ms)
                    }
                    ToolReplay::Refused(error) => (false, None, Some(error), 0),
                };
                let result = ToolCallResult {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments,
                    success,
                    result,
                    error,
                    memo: None,
                    duration_ms,
                };
                let state = if success { "succeeded" } else { "failed" };
                Plan::Known {
                    result,
                    state,
                    effect,
                    key,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
