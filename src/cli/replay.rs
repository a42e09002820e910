//! `agentd replay --status failed [--reason llm_error] [--since 2h] [--rate 5/s]
//! [--dry-run]` (CONTRACT §10): re-enqueues ended tasks as new tasks (input, agent,
//! conversation, constraints and budget copied; `forked_from_task_id` = the original,
//! `forked_from_iteration` = 0), at most `--rate` per second, oldest end first. A task
//! replayed before is skipped unless `--again`. `--dry-run` prints what it would replay and
//! creates nothing. With `database.read_url` the selection reads the read replica.

use std::process::ExitCode;

use super::out::{errln, outln};
use std::time::Duration;

use uuid::Uuid;

use crate::amqp;
use crate::config::Settings;
use crate::contract::TaskMessage;
use crate::store::readers::Readers;
use crate::store::{self, prune, replay};

/// The arguments of `agentd replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The ended status of the tasks to replay: completed, failed, cancelled or rejected.
    #[arg(long)]
    pub status: String,
    /// Only tasks that failed for this reason (llm_error, max_iteration, budget, ...).
    #[arg(long)]
    pub reason: Option<String>,
    /// Only tasks that ended within this age: a whole number and s, m, h, d or w (2h, 1d).
    #[arg(long, value_name = "AGE")]
    pub since: Option<String>,
    /// At most this many new tasks per second (`5/s`, `5`, or `300/m`).
    #[arg(long, default_value = "5/s")]
    pub rate: String,
    /// At most this many tasks.
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
    /// Also replay tasks that were replayed before.
    #[arg(long)]
    pub again: bool,
    /// Print the task ids it would replay and create nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Reads a rate: `N`, `N/s` or `N/m` (new tasks per second or minute).
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let text = text.trim();
    let (number, per) = match text.split_once('/') {
        Some((number, unit)) => (number, unit.trim()),
        None => (text, "s"),
    };
    let count: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a rate such as 5/s or 300/m"))?;
    let seconds = match per {
        "s" => 1.0,
        "m" => 60.0,
        other => return Err(format!("'{text}': unknown unit '{other}' (use s or m)")),
    };
    let rate = count / seconds;
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(format!("'{text}' must be a positive rate"))
    }
}

/// Runs the replay (or the dry run); prints one line per task: `original -> new`.
pub async fn run(settings: &Settings, args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    prune::check_statuses(std::slice::from_ref(&args.status))
        .map_err(|e| anyhow::anyhow!("--status {e}"))?;
    let rate = parse_rate(&args.rate).map_err(|e| anyhow::anyhow!("--rate {e}"))?;
    anyhow::ensure!(args.limit > 0, "--limit must be > 0");
    let since = match &args.since {
        Some(age) => {
            let age = prune::parse_age(age).map_err(|e| anyhow::anyhow!("--since {e}"))?;
            Some(chrono::Utc::now() - age)
        }
        None => None,
    };
    let pool = store::connect(&settings.database.url, 2).await?;
    let readers = Readers::new(pool.clone(), &settings.database, 2)?;
    let selection = replay::Selection {
        status: &args.status,
        reason: args.reason.as_deref(),
        since,
        again: args.again,
        limit: args.limit,
    };
    // Selected on the read replica when there is one; what it may not have seen yet (a
    // replay made a moment ago) is checked on the primary before anything is created.
    let selection = &selection;
    let mut originals = (readers)
        .read(|pool| async move { replay::candidates(&pool, selection).await })
        .await?;
    if readers.has_replica() && !args.again {
        let ids: Vec<Uuid> = originals.iter().map(|original| original.task_id).collect();
        let replayed = replay::replayed_already(&pool, &ids).await?;
        originals.retain(|original| !replayed.contains(&original.task_id));
    }
    if args.dry_run {
        for original in &originals {
            outln!("{}", original.task_id)?;
        }
        errln!("would replay {} task(s)", originals.len());
        return Ok(ExitCode::SUCCESS);
    }
    let publisher = amqp::connect_declared(settings).await?;
    let pause = Duration::from_secs_f64(1.0 / rate);
    let mut next = tokio::time::Instant::now();
    for original in &originals {
        tokio::time::sleep_until(next).await;
        next += pause;
        let task_id = Uuid::now_v7();
        replay::record(&pool, original, task_id).await?;
        let message = TaskMessage {
            task_id: Some(task_id),
            agent_id: original.agent_id,
            input: original.input.clone(),
            conversation_id: original.conversation_id,
            constraints: serde_json::from_value(original.constraints.clone()).unwrap_or_default(),
            stream: original.stream,
            budget: original
                .budget
                .clone()
                .and_then(|budget| serde_json::from_value(budget).ok()),
            agent_version: None,
            channel: None,
            tenant_id: None,
            priority: None,
            rerun: None,
        };
        let body = serde_json::to_vec(&message)?;
        publisher
            .publish_task(&settings.amqp.tasks_queue, &body)
            .await?;
        outln!("{} -> {task_id}", original.task_id)?;
    }
    super::control::close(&publisher).await;
    errln!("replayed {} task(s)", originals.len());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_per_second_or_minute() {
        assert_eq!(parse_rate("5/s"), Ok(5.0));
        assert_eq!(parse_rate("5"), Ok(5.0));
        assert_eq!(parse_rate("300/m"), Ok(5.0));
        assert_eq!(parse_rate(" 0.5/s "), Ok(0.5));
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("-1").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("5/h").is_err());
    }
}
