//! Runs the native tool calls of a CALL_TOOL recursion through the tool registry: up to
//! `worker.tool_concurrency` at once, each bounded by its timeout (and by what is left of the
//! recursion's), announced by `tool.started` and closed by `tool.completed`, results returned
//! in call order. A failing or hung tool is a result, never an error of the task.
//!
//! The exactly-once ledger (CONTRACT §7): read-only calls run at once, without waiting for
//! any commit. When a reply calls a tool with effects, the recursion (its reply, waiting
//! for its tools) and every call of the reply, recorded `started` with its effect and
//! idempotency key, are committed before anything runs, and the outcome of each call with
//! effects is committed as soon as it ends. A task resumed with its tool calls pending
//! reads the ledger ([`super::tool_plan`]): a committed outcome is used as is, a read-only or
//! idempotent call is run again under the same key, and a side-effecting call that started
//! without a committed outcome is not run again: its state becomes `unknown` and the model
//! gets an error result saying so.
//!
//! Approvals (CONTRACT §7): when a reply calls tools the agent gates, nothing of the reply
//! runs until every gated call has a decision. The gated calls are recorded
//! `awaiting_approval` with their `approvals` rows, `approval.requested` per call and
//! `task.waiting` in the step that makes the task wait (no lease, message acknowledged).
//! Resumed once all are decided, the reply's calls run together: approved ones as asked,
//! edited ones with the new arguments, rejected, expired and answered ones not at all (the
//! model gets the decision's result).

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::join_all;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use uuid::Uuid;

use super::deps::WorkerDeps;
use super::task_run::{TaskRun, ToolsEnd};
use super::tool_plan::{Plan, parsed, plan_calls, started_rows};
use crate::contract::events::{ApprovalRequested, EventData, ToolCompleted, ToolStarted};
use crate::core::approval::{self, Decided};
use crate::core::inbound;
use crate::core::types::{ToolCallRequest, ToolCallResult, ToolEffect};
use crate::lifecycle::interrupt::Interrupt;
use crate::ports::ToolCallContext;
use crate::store::ledger::{CallOutcome, LedgerRow};
use crate::store::step::{StartedCall, ToolMeta};

/// How long read-only tools may run before their `tool.started` events are committed and
/// published on their own. Tools that finish sooner are committed together with the rest of
/// their recursion: one transaction and one publish per recursion instead of three.
const ANNOUNCE_AFTER: Duration = Duration::from_millis(20);

/// What the decisions about a reply's gated calls make of it.
struct Gate {
    /// The calls to run or answer, edited ones with their new arguments.
    calls: Vec<ToolCallRequest>,
    /// Calls decided not to run, with the result the model gets.
    decided: HashMap<String, (ToolCallResult, &'static str)>,
    /// Gated calls without a decision, by index.
    awaiting: Vec<usize>,
    /// The awaiting calls that already have their request (a resume that waits again).
    requested: Vec<String>,
}

/// A call's result with its ledger fields.
struct Ran {
    result: ToolCallResult,
    state: &'static str,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
}

impl TaskRun<'_> {
    /// Runs `calls` before `deadline`, recording their start and end events and the ledger.
    /// `resumed`: the recursion was restored from a checkpoint with its calls pending.
    pub(super) async fn run_tools(
        &mut self,
        calls: &[ToolCallRequest],
        deadline: Instant,
        resumed: bool,
    ) -> anyhow::Result<ToolsEnd> {
        let trace_id = self.machine.current_trace_id().unwrap_or_default();
        let iteration = Some(self.machine.iteration());
        let mut ledger = match resumed {
            true => crate::store::ledger::of_recursion(&self.deps.fleet.pool, trace_id).await?,
            false => Vec::new(),
        };
        let left = self.machine.tool_calls_left();
        let gate = self.gate(trace_id, calls, &ledger, left, resumed).await?;
        if !gate.awaiting.is_empty() {
            return Ok(self.request_approvals(trace_id, &gate));
        }
        let Gate {
            calls, mut decided, ..
        } = gate;
        let calls = calls.as_slice();
        if calls
            .iter()
            .any(|c| c.name == crate::lifecycle::delegation::DELEGATE)
        {
            let children = match resumed {
                true => {
                    crate::store::children::of_parent(&self.deps.fleet.pool, self.task_id()).await?
                }
                false => Vec::new(),
            };
            let delegations =
                crate::lifecycle::delegation::sort_calls(calls, &self.delegates, &children);
            if !delegations.pending.is_empty() {
                return Ok(ToolsEnd::AwaitingChildren(delegations.pending));
            }
            let (tokens, cost) = delegations.spent;
            self.machine.on_delegated_usage(tokens, cost);
            decided.extend(delegations.decided);
        }
        // A call that waited for its approval has not started.
        ledger.retain(|row| row.state.as_deref() != Some("awaiting_approval"));
        if resumed {
            self.apply_resolutions(calls, &mut ledger, &mut decided)
                .await?;
        }
        let effect_of = |name: &str| self.deps.tools.effect_of(name);
        let plans = plan_calls(effect_of, self.task_id(), calls, &ledger, &decided, left);
        // A rerun serves its source's results and runs no side effect (CONTRACT v3 §13).
        let plans = self.replay_tools(calls, plans);
        if self.hold_unknown {
            let held = super::unknown::held(calls, &plans);
            if !held.is_empty() {
                return Ok(self.hold(trace_id, held));
            }
        }
        for (call, plan) in calls.iter().zip(&plans) {
            if matches!(plan, Plan::Run { announce: true, .. }) {
                let started = ToolStarted {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: parsed(call),
                };
                self.log
                    .push(Some(trace_id), iteration, EventData::ToolStarted(started));
            }
        }
        let with_effects = plans.iter().any(|plan| {
            matches!(plan, Plan::Run { effect, announce: true, .. } if *effect != ToolEffect::ReadOnly)
        });
        if with_effects {
            // Tools act on the world: only once the reply and the calls are committed.
            self.started = started_rows(trace_id, calls, &plans);
            self.commit_tool_start().await?;
        }
        let timeout = self
            .deps
            .tool_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        let finished = match self.execute(trace_id, calls, plans, timeout).await? {
            Ok(finished) => finished,
            Err(interrupt) => return Ok(ToolsEnd::Interrupted(interrupt)),
        };
        let mut results = Vec::with_capacity(finished.len());
        for (ran, meta) in finished {
            self.log.push(
                Some(trace_id),
                iteration,
                EventData::ToolCompleted(completed(&ran.result)),
            );
            self.tool_meta.push(ToolMeta {
                state: ran.state,
                effect: meta.0.as_str(),
                idempotency_key: meta.1,
                started_at: ran.started_at,
                finished_at: ran.finished_at,
            });
            results.push(ran.result);
        }
        Ok(ToolsEnd::Results(results))
    }

    /// Applies the agent's approval rules to the reply: which gated calls have a decision
    /// (and what it makes of them) and which still wait. Calls past the budget's limit and
    /// calls whose outcome the ledger holds, or that started after their approval, are not
    /// gated again.
    async fn gate(
        &self,
        trace_id: Uuid,
        calls: &[ToolCallRequest],
        ledger: &[LedgerRow],
        left: Option<u64>,
        resumed: bool,
    ) -> anyhow::Result<Gate> {
        let mut gate = Gate {
            calls: calls.to_vec(),
            decided: HashMap::new(),
            awaiting: Vec::new(),
            requested: Vec::new(),
        };
        // A rerun's call that will not run (served from the record, or a side effect
        // refused) needs nobody's decision.
        let runs = self.runs_in_rerun(calls);
        let gated = |(index, call): &(usize, &ToolCallRequest)| {
            self.approval.gates(&call.name)
                && left.is_none_or(|left| (*index as u64) < left)
                && runs[*index]
        };
        if !calls.iter().enumerate().any(|pair| gated(&pair)) {
            return Ok(gate);
        }
        let requests = match resumed {
            true => crate::store::approvals::of_recursion(&self.deps.fleet.pool, trace_id).await?,
            false => Vec::new(),
        };
        let requests: HashMap<&str, _> = requests
            .iter()
            .map(|row| (row.tool_call_id.as_str(), row))
            .collect();
        let ran: HashMap<&str, &LedgerRow> = ledger
            .iter()
            .filter(|row| row.state.as_deref() != Some("awaiting_approval"))
            .map(|row| (row.tool_call_id.as_str(), row))
            .collect();
        for (index, call) in calls.iter().enumerate() {
            if !gated(&(index, call)) || ran.contains_key(call.id.as_str()) {
                continue;
            }
            let request = requests.get(call.id.as_str());
            match request.and_then(|row| row.decision()) {
                Some(decision) => match approval::apply(&decision, call, parsed(call)) {
                    Decided::Run(call) => gate.calls[index] = call,
                    Decided::Result { result, state } => {
                        gate.decided.insert(call.id.clone(), (result, state));
                    }
                },
                None => {
                    gate.awaiting.push(index);
                    if request.is_some() {
                        gate.requested.push(call.id.clone());
                    }
                }
            }
        }
        Ok(gate)
    }

    /// Prepares the step that makes the task wait for decisions: each awaiting call without
    /// a request recorded `awaiting_approval` with its request and `approval.requested`.
    fn request_approvals(&mut self, trace_id: Uuid, gate: &Gate) -> ToolsEnd {
        let iteration = Some(self.machine.iteration());
        let secs = self.approval_timeout_secs;
        let expires_at = Utc::now()
            + chrono::Duration::milliseconds((secs * 1000.0).min(i64::MAX as f64) as i64);
        let mut ids = Vec::with_capacity(gate.awaiting.len());
        for &index in &gate.awaiting {
            let call = &gate.calls[index];
            ids.push(call.id.clone());
            if gate.requested.contains(&call.id) {
                continue;
            }
            let effect = self.deps.tools.effect_of(&call.name);
            let key =
                (effect != ToolEffect::ReadOnly).then(|| format!("{}:{}", self.task_id(), call.id));
            self.started.push(StartedCall {
                trace_id,
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: parsed(call).to_string(),
                effect: effect.as_str(),
                idempotency_key: key,
                state: "awaiting_approval",
                approval_expires_at: Some(expires_at),
            });
            let requested = ApprovalRequested {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: parsed(call),
                effect: effect.as_str().to_owned(),
                expires_at,
            };
            let data = EventData::ApprovalRequested(requested);
            self.log.push(Some(trace_id), iteration, data);
        }
        tracing::info!(calls = ?ids, "tool calls wait for approval");
        ToolsEnd::AwaitingApproval(ids)
    }

    /// Runs what the plans say, in call order; committing and publishing the `tool.started`
    /// events on their own when read-only tools take longer than [`ANNOUNCE_AFTER`].
    async fn execute(
        &mut self,
        trace_id: Uuid,
        calls: &[ToolCallRequest],
        plans: Vec<Plan>,
        timeout: Duration,
    ) -> anyhow::Result<Result<Vec<(Ran, (ToolEffect, Option<String>))>, Interrupt>> {
        let (deps, granted, stops) = (self.deps, self.granted.clone(), self.stops.clone());
        let task_id = self.task_id();
        let max_chars = self.machine.task().limits.max_tool_result_chars;
        let slots = Semaphore::new(deps.tool_concurrency);
        let runs = join_all(calls.iter().zip(plans).map(|(call, plan)| {
            let (granted, slots) = (granted.as_deref(), &slots);
            async move {
                match plan {
                    Plan::Known {
                        result,
                        state,
                        effect,
                        key,
                    } => {
                        let now = Utc::now();
                        let ran = Ran {
                            result,
                            state,
                            started_at: now,
                            finished_at: now,
                        };
                        (ran, (effect, key))
                    }
                    Plan::Run { effect, key, .. } => {
                        let context = ToolCallContext {
                            idempotency_key: key.as_deref(),
                        };
                        let started_at = Utc::now();
                        let result = run_tool(deps, granted, call, timeout, slots, context).await;
                        let ran = Ran {
                            state: if result.success {
                                "succeeded"
                            } else {
                                "failed"
                            },
                            result,
                            started_at,
                            finished_at: Utc::now(),
                        };
                        if effect != ToolEffect::ReadOnly {
                            record(deps, task_id, trace_id, &ran, max_chars).await;
                        }
                        (ran, (effect, key))
                    }
                }
            }
        }));
        let runs = stops.guard(runs);
        tokio::pin!(runs);
        let finished = tokio::select! {
            finished = &mut runs => finished,
            () = tokio::time::sleep(ANNOUNCE_AFTER) => {
                self.commit_step().await?;
                runs.await
            }
        };
        Ok(finished)
    }
}

/// Commits the outcome of a call with effects as soon as it ends.
async fn record(deps: &WorkerDeps, task_id: Uuid, trace_id: Uuid, ran: &Ran, max_chars: usize) {
    let outcome = CallOutcome {
        task_id,
        owner: deps.fleet.worker_id,
        trace_id,
        result: &ran.result,
        state: ran.state,
        finished_at: ran.finished_at,
        max_result_chars: max_chars,
    };
    match crate::store::ledger::record_outcome(&deps.fleet.pool, &outcome).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(tool_call_id = %ran.result.tool_call_id,
            "lease lost: the outcome of the tool call was not recorded"),
        // The recursion's own write records it (or a resume finds the call started).
        Err(err) => tracing::warn!(tool_call_id = %ran.result.tool_call_id, error = %err,
            "could not record the outcome of the tool call yet"),
    }
}

/// One call through the registry once a slot is free, cut at `timeout`. Its result is
/// where a tool's output enters agentd: made storable here ([`inbound::tool_result`]), so
/// that the ledger, the events and the next recursion see the same text.
async fn run_tool(
    deps: &WorkerDeps,
    granted: Option<&[String]>,
    call: &ToolCallRequest,
    timeout: Duration,
    slots: &Semaphore,
    context: ToolCallContext<'_>,
) -> ToolCallResult {
    let _slot = slots.acquire().await;
    let started = std::time::Instant::now();
    match tokio::time::timeout(timeout, deps.tools.call(granted, call, context)).await {
        Ok(result) => inbound::tool_result(result),
        Err(_) => ToolCallResult {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: parsed(call),
            success: false,
            result: None,
            error: Some(format!(
                "tool call timed out after {} ms",
                timeout.as_millis()
            )),
            memo: None,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        },
    }
}

/// The data of a `tool.completed` event.
fn completed(result: &ToolCallResult) -> ToolCompleted {
    let (result_value, error) = match &result.error {
        Some(error) => (None, Some(error.clone())),
        None => (Some(result.result.clone().unwrap_or(Value::Null)), None),
    };
    ToolCompleted {
        tool_call_id: result.tool_call_id.clone(),
        name: result.name.clone(),
        success: result.success,
        result: result_value,
        error,
        duration_ms: result.duration_ms,
    }
}
