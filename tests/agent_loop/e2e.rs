//! End-to-end: tasks published to the real local RabbitMQ, run by the real worker against a
//! scripted fake LLM over real HTTP, traced in a fresh PostgreSQL database.

use crate::support::harness::TestEnv;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply, plan_reply};
use serde_json::{Value, json};

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn assert_gapless(events: &[Value]) {
    for (index, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"],
            json!(index + 1),
            "seq gap at {index}: {events:#?}"
        );
    }
}

#[tokio::test]
async fn plan_calculate_answer_fills_events_and_tables() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "e2e-plan-calc-answer";
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute 6*7"), ("2", "answer")]),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("6*7 = 42"),
        ],
    );
    let task_id = env.submit(agent, &format!("{marker}: what is 6*7?")).await;

    let published = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("6*7 = 42"));
    assert_eq!(task.iterations, 3);

    assert_eq!(
        types(&published),
        [
            "task.started",
            "recursion.started",
            "plan.updated",
            "recursion.completed",
            "recursion.started",
            "step.updated",
            "tool.started",
            "tool.completed",
            "recursion.completed",
            "recursion.started",
            "step.updated",
            "recursion.completed",
            "task.completed",
        ],
        "{published:#?}"
    );
    assert_gapless(&published);
    let stored = env.stored_events(task_id).await;
    assert_eq!(stored, published, "stored events equal the published ones");

    let tool_done = published
        .iter()
        .find(|e| e["type"] == "tool.completed")
        .expect("tool event");
    assert_eq!(tool_done["data"]["name"], "calculate");
    assert_eq!(tool_done["data"]["result"], json!(42));
    assert_eq!(tool_done["data"]["success"], true);

    let recursions: Vec<(i32, Option<String>, String, Option<String>)> = sqlx::query_as(
        "SELECT iteration, action_type, status, step_id FROM recursions WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(recursions.len(), 3);
    assert_eq!(recursions[0].1.as_deref(), Some("RE_PLAN"));
    assert_eq!(recursions[1].1.as_deref(), Some("CALL_TOOL"));
    assert_eq!(
        recursions[1].3.as_deref(),
        Some("1"),
        "the tool recursion runs step 1"
    );
    assert_eq!(recursions[2].1.as_deref(), Some("ANSWER"));
    assert!(recursions.iter().all(|r| r.2 == "done"));

    let (name, success, result): (String, bool, Value) =
        sqlx::query_as("SELECT name, success, result FROM tool_calls WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        (name.as_str(), success, result),
        ("calculate", true, json!(42))
    );
    let llm_calls: i64 =
        sqlx::query_scalar("SELECT count(*) FROM llm_calls WHERE task_id = $1 AND status = '200'")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(llm_calls, 3);
    let plan = task.plan.expect("plan stored");
    assert_eq!(plan[0]["status"], "done");

    // The message layout of every request: user input, one system prompt, then one
    // assistant message per earlier recursion.
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 3);
    for (index, request) in requests.iter().enumerate() {
        let messages = request.messages();
        assert_eq!(messages.len(), 2 + index, "request {index}");
        assert_eq!(messages[0].0, "user");
        assert_eq!(messages[0].1, format!("{marker}: what is 6*7?"));
        assert_eq!(messages[1].0, "system");
        assert!(messages[2..].iter().all(|(role, _)| role == "assistant"));
        assert_eq!(
            messages.iter().filter(|(role, _)| role == "system").count(),
            1
        );
        assert_eq!(request.body["model"], "fake-model");
        let state = request
            .system_state()
            .expect("state snapshot in the system prompt");
        assert_eq!(state["global"]["task_id"], json!(task_id));
    }
    let third = requests[2].system_state().unwrap();
    let results = &third["last_recursion"]["tool_call_results"];
    assert_eq!(results[0]["name"], "calculate");
    assert_eq!(results[0]["result"], json!(42));
    assert_eq!(results[0]["success"], true);
    let tools = requests[0].tool_names();
    assert!(tools.contains(&"calculate".to_owned()) && tools.contains(&"take_memo".to_owned()));
    env.stop().await;
}

#[tokio::test]
async fn fenced_json_is_accepted() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "e2e-fenced";
    let reply = agentd::scripted_model::seed_object("ANSWER", json!({"answer": "fenced ok"}));
    env.fake.script(
        marker,
        vec![ModelReply::content(format!(
            "Here you go:\n```json\n{reply}\n```\nDone."
        ))],
    );
    let task_id = env.submit(agent, marker).await;
    env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("fenced ok"));
    env.stop().await;
}

#[tokio::test]
async fn garbage_reply_recovers_through_error_log() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "e2e-garbage";
    env.fake.script(
        marker,
        vec![
            ModelReply::content("I think the answer is 4, no JSON here"),
            answer_reply("4"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.iterations, 2);
    let first = events
        .iter()
        .find(|e| e["type"] == "recursion.completed")
        .unwrap();
    assert_eq!(first["data"]["status"], "error");
    let error_log = first["data"]["error_log"].as_str().expect("error_log");
    assert!(!error_log.is_empty());
    // The second request shows the model its error, in the state and in the history.
    let second = &env.fake.requests_for(marker)[1];
    let state = second.system_state().unwrap();
    assert_eq!(state["last_recursion"]["status"], "error");
    assert_eq!(state["last_recursion"]["error_log"], json!(error_log));
    let messages = second.messages();
    assert_eq!(messages.len(), 3);
    assert!(messages[2].1.contains("error"), "{}", messages[2].1);
    let status: String =
        sqlx::query_scalar("SELECT status FROM recursions WHERE task_id = $1 AND iteration = 1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(status, "error");
    env.stop().await;
}
