//! A task whose step PostgreSQL refused for good ([`StepRefused`]: a constraint, a value it
//! cannot store, a cardinality violation). Writing the step again would fail again, and
//! running the task again from its checkpoint would ask the LLM again for recursions it has
//! answered, until the delivery limit. So the task ends here, at once: `failed`, reason
//! `internal`, its error naming what could not be stored, with `task.failed` after the
//! events that were stored (the refused step's never were, so the stream stays gapless);
//! its message is then acknowledged like any other end.

use std::time::Duration;

use chrono::Utc;

use super::task_run::{RunEnd, TaskRun};
use crate::contract::events::{EventData, TaskFailed};
use crate::core::limits::trim_text;
use crate::core::machine::{FailReason, Outcome};
use crate::core::storable;
use crate::lifecycle::unheld::{self, Sink};
use crate::store::{self, step::StepRefused, tasks::status, unheld::Ending};

/// The task's error is cut to this many characters (the database's message may be long).
const MAX_ERROR_CHARS: usize = 2_000;

/// Tries to record the end through a database outage this many times (about 30 s).
const END_ATTEMPTS: usize = 10;

/// The refusal in `err`'s chain, if the run ended because a step was refused.
pub(super) fn refusal(err: &anyhow::Error) -> Option<&StepRefused> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<StepRefused>())
}

impl TaskRun<'_> {
    /// Ends the task `failed` (reason `internal`) because `refused` could not be stored.
    /// `Released` when the task was no longer this worker's to end.
    pub(super) async fn end_refused(&mut self, refused: &StepRefused) -> anyhow::Result<RunEnd> {
        let error = trim_text(&storable::text(&refused.to_string()), MAX_ERROR_CHARS);
        tracing::error!(%error, "a step was refused by the database; the task fails");
        let outcome = self.machine.fail_internal(&error, Utc::now());
        // The end is written on its own: what the machine did since its last stored step
        // is lost with the refused step.
        self.machine.take_events();
        let partial = match &outcome {
            Outcome::Failed { partial, .. } => partial.clone(),
            _ => None,
        };
        let mut delays = store::transient::delays().take(END_ATTEMPTS);
        loop {
            match self.record_refused_end(&error, partial.clone()).await {
                Ok(true) => return Ok(RunEnd::Finished(outcome)),
                Ok(false) => return Ok(RunEnd::Released),
                Err(err) if store::transient::is_transient(&err) => {
                    let Some(delay) = delays.next() else {
                        return Err(err);
                    };
                    tracing::warn!(error = %format!("{err:#}"), "could not record the end yet");
                    tokio::time::sleep(delay.min(Duration::from_secs(5))).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// The end and its `task.failed`, in one transaction, then published with whatever
    /// stored events were not confirmed. False when another worker holds the task now or it
    /// ended already.
    async fn record_refused_end(
        &self,
        error: &str,
        partial: Option<String>,
    ) -> anyhow::Result<bool> {
        let reason = FailReason::Internal;
        let ending = Ending {
            status: status::FAILED,
            fail_reason: Some(reason.as_str()),
            error: Some(error),
        };
        let (sink, task_id) = (Sink::of(&self.deps.fleet), self.task_id());
        let mut tx = sink.pool.begin().await?;
        let owner = Some(self.deps.fleet.worker_id);
        let Some(ended) = store::unheld::end_unheld(&mut tx, task_id, owner, ending).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        let iterations = u32::try_from(ended.iterations).unwrap_or(0);
        let failed = TaskFailed {
            reason,
            error: error.to_owned(),
            iterations,
            partial,
            divergence: None,
        };
        let data = vec![EventData::TaskFailed(failed)];
        unheld::store_events(sink, tx, task_id, ended.agent_id, iterations, data).await?;
        Ok(true)
    }
}
