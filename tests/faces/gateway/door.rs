//! What a person types into the gateway may hold any Unicode, NUL included: it is stored
//! with NUL as U+FFFD (`core::storable`) and the request succeeds, instead of a 202 for a
//! task that never appears or a 500 for an agent.

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use agentd::scripted_model::answer_reply;
use serde_json::json;

#[tokio::test]
async fn nul_in_a_task_s_input_and_constraints_is_stored_and_the_task_runs() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let marker = "gw-nul-input";
    env.fake.script(marker, vec![answer_reply("fine")]);
    let body = json!({
        "agent_id": agent,
        "input": format!("{marker} \u{0}!"),
        "constraints": ["no\u{0}pe"],
    });
    let accepted = gateway.post_json("/v1/tasks", &body, 202).await;
    let task_id = accepted["task_id"]
        .as_str()
        .expect("task_id")
        .parse()
        .unwrap();
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    let stored = format!("{marker} \u{FFFD}!");
    assert_eq!(task.input.as_deref(), Some(stored.as_str()));
    let detail = gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await;
    assert_eq!(detail["task"]["input"], stored);
    assert_eq!(env.fake.requests_for(marker)[0].messages()[0].1, stored);
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn nul_in_an_agent_s_fields_is_stored() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let body = json!({
        "name": "a\u{0}gent",
        "model": "fake-model",
        "approval_tools": ["mail\u{0}*"],
    });
    let created = gateway.post_json("/v1/agents", &body, 201).await;
    assert_eq!(created["name"], "a\u{FFFD}gent");
    assert_eq!(created["approval_tools"], json!(["mail\u{FFFD}*"]));
    gateway.stop().await;
    env.stop().await;
}
