//! Any Unicode, NUL included, in what an evaluation run stores from outside (its name, the
//! operator's condition kept in `selector`): stored with NUL as U+FFFD, read back so.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use uuid::Uuid;

use crate::support::harness::TestEnv;
use agentd::core::storable;
use agentd::store::evals::{self, NewRun};

#[test]
fn any_unicode_in_a_run_s_name_and_condition_is_stored() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let env = runtime.block_on(TestEnv::without_worker(|_| {}));
    let text = proptest::collection::vec(
        prop_oneof![
            Just("\u{0}".to_owned()),
            Just("\\u0000".to_owned()),
            any::<char>().prop_map(String::from),
            "[a-z ]{0,6}"
        ],
        0..12,
    )
    .prop_map(|pieces| pieces.concat());
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let result = runner.run(&(text.clone(), text), |(name, condition)| {
        runtime.block_on(async {
            // As `agentd eval run` and the gateway hand them over.
            let run = NewRun {
                eval_run_id: Uuid::now_v7(),
                name: Some(storable::owned(name.clone())),
                agent_id: Uuid::now_v7(),
                agent_version: None,
                channel: None,
                selector: json!({"where": storable::text(&condition), "limit": 1}),
                llm_mode: "live".into(),
                tools_mode: "recorded".into(),
                rate: 1.0,
                tenant_id: "default".into(),
            };
            let source = Uuid::now_v7();
            evals::create(&env.pool, &run, &[source])
                .await
                .expect("create");
            let row = evals::get(&env.pool, run.eval_run_id)
                .await
                .unwrap()
                .unwrap();
            prop_assert_eq!(row.name, Some(storable::owned(name)));
            let stored = storable::text(&condition);
            prop_assert_eq!(row.selector["where"].as_str(), Some(stored.as_ref()));
            let items = evals::items(&env.pool, run.eval_run_id).await.unwrap();
            prop_assert_eq!(items.len(), 1);
            prop_assert_eq!(items[0].source_task_id, source);
            Ok(())
        })
    });
    runtime.block_on(env.stop());
    result.expect("every run stored");
}
