//! Fork from recursion N (CONTRACT §10) with the real binary and worker, the fake LLM over
//! HTTP, RabbitMQ and PostgreSQL: the new task starts from the state the original had after
//! recursion N − 1 (its plan, the tool results it saw, its history) without running
//! anything before N again; its first recursion is numbered N, its rows are ordinary rows
//! pointing back at the original; the gateway route answers like `POST /v1/tasks`.

use std::process::Command;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use agentd::scripted_model::{answer_reply, call_tool_reply, plan_reply, reflect_reply};
use serde_json::json;
use uuid::Uuid;

async fn count(env: &TestEnv, sql: &str, task_id: Uuid) -> i64 {
    sqlx::query_scalar(sql)
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("count")
}

#[tokio::test]
async fn a_fork_starts_at_recursion_n_from_the_state_before_it() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "fork-me";
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute 6*7"), ("2", "answer")]),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            reflect_reply("the product is 42"),
            answer_reply("original answer"),
        ],
    );
    let original = env.submit(agent, &format!("{marker}: what is 6*7?")).await;
    let task = env.wait_terminal(original).await;
    assert_eq!((task.status.as_str(), task.iterations), ("completed", 4));

    // Fork from recursion 3 (the REFLECT) with the CLI.
    env.fake.script(marker, vec![answer_reply("forked answer")]);
    let output = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["fork", &original.to_string(), "--from", "3"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&env.settings))
        .output()
        .expect("agentd fork");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let fork: Uuid = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("the new task id");
    let forked = env.wait_terminal(fork).await;
    assert_eq!(forked.status, "completed");
    assert_eq!(forked.answer.as_deref(), Some("forked answer"));
    assert_eq!(forked.forked_from_task_id, Some(original));
    assert_eq!(forked.forked_from_iteration, Some(3));
    assert_eq!(forked.iterations, 3);
    // Its own rows start at recursion 3; nothing before ran again (no tool call, one LLM
    // request).
    let iterations: Vec<i32> =
        sqlx::query_scalar("SELECT iteration FROM recursions WHERE task_id = $1 ORDER BY 1")
            .bind(fork)
            .fetch_all(&env.pool)
            .await
            .expect("recursions");
    assert_eq!(iterations, [3]);
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM tool_calls WHERE task_id = $1",
            fork
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM llm_calls WHERE task_id = $1",
            fork
        )
        .await,
        1
    );
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 5);
    // It saw what the original saw at recursion 3: the plan, the tool result, the history.
    let state = requests[4].system_state().expect("state");
    assert_eq!(state["global"]["task_id"], json!(fork));
    assert_eq!(state["current_recursion"]["iteration_index"], 3, "{state}");
    let plan = &state["context"]["plan"];
    assert_eq!(plan[0]["description"], "compute 6*7", "{plan}");
    assert_eq!(plan[0]["status"], "running");
    let results = &state["last_recursion"]["tool_call_results"];
    assert_eq!(results[0]["name"], "calculate");
    assert_eq!(results[0]["result"], json!(42));
    let original_state = env.fake.requests_for(marker)[2]
        .system_state()
        .expect("state");
    assert_eq!(
        state["last_recursion"], original_state["last_recursion"],
        "the fork sees the last recursion the original saw at recursion 3"
    );
    let assistants = |r: &agentd::scripted_model::ModelRequest| {
        r.messages()
            .iter()
            .filter(|(role, _)| role == "assistant")
            .count()
    };
    assert_eq!(assistants(&requests[4]), assistants(&requests[2]));
    assert_eq!(assistants(&requests[4]), 2);
    // task.started comes first in its events, as for any task.
    let events = env.stored_events(fork).await;
    assert_eq!(events[0]["type"], "task.started");
    assert_eq!(events.last().unwrap()["type"], "task.completed");

    // The gateway route: checked ranges, then a fork from the beginning.
    let gateway = Gateway::start(&env, &[]).await;
    let path = format!("/v1/tasks/{original}/fork");
    gateway
        .post_json(&path, &json!({"from_iteration": 0}), 422)
        .await;
    gateway
        .post_json(&path, &json!({"from_iteration": 5}), 422)
        .await;
    gateway
        .post_json(
            &format!("/v1/tasks/{}/fork", Uuid::now_v7()),
            &json!({"from_iteration": 1}),
            404,
        )
        .await;
    env.fake
        .script("again from the start", vec![answer_reply("fresh")]);
    // A person's input may hold NUL: stored (and shown to the model) as U+FFFD.
    let body = json!({"from_iteration": 1, "input": "again from the start\u{0}"});
    let accepted = gateway.post_json(&path, &body, 202).await;
    let second: Uuid = accepted["task_id"].as_str().unwrap().parse().unwrap();
    let task = env.wait_terminal(second).await;
    assert_eq!(task.answer.as_deref(), Some("fresh"));
    assert_eq!(task.input.as_deref(), Some("again from the start\u{FFFD}"));
    assert_eq!(
        (task.forked_from_task_id, task.forked_from_iteration),
        (Some(original), Some(1))
    );
    let detail = gateway.get_json(&format!("/v1/tasks/{second}"), 200).await;
    assert_eq!(detail["task"]["forked_from_task_id"], json!(original));
    gateway.stop().await;
    env.stop().await;
}
