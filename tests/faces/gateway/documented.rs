//! What the gateway answers for a real task (a plan, a tool call returning a number, an
//! answer) validates against the schemas of its own OpenAPI document: schemathesis cannot
//! reach such a task by chance, and these are the answers where the document once drifted
//! (`ToolCall.result` was declared an object, `TaskState.plan` too).

use std::time::Duration;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use jsonschema::{Draft, Registry};
use serde_json::{Value, json};

use super::script_plan_calc_answer;

const DOC: &str = "urn:agentd:openapi";

/// Panics unless `value` validates against `#/components/schemas/{schema}` of `doc`.
fn assert_documented(doc: &Value, schema: &str, value: &Value) {
    let registry = Registry::new()
        .add(DOC, Draft::Draft202012.create_resource(doc.clone()))
        .and_then(|registry| registry.prepare())
        .expect("a registry holding the document");
    let validator = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_registry(&registry)
        .build(&json!({"$ref": format!("{DOC}#/components/schemas/{schema}")}))
        .expect("a validator");
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|error| format!("at {}: {error}", error.instance_path()))
        .collect();
    assert!(problems.is_empty(), "{schema}: {problems:#?}\n{value:#}");
}

#[tokio::test]
async fn a_real_task_is_answered_as_documented() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let marker = "gw-documented";
    script_plan_calc_answer(&env, marker, Duration::ZERO);
    let task_id = gateway.submit(agent, &format!("{marker}: 6*7?")).await;
    gateway.events(task_id, None).await.until_terminal().await;

    let doc = gateway.get_json("/openapi.json", 200).await;
    let detail = gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await;
    assert_eq!(detail["tool_calls"][0]["result"], json!(42));
    assert_documented(&doc, "TaskDetail", &detail);
    let state = gateway
        .get_json(&format!("/v1/tasks/{task_id}/state"), 200)
        .await;
    assert!(state["plan"].is_array(), "{state:#}");
    assert_documented(&doc, "TaskState", &state);
    // The record of its model calls (CONTRACT §12): requests and responses are JSON.
    let calls = gateway
        .get_json(&format!("/v1/tasks/{task_id}/llm_calls"), 200)
        .await;
    assert_eq!(
        calls["llm_calls"].as_array().map(Vec::len),
        Some(3),
        "{calls:#}"
    );
    assert!(
        calls["llm_calls"][0]["request"]["messages"].is_array(),
        "{calls:#}"
    );
    assert_documented(&doc, "LlmCallList", &calls);
    gateway.stop().await;
    env.stop().await;
}
