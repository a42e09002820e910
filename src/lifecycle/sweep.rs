//! The shape every periodic pass beside a worker's consumer shares (the reconciler, the
//! outbox sweep, the conversation and delegation sweeps, the approval expiry): wait a
//! period, run one pass, log a failed pass and try again next period, until shutdown. A
//! shutdown also cuts a pass short: each pass is a database transaction or a series of
//! idempotent steps, so what it did not finish the next worker's pass does.

use std::future::Future;
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::amqp::Publisher;
use crate::outbox;

/// Runs `pass` every `period` until `stop`; `what` names the pass in the log.
pub async fn every<F, Fut>(
    period: Duration,
    stop: &CancellationToken,
    what: &'static str,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let done = tokio::select! {
            () = stop.cancelled() => return,
            done = pass() => done,
        };
        if let Err(err) = done {
            tracing::warn!(error = %format!("{err:#}"), "{what} failed; trying again later");
        }
    }
}

/// The outbox sweep every [`outbox::SWEEP_EVERY`] until `stop`: what a worker stored and
/// nobody confirmed (it died) is published ([`outbox::sweep_once`]).
pub fn spawn_outbox(
    pool: PgPool,
    publisher: Publisher,
    exchange: String,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (pool, publisher, exchange) = (&pool, &publisher, exchange.as_str());
        let pass = move || async move {
            outbox::sweep_once(pool, publisher, exchange).await?;
            Ok(())
        };
        every(outbox::SWEEP_EVERY, &stop, "the outbox sweep", pass).await;
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_every_period_through_failures_until_stopped() {
        let stop = CancellationToken::new();
        let passes = AtomicUsize::new(0);
        let period = Duration::from_secs(1);
        let pass = || async {
            let n = passes.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 3 {
                stop.cancel();
            }
            anyhow::ensure!(n != 1, "the first pass fails");
            Ok(())
        };
        let started = tokio::time::Instant::now();
        every(period, &stop, "the test pass", pass).await;
        assert_eq!(passes.load(Ordering::SeqCst), 3);
        assert_eq!(started.elapsed(), 3 * period);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_cuts_a_running_pass_short() {
        let stop = CancellationToken::new();
        let pass = || async {
            stop.cancel();
            std::future::pending::<()>().await;
            Ok(())
        };
        let run = every(Duration::from_millis(10), &stop, "the test pass", pass);
        let ended = tokio::time::timeout(Duration::from_secs(10), run).await;
        assert!(ended.is_ok(), "the pass kept running after the stop");
    }
}
