//! One task being run by this worker ([`TaskRun`]: its machine, event log and what is not
//! committed yet), how a run and its tool phase end, and how its steps are committed: each
//! step (trace rows, LLM attempts, checkpoint and events in one statement) before its
//! events are published. A step's commit runs beside the next LLM call ([`StepCommit`]);
//! tools with effects wait until the step before them is committed (and their own calls
//! are recorded in the ledger), and steps commit in order. A database outage pauses the
//! task (the commit is retried) instead of failing it. The loop that drives the run is
//! `drive.rs`; its phases are `llm_call.rs`, `tool_calls.rs` (`unknown.rs`) and
//! `unstored.rs`, each an `impl TaskRun` of its own.

use std::sync::Arc;

use tokio::time::Instant;
use uuid::Uuid;

use super::deps::WorkerDeps;
use super::step_commit::{Confirmed, StepCommit};
use crate::core::approval::ApprovalPolicy;
use crate::core::machine::{DomainEvent, Machine, Outcome, RecursionRecord, WaitReason};
use crate::core::types::{ToolCallResult, ToolSpec};
use crate::lifecycle::interrupt::{Interrupt, Stops};
use crate::outbox::SWEEP_GRACE;
use crate::outbox::events::EventLog;
use crate::store::step::{Finish, Progress, StartedCall, StepWrite, ToolMeta, Totals};
use crate::store::{agents::Agent, trace::LlmCallRow};

/// How long a finished task keeps trying to publish its last events through a broker
/// outage; then the outbox sweep takes over.
const PUBLISH_PATIENCE: std::time::Duration = SWEEP_GRACE;

/// A task taken up by this worker: its machine (fresh or from its checkpoint), its event
/// log, and the seq its events are known confirmed up to.
#[derive(Debug)]
pub struct Taken {
    pub machine: Machine,
    pub log: EventLog,
    pub confirmed_seq: i64,
}

/// How a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The task reached an outcome; it is committed and its terminal event published.
    Finished(Outcome),
    /// The worker let the task go (shutdown, lost lease); it resumes from its checkpoint.
    Released,
    /// The task waits for someone (`waiting` is committed, its events published): its
    /// message is acknowledged, and a `resume` enqueues it again.
    Waiting,
}

/// How running a reply's tool calls ended.
#[derive(Debug)]
pub enum ToolsEnd {
    /// Every call has its result, in call order.
    Results(Vec<ToolCallResult>),
    /// A cancel or a release stopped the run.
    Interrupted(Interrupt),
    /// Gated calls (these ids) wait for a decision: nothing ran; the caller commits the
    /// task `waiting` with what was prepared.
    AwaitingApproval(Vec<String>),
    /// Delegate calls wait for their children: nothing ran; the caller commits the task
    /// `waiting` and starts the children.
    AwaitingChildren(Vec<crate::lifecycle::delegation::Pending>),
    /// Calls whose outcome is unknown (these ids) are held for a person (`on_unknown` =
    /// `hold`, CONTRACT §14): nothing ran; the caller commits the task `waiting`.
    AwaitingResolution(Vec<String>),
}

/// One task being run by this worker.
pub struct TaskRun<'a> {
    pub(super) deps: &'a WorkerDeps,
    pub(super) machine: Machine,
    pub(super) log: EventLog,
    pub(super) model: String,
    /// The system prompt template with the agent version's instructions (CONTRACT §11).
    pub(super) template: Arc<crate::core::prompt::PromptTemplate>,
    /// The agent version's request parameters, sent with every LLM request.
    pub(super) params: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    pub(super) granted: Option<Vec<String>>,
    pub(super) tool_specs: Arc<[ToolSpec]>,
    pub(super) stream: bool,
    pub(super) stops: Stops,
    /// The agent's gated tools (CONTRACT §7) and how long a request waits, in seconds.
    pub(super) approval: ApprovalPolicy,
    pub(super) approval_timeout_secs: f64,
    /// The agents it may delegate to (the `delegate` tool, CONTRACT §10).
    pub(super) delegates: Vec<Uuid>,
    /// `agents.on_unknown` = `hold`: unknown outcomes wait for a person (CONTRACT §14).
    pub(super) hold_unknown: bool,
    /// LLM attempts not committed yet (written with the next step).
    pub(super) llm_rows: Vec<LlmCallRow>,
    /// The record of the model calls (CONTRACT §12): the parts stored, the last exchange.
    pub(super) recording: super::llm_record::Recording,
    /// A rerun's source record (CONTRACT v3 §13); `None` for any other task.
    pub(super) replay: Option<Box<super::rerun::Replay>>,
    /// Finished recursions not committed yet.
    records: Vec<RecursionRecord>,
    /// The ledger fields of the tool calls of `records`, in the same order.
    pub(super) tool_meta: Vec<ToolMeta>,
    /// Tool calls to record `started` with the next write.
    pub(super) started: Vec<StartedCall>,
    /// How far the broker confirmed this task's events.
    pub(super) confirmed: Confirmed,
    /// The machine as it was before the open recursion began: what a resume restarts from.
    pub(super) checkpoint: Option<String>,
    /// The step being committed, if its commit has not been waited for yet.
    pub(super) in_flight: Option<StepCommit>,
    /// What the task's OpenTelemetry spans say about it.
    span_task: crate::otel::TaskSpan,
}

impl<'a> TaskRun<'a> {
    /// Prepares a run of `machine` (fresh or restored from a checkpoint).
    pub fn new(
        deps: &'a WorkerDeps,
        taken: Taken,
        agent: Agent,
        stream: bool,
        stops: Stops,
    ) -> Self {
        let Taken {
            machine,
            log,
            confirmed_seq,
        } = taken;
        let span_task = crate::otel::TaskSpan {
            task_id: machine.task().task_id,
            agent_id: agent.agent_id,
            agent_name: agent.name.clone(),
            model: agent.model.clone(),
            created_at: machine.task().created_at,
        };
        let template = Arc::new(
            deps.template
                .with_instructions(agent.instructions.as_deref()),
        );
        let params = match agent.params.as_ref().map(|p| &p.0) {
            Some(serde_json::Value::Object(map)) if !map.is_empty() => Some(Arc::new(map.clone())),
            _ => None,
        };
        let approval = agent.approval_policy();
        let approval_timeout_secs = agent.approval_timeout_secs();
        let hold_unknown = agent.holds_unknown();
        let granted = agent.tools;
        let delegates = agent.delegates.unwrap_or_default();
        let mut tool_specs = deps.tools.shared_specs_for(granted.as_deref());
        if !delegates.is_empty() {
            let mut specs = tool_specs.to_vec();
            specs.push(crate::lifecycle::delegation::delegate_spec(&delegates));
            tool_specs = specs.into();
        }
        Self {
            approval,
            approval_timeout_secs,
            hold_unknown,
            delegates,
            deps,
            machine,
            log,
            model: agent.model,
            template,
            params,
            granted,
            tool_specs,
            stream,
            stops,
            llm_rows: Vec::new(),
            recording: Default::default(),
            replay: None,
            records: Vec::new(),
            tool_meta: Vec::new(),
            started: Vec::new(),
            confirmed: Confirmed::new(confirmed_seq),
            checkpoint: None,
            in_flight: None,
            span_task,
        }
    }

    pub(super) fn task_id(&self) -> Uuid {
        self.machine.task().task_id
    }

    /// Starts committing what was produced since the last commit (recursions, LLM attempts,
    /// checkpoint, events), after the step before it; the task goes on meanwhile.
    pub(super) async fn commit_step(&mut self) -> anyhow::Result<()> {
        // One step's write outstanding at most: a slow or unreachable database holds the
        // task back (and a lost lease stops it) instead of letting it run ahead.
        self.settle_write().await?;
        self.collect_events();
        let progress = match self.checkpoint.take() {
            Some(checkpoint) => Progress::Checkpoint {
                iterations: self.machine.iteration(),
                plan: serde_json::to_string(self.machine.plan())?,
                checkpoint,
            },
            None => Progress::Touch,
        };
        self.start(progress);
        Ok(())
    }

    /// Commits the task's end with everything before it, then publishes its events,
    /// through a broker outage if need be, before the task's message is acknowledged.
    pub(super) async fn commit_end(&mut self, outcome: &Outcome) -> anyhow::Result<()> {
        self.collect_events();
        self.log.push_outcome(outcome);
        self.checkpoint = None;
        let plan = serde_json::to_string(self.machine.plan())?;
        self.start(Progress::Finish(Finish::of(outcome, plan)));
        self.settle().await?;
        self.publish_remaining().await;
        Ok(())
    }

    /// Commits the task as `waiting` (its machine checkpointed as it is: between
    /// recursions, or with the tool calls of its reply pending for approval, `tool_call_ids`;
    /// its lease released) with `task.waiting`, then publishes its events like an end.
    pub(super) async fn commit_wait(
        &mut self,
        reason: WaitReason,
        tool_call_ids: Vec<String>,
    ) -> anyhow::Result<()> {
        self.collect_events();
        tracing::info!(reason = reason.as_str(), "task waiting");
        let iteration = self.machine.iteration();
        self.log.push_waiting(iteration, reason, tool_call_ids);
        self.checkpoint = None;
        let progress = Progress::Wait {
            iterations: self.machine.iteration(),
            plan: serde_json::to_string(self.machine.plan())?,
            checkpoint: serde_json::to_string(&self.machine)?,
            reason: reason.as_str(),
        };
        self.start(progress);
        self.settle().await?;
        self.publish_remaining().await;
        Ok(())
    }

    /// After the task's end: keeps publishing what the broker did not confirm (it may be
    /// restarting) for a while, then reports the task's events confirmed, or leaves them
    /// to the outbox sweep.
    async fn publish_remaining(&mut self) {
        let (publisher, exchange) = (
            &self.deps.fleet.publisher,
            &self.deps.fleet.names.events_exchange,
        );
        let give_up = Instant::now() + PUBLISH_PATIENCE;
        let mut delay = std::time::Duration::from_millis(100);
        while self.log.has_unpublished() {
            if Instant::now() + delay > give_up {
                tracing::warn!("events not confirmed; the outbox sweep will publish them");
                return;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(2));
            let delivered = self.log.take_outbound().deliver(publisher, exchange).await;
            self.confirmed.advance(delivered.last_confirmed);
            self.log.restore(delivered.undelivered);
        }
        self.deps
            .marks
            .confirmed(self.task_id(), self.log.last_seq());
    }

    /// Turns the machine's domain events into progress events and recursion rows.
    fn collect_events(&mut self) {
        for event in self.machine.take_events() {
            self.log.push_domain(&event);
            if let DomainEvent::RecursionCompleted(record) = event {
                self.records.push(record);
            }
        }
    }

    /// Hands the step's rows and events to a background commit.
    fn start(&mut self, progress: Progress) {
        let outbound = self.log.take_outbound();
        let idle = matches!(progress, Progress::Touch)
            && self.records.is_empty()
            && self.started.is_empty()
            && self.llm_rows.is_empty()
            && outbound.is_empty();
        if idle {
            return;
        }
        let write = StepWrite {
            task_id: self.task_id(),
            owner: self.deps.fleet.worker_id,
            progress,
            records: std::mem::take(&mut self.records),
            tool_meta: std::mem::take(&mut self.tool_meta),
            started: std::mem::take(&mut self.started),
            llm_rows: std::mem::take(&mut self.llm_rows),
            max_result_chars: self.machine.task().limits.max_tool_result_chars,
            confirmed_seq: 0,
            totals: totals(&self.machine),
        };
        let release = self.stops.release.clone();
        let previous = self.in_flight.take();
        let spans = self.deps.telemetry.step(&self.span_task, &write);
        self.in_flight = Some(StepCommit::start(
            self.deps,
            release,
            (write, spans),
            outbound,
            previous,
            self.confirmed.clone(),
        ));
    }

    /// Commits the machine as it is now (a recursion waiting for its tool calls) with the
    /// calls recorded `started`, and waits for it: what a resume continues from.
    pub(super) async fn commit_tool_start(&mut self) -> anyhow::Result<()> {
        self.settle_write().await?;
        self.collect_events();
        let progress = Progress::Checkpoint {
            iterations: self.machine.iteration(),
            plan: serde_json::to_string(self.machine.plan())?,
            checkpoint: serde_json::to_string(&self.machine)?,
        };
        self.start(progress);
        self.settle_write().await
    }

    /// Waits until the steps in flight, if any, have committed their rows.
    pub(super) async fn settle_write(&mut self) -> anyhow::Result<()> {
        let written = match self.in_flight.as_mut() {
            Some(step) => step.written().await,
            None => true,
        };
        if written { Ok(()) } else { self.settle().await }
    }

    /// Waits for the steps in flight, if any, to end; keeps their unconfirmed events for
    /// the next step to send first.
    pub(super) async fn settle(&mut self) -> anyhow::Result<()> {
        if let Some(step) = self.in_flight.take() {
            let undelivered = step.finish().await?;
            self.log.restore(undelivered);
        }
        Ok(())
    }
}

/// What the task has spent, as `tasks` records it.
fn totals(machine: &Machine) -> Totals {
    let spent = &machine.budget().spent;
    Totals {
        prompt_tokens: spent.prompt_tokens,
        completion_tokens: spent.completion_tokens,
        cost_usd: spent.cost_usd,
        tool_calls: spent.tool_calls,
    }
}
