//! Drives one claimed task through the core machine: asks the machine what to do next,
//! does it through the ports, feeds the result back, and commits each step (trace rows,
//! checkpoint and events in one transaction) before publishing its events.

use chrono::Utc;
use serde_json::Value;
use tracing::Instrument;
use uuid::Uuid;

use super::deps::WorkerDeps;
use super::events::EventLog;
use super::interrupt::{Interrupt, Stops};
use crate::core::machine::{DomainEvent, Machine, Next, Outcome};
use crate::core::types::ToolSpec;
use crate::store;

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
    pub(super) tool_specs: Vec<ToolSpec>,
    pub(super) stream: bool,
    pub(super) stops: Stops,
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
        let tool_specs = deps.tools.specs_for(granted.as_deref());
        Self {
            deps,
            machine,
            log,
            model,
            granted,
            tool_specs,
            stream,
            stops,
            checkpoint: None,
        }
    }

    fn task_id(&self) -> Uuid {
        self.machine.task().task_id
    }

    /// Runs recursions until the task reaches an outcome or is interrupted.
    pub async fn drive(&mut self) -> anyhow::Result<RunEnd> {
        let mut next = Next::Continue;
        loop {
            if let Some(interrupt) = self.stops.current() {
                return self.interrupted(interrupt).await;
            }
            next = match next {
                Next::Continue => {
                    self.checkpoint = Some(serde_json::to_value(&self.machine)?);
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
                    match self.call_llm(&call).instrument(span).await? {
                        Ok(Ok(reply)) => self.machine.on_llm_reply(&reply, Utc::now()),
                        Ok(Err(error)) => self.machine.on_llm_failure(&error, Utc::now()),
                        Err(interrupt) => return self.interrupted(interrupt).await,
                    }
                }
                Next::RunTools(calls) => {
                    self.commit_step().await?;
                    match self.run_tools(&calls).await? {
                        Ok(results) => self.machine.on_tool_results(results, Utc::now()),
                        Err(interrupt) => return self.interrupted(interrupt).await,
                    }
                }
                Next::Finished(outcome) => {
                    self.finish(&outcome).await?;
                    return Ok(RunEnd::Finished(outcome));
                }
            };
        }
    }

    async fn interrupted(&mut self, interrupt: Interrupt) -> anyhow::Result<RunEnd> {
        match interrupt {
            Interrupt::Cancelled => {
                let outcome = self.machine.cancel();
                self.finish(&outcome).await?;
                Ok(RunEnd::Finished(outcome))
            }
            Interrupt::Released => Ok(RunEnd::Released),
        }
    }

    /// Commits what the machine produced since the last commit: finished recursions, the
    /// checkpoint, the plan and the events; then publishes the events.
    pub(super) async fn commit_step(&mut self) -> anyhow::Result<()> {
        let records = self.drain_machine_events();
        let mut tx = self.deps.pool.begin().await?;
        for record in &records {
            store::trace::insert_recursion(&mut tx, self.task_id(), record).await?;
        }
        if let Some(checkpoint) = self.checkpoint.take() {
            let plan = serde_json::to_value(self.machine.plan())?;
            store::tasks::update_progress(
                &mut tx,
                self.task_id(),
                self.machine.iteration(),
                &plan,
                &checkpoint,
            )
            .await?;
        }
        self.log.store(&mut tx).await?;
        tx.commit().await?;
        self.log
            .publish(&self.deps.publisher, &self.deps.names.events_exchange)
            .await;
        Ok(())
    }

    fn drain_machine_events(&mut self) -> Vec<crate::core::machine::RecursionRecord> {
        let mut records = Vec::new();
        for event in self.machine.take_events() {
            self.log.push_domain(&event);
            if let DomainEvent::RecursionCompleted(record) = event {
                records.push(record);
            }
        }
        records
    }

    /// Commits the outcome: the last recursion, the terminal row and the terminal event.
    async fn finish(&mut self, outcome: &Outcome) -> anyhow::Result<()> {
        let records = self.drain_machine_events();
        self.log.push_outcome(outcome);
        let plan = serde_json::to_value(self.machine.plan())?;
        let mut tx = self.deps.pool.begin().await?;
        for record in &records {
            store::trace::insert_recursion(&mut tx, self.task_id(), record).await?;
        }
        let end = terminal_fields(outcome);
        store::tasks::update_progress(
            &mut tx,
            self.task_id(),
            self.machine.iteration(),
            &plan,
            &Value::Null,
        )
        .await?;
        store::tasks::finish(&mut tx, self.task_id(), end).await?;
        self.log.store(&mut tx).await?;
        tx.commit().await?;
        self.log
            .publish(&self.deps.publisher, &self.deps.names.events_exchange)
            .await;
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
