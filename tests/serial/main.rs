//! Tier `serial`: tests that change or count something process-wide or machine-wide and so
//! must not run beside another test: the broker-wide consumer timeout
//! (`consumer_timeout`), the process's global log subscriber (`json_logs`) and the exact
//! moves of the process's metrics recorder (`metrics`). Each takes [`alone`] first, so the tests
//! of this binary run one at a time; cargo runs test binaries one after another, so no test
//! of another tier runs meanwhile either.
//!
//! A new test goes here when it changes, or counts exactly, what every other test would
//! touch (a broker or server setting, a process-global such as the log subscriber or the
//! metrics recorder); one that restarts RabbitMQ or PostgreSQL goes to `chaos`.
//! `cargo test --test serial [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod consumer_timeout;
mod json_logs;
mod metrics;

/// Held for the whole of each test of this binary: the tests run one at a time even when
/// the harness runs several threads.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ALONE.lock().await
}
