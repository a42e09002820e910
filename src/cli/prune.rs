//! `agentd prune --older-than 30d [--status completed,failed] [--dry-run]`: removes tasks
//! that ended long ago with their whole trace (whole partitions where every task of a time
//! range goes, else in short batches), and prints the rows removed per table. Pending and
//! running tasks are never touched.

use std::process::ExitCode;

use super::out::outln;

use crate::config::{RetentionSettings, Settings};
use crate::store::{self, prune};

/// The arguments of `agentd prune`.
#[derive(Debug, Clone, clap::Args)]
pub struct PruneArgs {
    /// Remove tasks that ended longer ago than this: a whole number and s, m, h, d or w
    /// (e.g. 30d, 12h, 2w).
    #[arg(long, value_name = "AGE")]
    pub older_than: String,
    /// Only tasks with these ended statuses, comma-separated (default: completed, failed,
    /// cancelled, rejected).
    #[arg(long = "status", value_name = "STATUS", value_delimiter = ',')]
    pub statuses: Option<Vec<String>>,
    /// Count what would be removed and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Tasks removed per transaction.
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub batch_size: u32,
}

/// Runs the prune (or the dry run) and prints the counts.
pub async fn run(settings: &Settings, args: &PruneArgs) -> anyhow::Result<ExitCode> {
    let age =
        prune::parse_age(&args.older_than).map_err(|e| anyhow::anyhow!("--older-than {e}"))?;
    let statuses = args.statuses.clone().unwrap_or_else(|| {
        prune::ENDED_STATUSES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    });
    prune::check_statuses(&statuses).map_err(|e| anyhow::anyhow!("--status {e}"))?;
    anyhow::ensure!(args.batch_size > 0, "--batch-size must be > 0");
    let pool = store::connect(&settings.database.url, 2).await?;
    let request = prune::PruneRequest::older_than(age, statuses, args.batch_size);
    let counts = if args.dry_run {
        prune::preview(&pool, &request).await?
    } else {
        prune::prune(&pool, &request).await?
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    outln!(
        "{verb} {} task(s) that ended before {} with status {}",
        counts.tasks,
        request
            .finished_before
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        request.statuses.join(", ")
    )?;
    for (table, rows) in counts.rows() {
        outln!("  {table:<12} {rows}")?;
    }
    if counts.partitions > 0 {
        outln!(
            "  ({} time range(s) of the trace tables dropped whole)",
            counts.partitions
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks the `[retention]` section by the rules of `agentd prune` (the worker's periodic
/// prune runs the same prune): an age such as `30d`, ended statuses only, a batch of at
/// least one.
pub fn check_retention(retention: &RetentionSettings) -> anyhow::Result<()> {
    prune::parse_age(&retention.older_than)
        .map_err(|e| anyhow::anyhow!("retention.older_than: {e}"))?;
    prune::check_statuses(&retention.statuses)
        .map_err(|e| anyhow::anyhow!("retention.statuses: {e}"))?;
    anyhow::ensure!(retention.batch_size > 0, "retention.batch_size must be > 0");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_defaults_are_valid_and_refuse_live_statuses() {
        let defaults = RetentionSettings::default();
        assert!(check_retention(&defaults).is_ok());
        assert_eq!(
            defaults.statuses,
            prune::ENDED_STATUSES,
            "every ended status"
        );
        let live = RetentionSettings {
            statuses: vec!["running".to_owned()],
            ..RetentionSettings::default()
        };
        assert!(check_retention(&live).is_err());
        let never = RetentionSettings {
            older_than: "soon".to_owned(),
            ..RetentionSettings::default()
        };
        let error = check_retention(&never).unwrap_err().to_string();
        assert!(error.contains("retention.older_than"), "{error}");
    }
}
