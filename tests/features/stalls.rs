//! Stall detection (CONTRACT v3 §14) with the real worker, the fake LLM over HTTP,
//! RabbitMQ and PostgreSQL: a model that repeats one call ends `no_progress` within four
//! LLM calls; one that obeys the nudge completes; a poll whose result changes never stalls;
//! `pause` makes the task wait (reason `stalled`) until a `resume`.

use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;

/// A resumed stalled task (one more scripted answer) ends within this after the resume.
const RESUMED_TASK_ENDS_WITHIN: Duration = Duration::from_secs(5);
use agentd::amqp::control::send_control;
use agentd::contract::ControlMessage;
use agentd::contract::control::Resume;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply};
use serde_json::{Value, json};
use uuid::Uuid;

/// An agent with `agents.stall` = `stall`.
async fn agent_with(env: &TestEnv, stall: Value) -> Uuid {
    let agent = env.agent(Some(20), None).await;
    sqlx::query("UPDATE agents SET stall = $2 WHERE agent_id = $1")
        .bind(agent)
        .bind(stall)
        .execute(&env.pool)
        .await
        .expect("agents.stall");
    agent
}

fn same_call() -> ModelReply {
    call_tool_reply(vec![("calculate", json!({"expression": "2+2"}))])
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[tokio::test]
async fn a_model_repeating_one_call_ends_no_progress_within_four_llm_calls() {
    let mut env = TestEnv::start().await;
    let agent = agent_with(&env, json!({"repeat": 3, "action": "answer"})).await;
    let marker = "stall-repeat";
    env.fake
        .script(marker, (0..8).map(|_| same_call()).collect());
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(task.fail_reason.as_deref(), Some("no_progress"));
    let requests = env.fake.requests_for(marker);
    assert_eq!(
        requests.len(),
        4,
        "three repeats and the one told to ANSWER"
    );
    for request in &requests[..3] {
        let state = request.system_state().expect("snapshot");
        assert!(state["context"].get("stall_warning").is_none());
    }
    let last = requests[3].system_state().expect("snapshot");
    let warning = last["context"]["stall_warning"]
        .as_str()
        .unwrap_or_default();
    assert!(warning.contains("ANSWER now"), "{warning}");
    let stalled = of_type(&events, "task.stalled");
    assert_eq!(stalled.len(), 1);
    assert_eq!(stalled[0]["data"], json!({"count": 3, "action": "answer"}));
    assert_eq!(stalled[0]["iteration"], 3);
    let failed = events.last().expect("events");
    assert_eq!(failed["type"], "task.failed");
    assert_eq!(failed["data"]["reason"], "no_progress");
    // The last reply's calls never ran: three calculations, not four.
    assert_eq!(of_type(&events, "tool.completed").len(), 3);
    env.stop().await;
}

#[tokio::test]
async fn a_model_that_obeys_the_nudge_completes() {
    let mut env = TestEnv::start().await;
    // The agent has the default settings: nudge at 3 repeats.
    let agent = env.agent(Some(20), None).await;
    let marker = "stall-nudge";
    let mut script: Vec<ModelReply> = (0..3).map(|_| same_call()).collect();
    script.push(answer_reply("4"));
    env.fake.script(marker, script);
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("4"));
    let requests = env.fake.requests_for(marker);
    let fourth = requests[3].system_state().expect("snapshot");
    let warning = fourth["context"]["stall_warning"]
        .as_str()
        .unwrap_or_default();
    assert!(
        warning.contains("last 3 recursions") && warning.contains("calculate"),
        "{warning}"
    );
    let stalled = of_type(&events, "task.stalled");
    assert_eq!(stalled.len(), 1);
    assert_eq!(stalled[0]["data"], json!({"count": 3, "action": "nudge"}));
    let stored: Option<Value> = sqlx::query_scalar("SELECT stall FROM agents WHERE agent_id = $1")
        .bind(agent)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(stored, Some(json!({"repeat": 3, "action": "nudge"})));
    env.stop().await;
}

#[tokio::test]
async fn a_poll_whose_result_changes_never_stalls() {
    let mut env = TestEnv::start().await;
    let agent = agent_with(&env, json!({"repeat": 2, "action": "fail"})).await;
    let marker = "stall-poll";
    let mut script: Vec<ModelReply> = (0..6)
        .map(|_| call_tool_reply(vec![("current_time", json!({}))]))
        .collect();
    script.push(answer_reply("the job is done"));
    env.fake.script(marker, script);
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.iterations, 7);
    assert!(of_type(&events, "task.stalled").is_empty());
    env.stop().await;
}

#[tokio::test]
async fn pause_waits_stalled_until_a_resume() {
    let mut env = TestEnv::start().await;
    let agent = agent_with(&env, json!({"repeat": 2, "action": "pause"})).await;
    let marker = "stall-pause";
    let mut script: Vec<ModelReply> = (0..2).map(|_| same_call()).collect();
    script.push(answer_reply("4 after all"));
    env.fake.script(marker, script);
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    let reason: Option<String> =
        sqlx::query_scalar("SELECT wait_reason FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(reason.as_deref(), Some("stalled"));
    assert_eq!(env.fake.requests_for(marker).len(), 2);
    let resumed_at = Instant::now();
    let resume = ControlMessage::Resume(Resume {
        task_id,
        budget: None,
    });
    send_control(&env.publisher, &env.settings.amqp, &resume)
        .await
        .expect("resume");
    let task = env.wait_terminal(task_id).await;
    assert!(resumed_at.elapsed() < RESUMED_TASK_ENDS_WITHIN);
    assert_eq!(task.status, "completed");
    let events = env.published_events(task_id).await;
    let stalled = of_type(&events, "task.stalled");
    assert_eq!(stalled[0]["data"], json!({"count": 2, "action": "pause"}));
    let waiting = of_type(&events, "task.waiting");
    assert_eq!(waiting[0]["data"]["reason"], "stalled");
    assert_eq!(
        of_type(&events, "task.resumed")[0]["data"]["reason"],
        "resumed"
    );
    env.stop().await;
}
