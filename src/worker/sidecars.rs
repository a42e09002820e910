//! The operations side of a worker process, started beside the consume loop and stopped
//! with it: the metrics / health listener (`[metrics]`), the periodic retention prune
//! (`[retention]`), both off unless configured, and the upkeep of the trace tables'
//! partitions (`[partitions]`, on by default).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::deps::WorkerDeps;
use crate::config::{RetentionSettings, Settings};
use crate::metrics::server::{self, Readiness};
use crate::store::prune::{self, PruneRequest};

/// The running sidecars; dropping this stops them.
pub struct Sidecars {
    /// Where `/metrics` is served, when it is.
    pub metrics_addr: Option<SocketAddr>,
    _stop: DropGuard,
}

/// Starts what `settings` enables. Fails when the metrics address cannot be bound.
pub async fn start(
    settings: &Settings,
    deps: &WorkerDeps,
    shutdown: &CancellationToken,
) -> anyhow::Result<Sidecars> {
    let stop = shutdown.child_token();
    let metrics_addr = match settings.metrics.address()? {
        Some(addr) => {
            let readiness = Readiness {
                pool: deps.fleet.pool.clone(),
                broker: Arc::clone(deps.fleet.publisher.broker()),
            };
            let (bound, _task) = server::spawn(addr, readiness, stop.clone()).await?;
            // The MCP servers connected before the recorder existed: report them now.
            deps.tools.report_status();
            Some(bound)
        }
        None => None,
    };
    if settings.retention.interval_secs > 0 {
        tokio::spawn(retention_loop(
            deps.fleet.pool.clone(),
            settings.retention.clone(),
            stop.clone(),
        ));
    }
    if let Some(every) = settings.partitions.every() {
        let layout = settings.partitions.layout()?;
        let keep =
            crate::store::partitions::keep(deps.fleet.pool.clone(), layout, every, stop.clone());
        tokio::spawn(keep);
    }
    Ok(Sidecars {
        metrics_addr,
        _stop: stop.drop_guard(),
    })
}

/// Prunes every `interval_secs` until `stop` fires.
async fn retention_loop(pool: PgPool, retention: RetentionSettings, stop: CancellationToken) {
    let age = match prune::parse_age(&retention.older_than) {
        Ok(age) => age,
        Err(err) => {
            tracing::error!(error = %err, "retention.older_than is invalid; periodic prune off");
            return;
        }
    };
    let interval = Duration::from_secs(retention.interval_secs);
    tracing::info!(every_secs = retention.interval_secs, older_than = %retention.older_than,
        statuses = ?retention.statuses, "periodic prune on");
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let request =
            PruneRequest::older_than(age, retention.statuses.clone(), retention.batch_size);
        let started = Instant::now();
        let pruned = tokio::select! {
            () = stop.cancelled() => return,
            pruned = prune::prune(&pool, &request) => pruned,
        };
        match pruned {
            Ok(counts) => {
                crate::metrics::observe_prune(counts.tasks, started.elapsed());
                tracing::info!(
                    tasks = counts.tasks,
                    recursions = counts.recursions,
                    tool_calls = counts.tool_calls,
                    llm_calls = counts.llm_calls,
                    events = counts.events,
                    whole_ranges = counts.partitions,
                    "pruned old ended tasks"
                );
            }
            Err(err) => tracing::warn!(error = %err, "periodic prune failed; retrying next time"),
        }
    }
}
