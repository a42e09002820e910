//! Drives one claimed task through the core machine: asks the machine what to do next,
//! does it through the ports, feeds the result back, and commits each step (trace rows,
//! LLM attempts, checkpoint and events in one transaction) before publishing its events.
//! A database outage pauses the task (the commit is retried) instead of failing it.

use std::sync::Arc;

use chrono::Utc;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::deps::WorkerDeps;
use super::events::EventLog;
use super::interrupt::{Interrupt, Stops};
use crate::core::machine::{DomainEvent, Machine, Next, Outcome, RecursionRecord};
use crate::core::types::ToolSpec;
use crate::store::{self, trace::LlmCallRow};

/// How long a finished task keeps trying to publish its last events through a broker outage.
const PUBLISH_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// How a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The task reached an outcome; it is committed and its terminal event published.
    Finished(Outcome),
    /// The worker let the task go (shutdown, lost lease); it resumes from its checkpoint.
    Released,
}

/// One task being run by this worker.
pub struct TaskRun<'a> {
    pub(super) deps: &'a WorkerDeps,
    pub(super) machine: Machine,
    pub(super) log: EventLog,
    pub(super) model: String,
    pub(super) granted: Option<Vec<String>>,
    pub(super) tool_specs: Arc<[ToolSpec]>,
    pub(super) stream: bool,
    pub(super) stops: Stops,
    /// LLM attempts not committed yet (written with the next step).
    pub(super) llm_rows: Vec<LlmCallRow>,
    /// Finished recursions not committed yet.
    records: Vec<RecursionRecord>,
    /// The machine as it was before the open recursion began: what a resume restarts from.
    checkpoint: Option<Value>,
}

impl<'a> TaskRun<'a> {
    /// Prepares a run of `machine` (fresh or restored from a checkpoint).
    pub fn new(
        deps: &'a WorkerDeps,
        machine: Machine,
        log: EventLog,
        model: String,
        granted: Option<Vec<String>>,
        stream: bool,
        stops: Stops,
    ) -> Self {
        let tool_specs = deps.tools.specs_for(granted.as_deref()).into();
        Self {
            deps,
            machine,
            log,
            model,
            granted,
            tool_specs,
            stream,
            stops,
            llm_rows: Vec::new(),
            records: Vec::new(),
            checkpoint: None,
        }
    }

    pub(super) fn task_id(&self) -> Uuid {
        self.machine.task().task_id
    }

    /// Runs recursions until the task reaches an outcome or is interrupted.
    pub async fn drive(&mut self) -> anyhow::Result<RunEnd> {
        let mut next = Next::Continue;
        let mut deadline = Instant::now() + self.deps.recursion_timeout;
        loop {
            if let Some(interrupt) = self.stops.current() {
                return self.interrupted(interrupt).await;
            }
            next = match next {
                Next::Continue => {
                    self.checkpoint = Some(serde_json::to_value(&self.machine)?);
                    deadline = Instant::now() + self.deps.recursion_timeout;
                    let trace_id = Uuid::now_v7();
                    self.machine
                        .begin_recursion(trace_id, Utc::now(), &self.deps.template)
                }
                Next::CallLlm(call) => {
                    self.commit_step().await?;
                    let span = tracing::info_span!(
                        "recursion",
                        trace_id = %call.trace_id,
                        iteration = call.iteration
                    );
                    let call_llm = self.call_llm(&call).instrument(span);
                    match tokio::time::timeout_at(deadline, call_llm).await {
                        Err(_) => self.recursion_timed_out("waiting for the LLM"),
                        Ok(result) => match result? {
                            Ok(Ok(reply)) => self.machine.on_llm_reply(&reply, Utc::now()),
                            Ok(Err(error)) => self.machine.on_llm_failure(&error, Utc::now()),
                            Err(interrupt) => return self.interrupted(interrupt).await,
                        },
                    }
                }
                Next::RunTools(calls) => {
                    let span = tracing::info_span!(
                        "recursion",
                        trace_id = %self.machine.current_trace_id().unwrap_or_default(),
                        iteration = self.machine.iteration()
                    );
                    match self.run_tools(&calls, deadline).instrument(span).await? {
                        Ok(results) => self.machine.on_tool_results(results, Utc::now()),
                        Err(interrupt) => return self.interrupted(interrupt).await,
                    }
                }
                Next::Finished(outcome) => {
                    self.commit(Some(&outcome)).await?;
                    return Ok(RunEnd::Finished(outcome));
                }
            };
        }
    }

    fn recursion_timed_out(&mut self, phase: &str) -> Next {
        let limit = self.deps.recursion_timeout.as_millis();
        tracing::warn!(phase, limit_ms = limit as u64, "recursion timed out");
        let error = format!("the recursion timed out after {limit} ms while {phase}");
        self.machine.on_recursion_error(&error, Utc::now())
    }

    async fn interrupted(&mut self, interrupt: Interrupt) -> anyhow::Result<RunEnd> {
        match interrupt {
            Interrupt::Cancelled => {
                let outcome = self.machine.cancel();
                self.commit(Some(&outcome)).await?;
                Ok(RunEnd::Finished(outcome))
            }
            Interrupt::Released => Ok(RunEnd::Released),
        }
    }

    /// Commits what was produced since the last commit and publishes its events.
    pub(super) async fn commit_step(&mut self) -> anyhow::Result<()> {
        self.commit(None).await
    }

    /// Commits, in one transaction, the finished recursions, the LLM attempts, the
    /// checkpoint and plan, the events, and with `outcome` the task's end; then publishes
    /// the events. While the database is unreachable the commit is retried with backoff
    /// (the task pauses), until it works or the task is released.
    async fn commit(&mut self, outcome: Option<&Outcome>) -> anyhow::Result<()> {
        for event in self.machine.take_events() {
            self.log.push_domain(&event);
            if let DomainEvent::RecursionCompleted(record) = event {
                self.records.push(record);
            }
        }
        if let Some(outcome) = outcome {
            self.log.push_outcome(outcome);
        }
        let mut delays = store::transient::delays();
        loop {
            match self.try_commit(outcome).await {
                Ok(()) => break,
                Err(err) if store::transient::is_transient(&err) => {
                    let delay = delays.next().unwrap_or_default();
                    tracing::warn!(error = %format!("{err:#}"), retry_in_ms = delay.as_millis() as u64,
                        "database unavailable; the task waits");
                    if self.stops.release.is_cancelled() {
                        return Err(err);
                    }
                    tokio::select! {
                        () = self.stops.release.cancelled() => return Err(err),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(err) => return Err(err),
            }
        }
        self.records.clear();
        self.llm_rows.clear();
        self.checkpoint = None;
        let (publisher, exchange) = (&self.deps.publisher, &self.deps.names.events_exchange);
        match outcome {
            None => {
                self.log.publish(publisher, exchange).await;
            }
            Some(_) => {
                self.log
                    .publish_remaining(publisher, exchange, PUBLISH_PATIENCE)
                    .await
            }
        }
        Ok(())
    }

    async fn try_commit(&self, outcome: Option<&Outcome>) -> anyhow::Result<()> {
        let task_id = self.task_id();
        let mut tx = self.deps.pool.begin().await?;
        let max_result_chars = self.machine.task().limits.max_tool_result_chars;
        for record in &self.records {
            store::trace::insert_recursion(&mut tx, task_id, record, max_result_chars).await?;
        }
        for row in &self.llm_rows {
            store::trace::insert_llm_call(&mut tx, row).await?;
        }
        // A finished task needs no checkpoint any more; a running one gets the latest.
        let checkpoint = match outcome {
            Some(_) => Some(&Value::Null),
            None => self.checkpoint.as_ref(),
        };
        if let Some(checkpoint) = checkpoint {
            let plan = serde_json::to_value(self.machine.plan())?;
            let iterations = self.machine.iteration();
            let owner = self.deps.worker_id;
            let held = store::tasks::update_progress(
                &mut tx, task_id, owner, iterations, &plan, checkpoint,
            )
            .await?;
            anyhow::ensure!(held, "lease lost: another worker has taken this task over");
        }
        if let Some(outcome) = outcome {
            let end = terminal_fields(outcome);
            let held = store::tasks::finish(&mut tx, task_id, self.deps.worker_id, end).await?;
            anyhow::ensure!(held, "lease lost before the task's end was committed");
        }
        self.log.store(&mut tx).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The `tasks` columns of an outcome.
pub fn terminal_fields(outcome: &Outcome) -> store::tasks::Finish<'_> {
    use store::tasks::{Finish, status};
    match outcome {
        Outcome::Completed { answer, iterations } => Finish {
            status: status::COMPLETED,
            iterations: *iterations,
            answer: Some(answer),
            error: None,
            fail_reason: None,
        },
        Outcome::Failed {
            reason,
            error,
            iterations,
            ..
        } => Finish {
            status: status::FAILED,
            iterations: *iterations,
            answer: None,
            error: Some(error),
            fail_reason: Some(reason.as_str()),
        },
        Outcome::Cancelled { iterations } => Finish {
            status: status::CANCELLED,
            iterations: *iterations,
            answer: None,
            error: None,
            fail_reason: None,
        },
    }
}
