//! Tool calls end to end: a failing call (unknown tool, a tool the agent was not granted,
//! arguments that are not JSON or miss a field) is recorded and shown to the next recursion,
//! never fails the task; take_memo lands in the state snapshot's memory. NUL and repeated
//! tool-call ids from a model, and a step the database refuses: `outside_text`.

mod outside_text;

use crate::support::harness::TestEnv;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply, seed_object};
use serde_json::{Value, json};

#[tokio::test]
async fn failing_tool_calls_are_fed_back_and_the_task_goes_on() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, Some(&["calculate", "take_memo"])).await;
    let marker = "tools-failing";
    let bad_json = ModelReply::raw_body(200, unparseable_arguments_reply());
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![
                ("search_web", json!({"q": "x"})),
                ("current_time", json!({})),
                ("calculate", json!({"expr": "1+1"})),
                ("calculate", json!({"expression": "1/0"})),
            ]),
            bad_json,
            answer_reply("handled"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.iterations, 3);

    let rows: Vec<(String, bool, Option<String>)> = sqlx::query_as(
        "SELECT name, success, error FROM tool_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 5, "{rows:#?}");
    assert!(rows.iter().all(|(_, success, _)| !success), "{rows:#?}");
    let errors: Vec<String> = rows
        .iter()
        .map(|r| r.2.clone().unwrap_or_default())
        .collect();
    assert!(
        errors[0].contains("search_web"),
        "unknown tool: {}",
        errors[0]
    );
    assert!(
        errors[1].contains("current_time"),
        "not granted: {}",
        errors[1]
    );
    assert!(errors[2].contains("expression"), "schema: {}", errors[2]);
    assert!(
        errors[3].to_lowercase().contains("zero"),
        "tool failure: {}",
        errors[3]
    );
    assert!(
        errors[4].to_lowercase().contains("json"),
        "bad JSON: {}",
        errors[4]
    );

    // The next recursion sees every result and the failed recursion's error_log.
    let second = env.fake.requests_for(marker)[1].system_state().unwrap();
    let results = second["last_recursion"]["tool_call_results"]
        .as_array()
        .unwrap();
    assert_eq!(results.len(), 4);
    assert!(
        results
            .iter()
            .all(|r| r["success"] == false && r["error"].is_string())
    );
    assert_eq!(second["last_recursion"]["status"], "error");
    assert!(second["last_recursion"]["error_log"].is_string());
    // The granted tools are the only ones offered.
    let offered = env.fake.requests_for(marker)[0].tool_names();
    assert_eq!(offered.len(), 2, "{offered:?}");
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.completed")
        .collect();
    assert_eq!(completed.len(), 5);
    assert!(
        completed
            .iter()
            .all(|e| e["data"]["success"] == false && e["data"]["error"].is_string())
    );
    env.stop().await;
}

/// A CALL_TOOL reply whose tool call arguments are not valid JSON.
fn unparseable_arguments_reply() -> Value {
    let content = seed_object("CALL_TOOL", json!({}));
    json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": content.to_string(),
            "tool_calls": [{"id": "call_bad", "type": "function",
                            "function": {"name": "calculate", "arguments": "{expression: 1+"}}]}}]
    })
}

#[tokio::test]
async fn take_memo_lands_in_memory() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "tools-memo";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![(
                "take_memo",
                json!({"note": "the user likes primes"}),
            )]),
            answer_reply("noted"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.published_events(task_id).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let state = env.fake.requests_for(marker)[1].system_state().unwrap();
    let memory = state["context"]["memory"]["short_term"].as_array().unwrap();
    assert!(
        memory
            .iter()
            .any(|m| m["memory"] == "the user likes primes"),
        "{memory:#?}"
    );
    env.stop().await;
}
