//! What the scheduler of a running worker records when a fire cannot simply run: `skip`
//! while the previous run waits for a person's approval (`skipped_overlap`, no second
//! task), and fires missed while no worker ran (set in the past with SQL, as an outage
//! leaves them): `latest` runs one and records the rest `skipped_missed`, `none` runs none
//! of the missed ones, `all` runs each.

use crate::support::harness::TestEnv;
use crate::support::words;
use agentd::core::approval::{Decision, DecisionKind};
use agentd::lifecycle::approvals::decide;
use agentd::lifecycle::unheld::Sink;
use agentd::scripted_model::{answer_reply, call_tool_reply};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::json;
use uuid::Uuid;

use super::{create, every, tasks, wait_fires, wait_tasks_ended};

#[tokio::test]
async fn skip_records_skipped_overlap_while_the_run_waits_for_approval() {
    let env = TestEnv::start_with(|s| s.schedules.tick_ms = 200).await;
    let agent = env.agent(None, None).await;
    sqlx::query("UPDATE agents SET approval_tools = ARRAY['calculate'] WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("gate calculate");
    let marker = "sched-approval";
    let calc = call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]);
    env.fake.script(
        marker,
        vec![calc, answer_reply("42"), answer_reply("again")],
    );
    let schedule = create(&env, every(agent, "1s", marker), Utc::now()).await;
    let id = schedule.schedule_id;

    // The first fire's task calls the gated tool and waits; later fires are skipped.
    let first = wait_fires(&env, id, "a task", |f| f.iter().any(|x| x.2.is_some())).await;
    let task_id = first.iter().find_map(|f| f.2).expect("a task");
    env.wait_status(task_id, "waiting").await;
    let skipped = |f: &[(DateTime<Utc>, String, Option<Uuid>)]| {
        f.iter().filter(|x| x.1 == "skipped_overlap").count() >= 2
    };
    let fires = wait_fires(&env, id, "two skipped_overlap fires", skipped).await;
    assert_eq!(tasks(&env, id).await.len(), 1, "{fires:?}");
    for (_, decision, task) in &fires {
        let expected = if task.is_some() {
            "enqueued"
        } else {
            "skipped_overlap"
        };
        assert_eq!(decision, expected, "{fires:?}");
    }

    // Approved, the run ends; the next fire runs again.
    let sink = Sink {
        pool: &env.pool,
        publisher: &env.publisher,
        exchange: &env.settings.amqp.events_exchange,
    };
    let approve = Decision {
        kind: DecisionKind::Approve,
        arguments: None,
        result: None,
        reason: None,
        by: Some("test".into()),
    };
    decide(
        sink,
        &env.settings.amqp.tasks_queue,
        task_id,
        "call_1",
        &approve,
    )
    .await
    .expect("decide");
    let done = env.wait_terminal(task_id).await;
    assert_eq!(done.status, "completed", "{:?}", done.error);
    wait_fires(&env, id, "a second task", |f| {
        f.iter().filter(|x| x.2.is_some()).count() == 2
    })
    .await;
    sqlx::query("UPDATE schedules SET paused = true, next_fire_at = NULL WHERE schedule_id = $1")
        .bind(id)
        .execute(&env.pool)
        .await
        .expect("pause");
    wait_tasks_ended(&env, id).await;
    env.stop().await;
}

/// Sets the schedule's next fire `missed` ago, aligned to its interval, as if no worker
/// had run since.
async fn missed_since(env: &TestEnv, id: Uuid, missed: TimeDelta, interval: TimeDelta) {
    let since = (Utc::now() - missed)
        .duration_trunc(interval)
        .expect("trunc");
    sqlx::query("UPDATE schedules SET next_fire_at = $2 WHERE schedule_id = $1")
        .bind(id)
        .bind(since)
        .execute(&env.pool)
        .await
        .expect("next_fire_at in the past");
}

/// `(fire_at, decision, decided_at)` of the first batch the scheduler decided.
async fn first_batch(env: &TestEnv, id: Uuid) -> Vec<(DateTime<Utc>, String, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT fire_at, decision, decided_at FROM schedule_fires WHERE schedule_id = $1 \
           AND decided_at = (SELECT min(decided_at) FROM schedule_fires WHERE schedule_id = $1) \
         ORDER BY fire_at",
    )
    .bind(id)
    .fetch_all(&env.pool)
    .await
    .expect("the first batch")
}

#[tokio::test]
async fn after_every_worker_was_down_latest_runs_one_none_none_and_all_each() {
    let llm = words::start().await;
    let base_url = llm.base_url();
    let mut env = TestEnv::without_worker(move |s| s.llm.base_url = base_url).await;
    let agent = env.agent(None, None).await;
    let interval = TimeDelta::minutes(10);
    let mut ids = Vec::new();
    for catch_up in ["latest", "none", "all"] {
        let mut draft = every(agent, "10m", &format!("catch-up {catch_up} steps=0"));
        draft.catch_up = Some(catch_up.into());
        draft.overlap = Some("allow".into());
        let schedule = create(&env, draft, Utc::now()).await;
        // 45 to 55 minutes of fires were missed while no worker ran (all of them within
        // the default catch-up window of an hour).
        missed_since(&env, schedule.schedule_id, TimeDelta::minutes(45), interval).await;
        ids.push(schedule.schedule_id);
    }
    env.spawn_worker();
    for id in &ids {
        wait_fires(&env, *id, "the missed fires decided", |f| f.len() >= 5).await;
    }
    let grace = TimeDelta::seconds(i64::from(env.settings.schedules.on_time_grace_secs));
    let missed = |fire: &(DateTime<Utc>, String, DateTime<Utc>)| fire.2 - fire.0 > grace;

    let latest = first_batch(&env, ids[0]).await;
    assert!(latest.len() >= 5, "{latest:?}");
    let (last, rest) = latest.split_last().expect("fires");
    assert_eq!(
        last.1, "enqueued",
        "latest runs the latest fire: {latest:?}"
    );
    assert!(rest.iter().all(|f| f.1 == "skipped_missed"), "{latest:?}");
    assert_eq!(tasks(&env, ids[0]).await.len(), 1, "one run for the outage");

    let none = first_batch(&env, ids[1]).await;
    for fire in &none {
        let expected = if missed(fire) {
            "skipped_missed"
        } else {
            "enqueued"
        };
        assert_eq!(fire.1, expected, "none: {none:?}");
    }
    assert!(none.iter().filter(|f| missed(f)).count() >= 4, "{none:?}");

    let all = first_batch(&env, ids[2]).await;
    assert!(
        all.len() >= 5 && all.iter().all(|f| f.1 == "enqueued"),
        "all: {all:?}"
    );
    assert_eq!(tasks(&env, ids[2]).await.len(), all.len());

    for id in &ids {
        wait_tasks_ended(&env, *id).await;
        for (task_id, _, status) in tasks(&env, *id).await {
            assert_eq!(status, "completed", "{task_id}");
        }
    }
    env.stop().await;
}
