//! Drives one claimed task through the core machine: asks the machine what to do next
//! (`Continue`, `CallLlm`, `RunTools`, `Wait`, `Finished`), does it through the ports
//! (`llm_call`, `tool_calls`), feeds the result back, and commits each step as it goes
//! (`task_run`). A task resumed from a checkpoint continues where it was: between
//! recursions, or with the tool calls of a recursion whose reply was committed.

use chrono::Utc;
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::llm_call::LlmEnd::{Done, Parted, TimedOut};
use super::task_run::{RunEnd, TaskRun, ToolsEnd};
use crate::contract::events::{EventData, InputInjected};
use crate::core::machine::{Next, WaitReason};
use crate::lifecycle::interrupt::Interrupt;

impl TaskRun<'_> {
    /// Runs recursions until the task reaches an outcome or is interrupted. A step the
    /// database refused for good ends the task `failed` (see [`super::unstored`]).
    pub async fn drive(&mut self) -> anyhow::Result<RunEnd> {
        let end = self.run().await;
        if let Some(step) = self.in_flight.take() {
            // An error ended the run with a step still committing: stop its outage retries
            // and let it end before the task is handed back, so nothing writes behind us.
            self.stops.release.cancel();
            let _ = step.finish().await;
        }
        if let Err(err) = &end
            && let Some(refused) = super::unstored::refusal(err)
        {
            return self.end_refused(refused).await;
        }
        end
    }

    async fn run(&mut self) -> anyhow::Result<RunEnd> {
        // Fresh or between recursions: Continue; resumed with its tool calls pending:
        // RunTools, whose ledger says which already ran.
        let mut next = self.machine.resume(Utc::now(), &self.template);
        let mut resumed_tools = matches!(next, Next::RunTools(_));
        let mut deadline = Instant::now() + self.deps.recursion_timeout;
        loop {
            if let Some(interrupt) = self.stops.current() {
                return self.interrupted(interrupt).await;
            }
            if matches!(next, Next::Continue) {
                self.take_guidance();
            }
            next = match next {
                Next::Continue if self.stops.pause.is_cancelled() => {
                    // A pause stops the task before its next LLM call.
                    self.machine.wait(WaitReason::Paused, Utc::now())
                }
                Next::Continue => {
                    self.checkpoint = Some(serde_json::to_string(&self.machine)?);
                    deadline = Instant::now() + self.deps.recursion_timeout;
                    let trace_id = Uuid::now_v7();
                    self.machine
                        .begin_recursion(trace_id, Utc::now(), &self.template)
                }
                Next::CallLlm(call) => {
                    // The commit of the step so far overlaps the LLM call.
                    self.commit_step().await?;
                    let span = tracing::info_span!(
                        "recursion",
                        trace_id = %call.trace_id,
                        iteration = call.iteration
                    );
                    // A rate-limit wait moves the deadline on (see `llm_call`).
                    match self.call_llm(&call, &mut deadline).instrument(span).await? {
                        Ok(TimedOut) => self.recursion_timed_out("waiting for the LLM"),
                        Ok(Done(Ok(reply))) => self.machine.on_llm_reply(&reply, Utc::now()),
                        Ok(Done(Err(error))) => self.machine.on_llm_failure(&error, Utc::now()),
                        Ok(Parted(reason, divergence)) => {
                            tracing::info!(?divergence, "rerun parted from its source");
                            self.machine
                                .on_rerun_parted(reason, &divergence, Utc::now())
                        }
                        Err(interrupt) => return self.interrupted(interrupt).await,
                    }
                }
                Next::RunTools(calls) => {
                    let span = tracing::info_span!(
                        "recursion",
                        trace_id = %self.machine.current_trace_id().unwrap_or_default(),
                        iteration = self.machine.iteration()
                    );
                    let resumed = std::mem::take(&mut resumed_tools);
                    let run = self.run_tools(&calls, deadline, resumed).instrument(span);
                    match run.await? {
                        ToolsEnd::Results(results) => {
                            self.machine.on_tool_results(results, Utc::now())
                        }
                        ToolsEnd::Interrupted(interrupt) => {
                            return self.interrupted(interrupt).await;
                        }
                        // Gated calls wait for a decision: committed `waiting`.
                        ToolsEnd::AwaitingApproval(ids) => {
                            self.commit_wait(WaitReason::Approval, ids).await?;
                            return Ok(RunEnd::Waiting);
                        }
                        // Unknown outcomes held for a person (CONTRACT §14).
                        ToolsEnd::AwaitingResolution(ids) => {
                            self.commit_wait(WaitReason::UnknownOutcome, ids).await?;
                            return Ok(RunEnd::Waiting);
                        }
                        // Delegated calls wait for their children: committed `waiting`,
                        // then the children are recorded and enqueued.
                        ToolsEnd::AwaitingChildren(pending) => {
                            let budget = self
                                .machine
                                .budget_for_child(Utc::now())
                                .and_then(|b| serde_json::to_value(b).ok());
                            self.commit_wait(WaitReason::Child, Vec::new()).await?;
                            let (deps, task_id) = (self.deps, self.task_id());
                            crate::lifecycle::delegation::spawn_children(
                                &deps.fleet,
                                task_id,
                                &pending,
                                self.stream,
                                budget,
                            )
                            .await?;
                            return Ok(RunEnd::Waiting);
                        }
                    }
                }
                Next::Wait(reason) => {
                    self.commit_wait(reason, Vec::new()).await?;
                    return Ok(RunEnd::Waiting);
                }
                Next::Finished(outcome) => {
                    self.commit_end(&outcome).await?;
                    return Ok(RunEnd::Finished(outcome));
                }
            };
        }
    }

    /// Guidance injected since the last recursion: into the machine (every later snapshot
    /// shows it) with its `input.injected` event.
    fn take_guidance(&mut self) {
        for text in self.stops.take_guidance() {
            self.machine.add_guidance(&text);
            let injected = InputInjected { text };
            let iteration = Some(self.machine.iteration());
            self.log
                .push(None, iteration, EventData::InputInjected(injected));
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
                self.commit_end(&outcome).await?;
                Ok(RunEnd::Finished(outcome))
            }
            Interrupt::Released => {
                // The task resumes elsewhere from whatever was committed; a step cut short
                // by the release (or a lost lease) needs no more than logging.
                if let Err(err) = self.settle().await {
                    tracing::debug!(error = %format!("{err:#}"), "step not committed at release");
                }
                Ok(RunEnd::Released)
            }
        }
    }
}
