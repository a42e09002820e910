//! `POST /v1/schedules/{id}/trigger` with an `Idempotency-Key` (issue 27): the same key
//! within a day answers the first trigger's fire and task (200) instead of firing twice;
//! another key, or none, fires again; a key a day old fires again; a key that is not 1 to
//! 255 visible ASCII characters is refused with nothing fired. What a key may hold when it
//! comes another way (the library's `trigger_keyed`): any Unicode, NUL included.

use chrono::{TimeDelta, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use uuid::Uuid;

use super::faces::assert_documented;
use super::{create, every, fires, tasks};
use crate::support::gateway::{Gateway, expect_json};
use crate::support::harness::TestEnv;
use agentd::scheduler::fire::Outlet;
use agentd::scheduler::manage;

async fn trigger(gateway: &Gateway, path: &str, key: Option<&str>, status: u16) -> Value {
    let mut request = gateway.post(path).json(&json!({}));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    expect_json(request.send().await, status).await
}

#[tokio::test]
async fn the_same_idempotency_key_within_a_day_triggers_once() {
    let env = TestEnv::without_worker(|_| {}).await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let doc = gateway.get_json("/openapi.json", 200).await;
    let schedule = create(&env, every(agent, "1h", "hourly triage"), Utc::now()).await;
    let id = schedule.schedule_id;
    let path = format!("/v1/schedules/{id}/trigger");

    let first = trigger(&gateway, &path, Some("rerun-2026-11-27"), 202).await;
    let again = trigger(&gateway, &path, Some("rerun-2026-11-27"), 200).await;
    assert_documented(&doc, "Triggered", &again);
    assert_eq!(again, first, "the first trigger's answer, again");
    assert_eq!(tasks(&env, id).await.len(), 1, "fired once");
    assert_eq!(fires(&env, id).await.len(), 1);

    // Another key, and no key, fire again.
    let other = trigger(&gateway, &path, Some("rerun-2"), 202).await;
    assert_ne!(other["task_id"], first["task_id"]);
    let plain = trigger(&gateway, &path, None, 202).await;
    assert_ne!(plain["task_id"], other["task_id"]);
    assert_eq!(tasks(&env, id).await.len(), 3);

    // A key that is blank, too long or not visible ASCII: refused, nothing fired.
    let long = "k".repeat(256);
    for bad in ["", "  ", long.as_str(), "tab\there"] {
        let refused = trigger(&gateway, &path, Some(bad), 422).await;
        assert_eq!(refused["error"]["code"], "invalid_parameter", "{bad:?}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Idempotency-Key")),
            "{refused}"
        );
    }
    assert_eq!(tasks(&env, id).await.len(), 3);
    // An unknown schedule is still a 404 with a key.
    let missing = format!("/v1/schedules/{}/trigger", Uuid::now_v7());
    trigger(&gateway, &missing, Some("rerun-2026-11-27"), 404).await;

    // A day later the same key fires again (a clock the test sets).
    let outlet = Outlet {
        publisher: &env.publisher,
        tasks_queue: &env.settings.amqp.tasks_queue,
    };
    let t0 = Utc::now() + TimeDelta::hours(1);
    let keyed = |at| manage::trigger_keyed(&env.pool, outlet, id, at, Some("daily"));
    let day_one = keyed(t0).await.expect("trigger");
    assert!(!day_one.repeated);
    let later = keyed(t0 + TimeDelta::hours(23)).await.expect("trigger");
    assert_eq!((later.repeated, later.fire), (true, day_one.fire));
    let next_day = keyed(t0 + TimeDelta::hours(25)).await.expect("trigger");
    assert!(!next_day.repeated);
    assert_ne!(next_day.fire.task_id, day_one.fire.task_id);
    assert_eq!(tasks(&env, id).await.len(), 5);
    gateway.stop().await;
    env.stop().await;
}

/// An Idempotency-Key given to the library may hold any Unicode, NUL included: stored (NUL
/// as U+FFFD), it finds its trigger again.
#[test]
fn any_unicode_in_a_trigger_key_finds_its_trigger() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let env = runtime.block_on(TestEnv::without_worker(|_| {}));
    let agent = runtime.block_on(env.agent(None, None));
    let draft = every(agent, "1h", "keyed");
    let schedule = runtime.block_on(create(&env, draft, Utc::now()));
    let id = schedule.schedule_id;
    let key = proptest::collection::vec(
        prop_oneof![
            Just("\u{0}".to_owned()),
            any::<char>().prop_map(String::from),
            "[a-z ]{1,6}"
        ],
        1..12,
    )
    .prop_map(|pieces| pieces.concat());
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let outlet = Outlet {
        publisher: &env.publisher,
        tasks_queue: &env.settings.amqp.tasks_queue,
    };
    let at = std::cell::Cell::new(Utc::now());
    let result = runner.run(&key, |key| {
        // Each case at its own time: one trigger per millisecond makes one fire.
        at.set(at.get() + TimeDelta::seconds(1));
        let now = at.get();
        runtime.block_on(async {
            let first = manage::trigger_keyed(&env.pool, outlet, id, now, Some(&key))
                .await
                .expect("trigger");
            let later = now + TimeDelta::milliseconds(10);
            let again = manage::trigger_keyed(&env.pool, outlet, id, later, Some(&key))
                .await
                .expect("trigger again");
            prop_assert!(again.repeated, "{key:?} fired twice");
            prop_assert_eq!(again.fire, first.fire);
            Ok(())
        })
    });
    runtime.block_on(env.stop());
    result.expect("every key finds its trigger");
}
