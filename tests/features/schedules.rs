//! Schedules and task listing (CONTRACT v3 §14): the fleet's one scheduler with the real
//! `agentd worker` binary killed under it, the fire decisions the driver records (overlap
//! while a run waits for approval, catch-up after every worker was down, buffer_one, the
//! daily cap, a DST change driven through `scheduler::tick` with a clock the test sets),
//! the gateway's `/v1/schedules` and `/v1/tasks` (a trigger's Idempotency-Key), the page's
//! data, and the CLI's answers.

mod clock;
mod faces;
mod fleet;
mod listing;
mod overlap;
mod trigger_keys;

use std::time::Duration;

use crate::support::harness::TestEnv;
use crate::support::wait;
use agentd::scheduler::manage;
use agentd::scheduler::spec::Draft;
use agentd::store::schedules::ScheduleRow;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Longest a bounded wait in these tests takes before it fails: a tick is a second, a
/// hand-over a tick or two, on a loaded machine several.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Every task the fires made has ended: each is a few scripted recursions, queued behind
/// the others on the fleet's workers.
const TASKS_END_WITHIN: Duration = Duration::from_secs(60);

/// A draft for `agent`: every `every` (e.g. `2s`), with `input`.
pub(crate) fn every(agent: Uuid, every: &str, input: &str) -> Draft {
    Draft {
        agent_id: agent,
        every: Some(every.to_owned()),
        input: input.to_owned(),
        ..Draft::default()
    }
}

/// Creates `draft` as the CLI and the gateway do, at `now`.
pub(crate) async fn create(env: &TestEnv, draft: Draft, now: DateTime<Utc>) -> ScheduleRow {
    manage::create(&env.pool, &env.settings, draft, now)
        .await
        .expect("the schedule is created")
}

/// `(fire_at, decision, task_id)` of every fire of the schedule, oldest first.
pub(crate) async fn fires(
    env: &TestEnv,
    schedule_id: Uuid,
) -> Vec<(DateTime<Utc>, String, Option<Uuid>)> {
    sqlx::query_as(
        "SELECT fire_at, decision, task_id FROM schedule_fires WHERE schedule_id = $1 \
         ORDER BY fire_at",
    )
    .bind(schedule_id)
    .fetch_all(&env.pool)
    .await
    .expect("schedule_fires")
}

/// `(task_id, fire_at, status)` of every task of the schedule, by fire time.
pub(crate) async fn tasks(
    env: &TestEnv,
    schedule_id: Uuid,
) -> Vec<(Uuid, Option<DateTime<Utc>>, String)> {
    sqlx::query_as(
        "SELECT task_id, fire_at, status FROM tasks WHERE schedule_id = $1 ORDER BY fire_at",
    )
    .bind(schedule_id)
    .fetch_all(&env.pool)
    .await
    .expect("tasks")
}

/// Waits (at most [`WAIT`]) until `ready` holds for the schedule's fires; returns them.
pub(crate) async fn wait_fires<F>(
    env: &TestEnv,
    schedule_id: Uuid,
    what: &str,
    ready: F,
) -> Vec<(DateTime<Utc>, String, Option<Uuid>)>
where
    F: Fn(&[(DateTime<Utc>, String, Option<Uuid>)]) -> bool,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let fires = fires(env, schedule_id).await;
        if ready(&fires) {
            return fires;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}; fires: {fires:?}"
        );
        tokio::time::sleep(wait::POLL).await;
    }
}

/// Waits until every task of the schedule has ended.
pub(crate) async fn wait_tasks_ended(env: &TestEnv, schedule_id: Uuid) {
    let what = format!("every task of {schedule_id} ended");
    wait::until_true(what, TASKS_END_WITHIN, || async {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tasks WHERE schedule_id = $1 \
               AND status IN ('pending', 'running', 'waiting')",
        )
        .bind(schedule_id)
        .fetch_one(&env.pool)
        .await
        .expect("count");
        open == 0
    })
    .await;
}

pub(crate) fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("an RFC 3339 time")
        .with_timezone(&Utc)
}
