//! Removes the tombstones of cancels for task ids that no message brought
//! (`store::steering`): every worker looks now and then, so a flood of cancels for made-up
//! ids leaves nothing behind after `control.tombstone_secs`.

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::steering::remove_tombstones;

/// Tombstones removed per statement.
const BATCH: i64 = 500;

/// How often a worker looks: a quarter of the lifetime, between one second and a minute.
pub fn period(tombstone_secs: u64) -> Duration {
    Duration::from_secs((tombstone_secs / 4).clamp(1, 60))
}

/// Removes old tombstones every [`period`] until `stop`.
pub fn spawn_sweep(pool: PgPool, tombstone_secs: u64, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let older_than = tombstone_secs as f64;
        let pass = || async {
            loop {
                let removed = remove_tombstones(&pool, older_than, BATCH).await?;
                if removed > 0 {
                    tracing::info!(
                        removed,
                        "removed the tombstones of cancels no task came for"
                    );
                }
                if removed < BATCH as u64 {
                    return Ok(());
                }
            }
        };
        super::super::sweep::every(period(tombstone_secs), &stop, "the tombstone sweep", pass)
            .await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_runs_four_times_per_lifetime_within_bounds() {
        assert_eq!(period(1), Duration::from_secs(1));
        assert_eq!(period(20), Duration::from_secs(5));
        assert_eq!(period(86_400), Duration::from_secs(60));
    }
}
