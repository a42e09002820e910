//! How long the tests wait, and for what. Every bound a test waits within or asserts is a
//! constant here with its reason, so a slower machine is fixed in one place, and [`until`]
//! is the one polling loop: look again every [`POLL`] until the condition holds or the
//! bound runs out, then fail naming what did not happen.
//!
//! The bounds are generous on purpose: the tests run debug builds on a 2-core machine shared
//! with other builds, several tests at once, each with its own workers. A bound that is a
//! promise of the contract (a cancel within a second) is that promise, not a margin.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// How often a wait looks again: a query on the local PostgreSQL or RabbitMQ takes well
/// under a millisecond, so looking often costs nothing and ends the wait soon after the
/// event.
pub const POLL: Duration = Duration::from_millis(10);

/// CONTRACT §2: a cancel ends its task within a second, wherever the task is.
pub const CANCEL_WITHIN: Duration = Duration::from_secs(1);

/// A task of a few scripted recursions runs to its end (in-process worker or the binary).
pub const TASK_ENDS_WITHIN: Duration = Duration::from_secs(30);

/// The next thing a running task does happens: the model is asked, a tool starts, a step is
/// committed, a status is reached, a child task appears.
pub const NEXT_STEP_WITHIN: Duration = Duration::from_secs(20);

/// A worker binary just spawned has connected and takes tasks (it declares the topology and
/// runs its migrations check first).
pub const WORKER_READY_WITHIN: Duration = Duration::from_secs(20);

/// A worker stops after SIGTERM or its shutdown token: `worker.shutdown_grace_secs` is 5 s
/// in the tests, plus closing the broker and the pool.
pub const WORKER_STOPS_WITHIN: Duration = Duration::from_secs(15);

/// A rejected message reaches the dead-letter queue.
pub const DEAD_LETTER_WITHIN: Duration = Duration::from_secs(10);

/// A test's queues, exchanges and database are removed after it panicked.
pub const CLEANUP_WITHIN: Duration = Duration::from_secs(20);

/// A request to a listener on 127.0.0.1 (the gateway, `/metrics`) answers.
pub const HTTP_WITHIN: Duration = Duration::from_secs(5);

/// One `agentd` command run as a child process (trace, submit, replay, ...) ends: a fresh
/// process connects to PostgreSQL and RabbitMQ first.
pub const COMMAND_WITHIN: Duration = Duration::from_secs(60);

/// Waits until `check` gives `Some`, looking again every [`POLL`]; panics naming `what`
/// once `within` has passed.
pub async fn until<T, F, Fut>(what: impl Display, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Like [`until`] for a condition without a value.
pub async fn until_true<F, Fut>(what: impl Display, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until(what, within, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await;
}

/// A failure message computed only when a wait fails, e.g. with a worker's log as it is
/// then: `until(Says(|| format!("no progress: {}", worker.log())), ...)`.
pub struct Says<F>(pub F);

impl<F: Fn() -> String> Display for Says<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)())
    }
}
