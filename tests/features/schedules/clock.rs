//! The scheduler's tick driven with a clock the test sets (`scheduler::tick::tick` with a
//! given `now`, no sleeping, no worker): a daily 02:30 Europe/Berlin schedule across the
//! spring and autumn DST changes, `buffer_one` keeping one fire and releasing it when the
//! previous task ends, and the daily cap.

use crate::support::harness::TestEnv;
use agentd::core::schedule::fire_task_id;
use agentd::scheduler::fire::Outlet;
use agentd::scheduler::spec::Draft;
use agentd::scheduler::tick::{TickReport, tick};
use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use super::{at, create, every, fires, tasks};

/// Ticks at `from`, `from + step`, ... up to `until`, each fire on time within `grace`.
async fn tick_through(
    env: &TestEnv,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    step: TimeDelta,
) -> TickReport {
    let mut conn = env.pool.acquire().await.expect("a connection");
    let outlet = Outlet {
        publisher: &env.publisher,
        tasks_queue: &env.settings.amqp.tasks_queue,
    };
    let mut all = TickReport::default();
    let mut now = from;
    while now <= until {
        let report = tick(&mut conn, outlet, now, step + TimeDelta::minutes(1))
            .await
            .expect("a tick");
        assert_eq!(report.failed, 0, "at {now}");
        all.fires.extend(report.fires);
        now += step;
    }
    all
}

async fn one_tick(env: &TestEnv, now: DateTime<Utc>) -> TickReport {
    tick_through(env, now, now, TimeDelta::minutes(1)).await
}

/// Each fire of the schedule: enqueued, with its own task made for that fire time.
async fn assert_one_task_per_fire(env: &TestEnv, id: Uuid, expected: &[&str]) {
    let fires = fires(env, id).await;
    let times: Vec<DateTime<Utc>> = fires.iter().map(|f| f.0).collect();
    let expected: Vec<DateTime<Utc>> = expected.iter().map(|t| at(t)).collect();
    assert_eq!(times, expected, "{fires:?}");
    for (fire_at, decision, task_id) in &fires {
        assert_eq!(decision, "enqueued");
        assert_eq!(*task_id, Some(fire_task_id(id, *fire_at)));
    }
    let tasks = tasks(env, id).await;
    let task_times: Vec<DateTime<Utc>> = tasks.iter().filter_map(|t| t.1).collect();
    assert_eq!(task_times, expected, "one task per fire");
}

#[tokio::test]
async fn a_daily_0230_berlin_schedule_fires_once_a_day_that_has_a_0230() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let daily = |input: &str| Draft {
        agent_id: agent,
        cron: Some("30 2 * * *".into()),
        timezone: Some("Europe/Berlin".into()),
        overlap: Some("allow".into()),
        input: input.into(),
        ..Draft::default()
    };
    let step = TimeDelta::minutes(10);

    // Spring: on 2026-03-29 the clocks go from 02:00 to 03:00, so there is no 02:30.
    let start = at("2026-03-26T12:00:00Z");
    let spring = create(&env, daily("spring"), start).await;
    assert_eq!(spring.next_fire_at, Some(at("2026-03-27T01:30:00Z")));
    tick_through(&env, start, at("2026-04-01T00:00:00Z"), step).await;
    let spring_fires = [
        "2026-03-27T01:30:00Z", // 02:30 CET
        "2026-03-28T01:30:00Z",
        "2026-03-30T00:30:00Z", // 02:30 CEST
        "2026-03-31T00:30:00Z",
    ];
    assert_one_task_per_fire(&env, spring.schedule_id, &spring_fires).await;

    // Autumn: on 2026-10-25 02:30 comes twice (CEST, then CET); it fires once, the first.
    let start = at("2026-10-22T12:00:00Z");
    let autumn = create(&env, daily("autumn"), start).await;
    tick_through(&env, start, at("2026-10-28T00:00:00Z"), step).await;
    let autumn_fires = [
        "2026-10-23T00:30:00Z",
        "2026-10-24T00:30:00Z",
        "2026-10-25T00:30:00Z", // the first 02:30, still CEST
        "2026-10-26T01:30:00Z", // 02:30 CET
        "2026-10-27T01:30:00Z",
    ];
    assert_one_task_per_fire(&env, autumn.schedule_id, &autumn_fires).await;
    env.stop().await;
}

#[tokio::test]
async fn buffer_one_keeps_one_fire_and_runs_it_when_the_previous_task_ends() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let mut draft = every(agent, "1m", "buffered");
    draft.overlap = Some("buffer_one".into());
    let t0 = at("2026-05-01T12:00:00Z");
    let schedule = create(&env, draft, t0 - TimeDelta::seconds(30)).await;
    let id = schedule.schedule_id;
    // 12:00 runs; 12:01 is kept while its task has not ended; 12:02 is skipped.
    for minute in 0..3 {
        one_tick(
            &env,
            t0 + TimeDelta::minutes(minute) + TimeDelta::seconds(1),
        )
        .await;
    }
    let decided: Vec<(String, bool)> = fires(&env, id)
        .await
        .into_iter()
        .map(|(_, decision, task)| (decision, task.is_some()))
        .collect();
    let expected = [
        ("enqueued", true),
        ("buffered", false),
        ("skipped_overlap", false),
    ];
    let expected: Vec<(String, bool)> = expected.iter().map(|(d, t)| ((*d).into(), *t)).collect();
    assert_eq!(decided, expected);
    // Nothing is due by the clock, and the task still runs: the buffered fire waits.
    let report = one_tick(&env, t0 + TimeDelta::seconds(150)).await;
    assert!(report.fires.is_empty(), "{:?}", report.fires);
    sqlx::query(
        "UPDATE tasks SET status = 'completed', finished_at = now() WHERE schedule_id = $1",
    )
    .bind(id)
    .execute(&env.pool)
    .await
    .expect("the first task ends");
    // The next tick releases it: the 12:01 fire becomes enqueued with its own task.
    let report = one_tick(&env, t0 + TimeDelta::seconds(155)).await;
    let released = at("2026-05-01T12:01:00Z");
    assert_eq!(report.fires.len(), 1, "{:?}", report.fires);
    assert_eq!(report.fires[0].1.fire_at, released);
    let fires = fires(&env, id).await;
    assert_eq!(
        fires[1],
        (
            released,
            "enqueued".into(),
            Some(fire_task_id(id, released))
        )
    );
    let stored = agentd::store::schedules::get(&env.pool, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.buffered_fire_at, None);
    assert_eq!(tasks(&env, id).await.len(), 2);
    env.stop().await;
}

#[tokio::test]
async fn the_daily_cap_records_capped_and_a_trigger_is_never_capped() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let mut draft = every(agent, "1h", "capped");
    draft.overlap = Some("allow".into());
    draft.max_fires_per_day = Some(2);
    let t0 = at("2026-05-01T20:00:00Z");
    let schedule = create(&env, draft, t0 - TimeDelta::seconds(30)).await;
    let id = schedule.schedule_id;
    // 20:00 and 21:00 run, 22:00 and 23:00 are capped; the next UTC day starts over.
    tick_through(&env, t0, t0 + TimeDelta::hours(4), TimeDelta::hours(1)).await;
    let decisions: Vec<String> = fires(&env, id).await.into_iter().map(|f| f.1).collect();
    assert_eq!(
        decisions,
        ["enqueued", "enqueued", "capped", "capped", "enqueued"]
    );
    // A person's trigger runs anyway.
    let outlet = Outlet {
        publisher: &env.publisher,
        tasks_queue: &env.settings.amqp.tasks_queue,
    };
    let now = t0 + TimeDelta::minutes(150);
    let fire = agentd::scheduler::manage::trigger(&env.pool, outlet, id, now)
        .await
        .expect("trigger");
    assert_eq!(fire.decision.as_str(), "triggered");
    assert_eq!(tasks(&env, id).await.len(), 4);
    env.stop().await;
}
