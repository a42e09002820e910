//! A step's commit, run beside the task instead of in its way: the step's rows are written
//! in one statement (retried through a database outage), then its events are published and
//! their confirms awaited. The driver starts it and goes on (the next LLM call overlaps it)
//! and waits for the write only before anything with side effects (tools with effects).
//! Steps chain: each begins by waiting for the one before it, so they commit and publish
//! strictly in order, and the events the previous step could not get confirmed go out
//! first. How far the broker confirmed is kept in [`Confirmed`] and written with the next
//! step, so that a worker taking the task over knows what to publish again.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::committer::Committer;
use super::deps::WorkerDeps;
use crate::outbox::events::{Encoded, Outbound};
use crate::store::{
    self,
    step::{StepRefused, StepWrite},
};

/// The seq up to which a task's events are known confirmed by the broker.
#[derive(Debug, Clone, Default)]
pub struct Confirmed(Arc<AtomicI64>);

impl Confirmed {
    /// Starting from `seq` (what the task's row says).
    pub fn new(seq: i64) -> Self {
        Self(Arc::new(AtomicI64::new(seq)))
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Acquire)
    }

    /// Raises it to `seq` (events are confirmed in order).
    pub fn advance(&self, seq: i64) {
        self.0.fetch_max(seq, Ordering::AcqRel);
    }
}

/// A step being committed in the background.
pub struct StepCommit {
    /// Fires once the write has committed; dropped unfired when it failed.
    written: Option<oneshot::Receiver<()>>,
    /// The whole step: its result is the events left unconfirmed, oldest first.
    done: JoinHandle<anyhow::Result<Vec<Encoded>>>,
}

impl StepCommit {
    /// Starts writing `write` with the fresh events of `outbound`, then publishing them,
    /// once `previous` (the task's step before, if still in flight) is done; the step's
    /// spans, if any, are exported once it committed.
    pub fn start(
        deps: &WorkerDeps,
        release: CancellationToken,
        (mut write, spans): (StepWrite, Option<crate::otel::StepSpans>),
        mut outbound: Outbound,
        previous: Option<StepCommit>,
        confirmed: Confirmed,
    ) -> Self {
        let committer = deps.committer.clone();
        let publisher = deps.fleet.publisher.clone();
        let exchange = deps.fleet.names.events_exchange.clone();
        let (written, on_written) = oneshot::channel();
        let done = tokio::spawn(
            async move {
                if let Some(previous) = previous {
                    outbound.prepend(previous.finish().await?);
                }
                write.confirmed_seq = confirmed.get();
                let outbound = write_through_outages(&committer, &release, write, outbound).await?;
                let _ = written.send(());
                if let Some(spans) = spans {
                    spans.export();
                }
                outbound.observe();
                let delivered = outbound.deliver(&publisher, &exchange).await;
                confirmed.advance(delivered.last_confirmed);
                Ok(delivered.undelivered)
            }
            .in_current_span(),
        );
        Self {
            written: Some(on_written),
            done,
        }
    }

    /// Waits until the step's rows, and so those of every step before it, are committed
    /// (their events may still be on their way).
    /// On failure the step is over: the caller drops it after [`Self::finish`].
    pub async fn written(&mut self) -> bool {
        match self.written.take() {
            Some(written) => written.await.is_ok(),
            None => true,
        }
    }

    /// Waits for the whole step (and those before it); the events left unconfirmed, oldest
    /// first.
    pub async fn finish(self) -> anyhow::Result<Vec<Encoded>> {
        self.done.await?
    }
}

/// Writes the step, retrying with backoff while the database is unreachable (the task
/// pauses), until it works or the task is released. A lost lease is an error. A step the
/// database refuses for good is a [`StepRefused`] error (its task cannot go on), after one
/// more try with every text made storable when the refusal was a NUL that slipped through.
async fn write_through_outages(
    committer: &Committer,
    release: &CancellationToken,
    mut write: StepWrite,
    mut outbound: Outbound,
) -> anyhow::Result<Outbound> {
    let mut delays = store::transient::delays();
    let mut made_storable = false;
    loop {
        let done = committer.commit(write, outbound).await?;
        (write, outbound) = (done.write, done.outbound);
        let err = match done.result {
            Ok(true) => return Ok(outbound),
            Ok(false) => anyhow::bail!("lease lost: another worker has taken this task over"),
            Err(err) => err,
        };
        if !store::transient::sqlx_transient(&err) {
            if !made_storable && store::transient::refuses_nul(&err) {
                made_storable = true;
                if write.make_storable() {
                    tracing::warn!(error = %err,
                        "a step held text PostgreSQL refuses; writing it with NUL replaced");
                    continue;
                }
            }
            return Err(StepRefused::new(&write, err).into());
        }
        let err = anyhow::Error::new(err).context("committing a step");
        let delay = delays.next().unwrap_or_default();
        tracing::warn!(error = %format!("{err:#}"), retry_in_ms = delay.as_millis() as u64,
            "database unavailable; the task waits");
        tokio::select! {
            () = release.cancelled() => return Err(err),
            () = tokio::time::sleep(delay) => {}
        }
    }
}
