//! What a model sends that PostgreSQL cannot keep as it is, through the real worker: NUL in
//! a reply (its JSON escape and the raw character) and in tool-call arguments, repeated and
//! empty tool-call ids; and a step the database refuses for good, which ends the task at
//! once instead of asking the LLM again on every redelivery.

use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::harness::TestEnv;
use agentd::scripted_model::{ModelReply, answer_reply, seed_object};

/// A refused step ends its task this fast (it took minutes, through the delivery limit).
const REFUSED_TASK_ENDS_WITHIN: Duration = Duration::from_secs(10);

/// A completion whose native tool calls have these `(id, name, arguments)`.
fn tool_calls_body(content: &Value, calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": arguments.to_string()}})
        })
        .collect();
    json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": content.to_string(), "tool_calls": calls}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    })
}

async fn llm_request_count(env: &TestEnv, marker: &str) -> usize {
    env.fake.requests_for(marker).len()
}

#[tokio::test]
async fn nul_in_a_reply_and_in_tool_arguments_is_stored_as_u_fffd_and_asked_once() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "outside-text-nul";
    let mut calling = seed_object("CALL_TOOL", json!({}));
    calling["thought"] = json!("looks\u{0}odd");
    let calls = [
        ("c1", "take_memo", json!({"note": "memo\u{0}here"})),
        ("c2", "calculate", json!({"expression": "6*7\u{0}"})),
    ];
    // The answer: the escape inside the JSON, and a raw NUL in the prose before it.
    let answer = seed_object("ANSWER", json!({"answer": "done\u{0}"}));
    let answer = ModelReply::content(format!("\u{0}{answer}"));
    let replies = vec![
        ModelReply::raw_body(200, tool_calls_body(&calling, &calls)),
        answer,
    ];
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    let published = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.answer.as_deref(), Some("done\u{FFFD}"));
    assert_eq!(
        llm_request_count(&env, marker).await,
        2,
        "one request per recursion"
    );

    let thought: String =
        sqlx::query_scalar("SELECT thought FROM recursions WHERE task_id = $1 AND iteration = 1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(thought, "looks\u{FFFD}odd");
    let calls: Vec<(Value, bool, Option<String>)> = sqlx::query_as(
        "SELECT arguments, success, error FROM tool_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(calls[0].0, json!({"note": "memo\u{FFFD}here"}));
    assert_eq!(calls[1].0, json!({"expression": "6*7\u{FFFD}"}));
    assert!(calls[0].1 && !calls[1].1, "{calls:?}");

    // The model sees in the next recursion what is stored.
    let state = env.fake.requests_for(marker)[1].system_state().unwrap();
    assert_eq!(state["last_recursion"]["thought"], "looks\u{FFFD}odd");
    let memory = state["context"]["memory"]["short_term"].to_string();
    assert!(memory.contains("memo\u{FFFD}here"), "{memory}");
    assert_eq!(env.stored_events(task_id).await, published);
    env.stop().await;
}

#[tokio::test]
async fn repeated_and_empty_tool_call_ids_run_under_ids_of_their_own() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "outside-text-ids";
    let calling = seed_object("CALL_TOOL", json!({}));
    let expression = |e: &str| json!({"expression": e});
    let first = [
        ("dup", "calculate", expression("1+1")),
        ("dup", "calculate", expression("2+2")),
        ("", "calculate", expression("3+3")),
    ];
    let second = [("dup", "calculate", expression("4+4"))];
    let replies = vec![
        ModelReply::raw_body(200, tool_calls_body(&calling, &first)),
        ModelReply::raw_body(200, tool_calls_body(&calling, &second)),
        answer_reply("20"),
    ];
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    let published = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(llm_request_count(&env, marker).await, 3);

    let rows: Vec<(i32, String, Value)> = sqlx::query_as(
        "SELECT r.iteration, c.tool_call_id, c.result FROM tool_calls c \
         JOIN recursions r USING (trace_id) WHERE c.task_id = $1 ORDER BY c.id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let results: Vec<&Value> = rows.iter().map(|r| &r.2).collect();
    assert_eq!(results, [&json!(2), &json!(4), &json!(6), &json!(8)]);
    assert_eq!((rows[0].1.as_str(), rows[1].1.as_str()), ("dup", "dup_1_2"));
    assert!(!rows[2].1.is_empty() && rows[2].1 != "dup");
    assert_eq!((rows[3].0, rows[3].1.as_str()), (2, "dup_2_1"));
    let completed: Vec<&Value> = published
        .iter()
        .filter(|e| e["type"] == "tool.completed")
        .map(|e| &e["data"]["tool_call_id"])
        .collect();
    let stored: Vec<Value> = rows.iter().map(|r| json!(r.1)).collect();
    assert_eq!(completed, stored.iter().collect::<Vec<_>>());
    env.stop().await;
}

#[tokio::test]
async fn a_step_the_database_refuses_ends_the_task_failed_without_asking_again() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    // A rule of the operator's that the model's first recursion breaks: the step holding
    // it can never be stored.
    sqlx::query("ALTER TABLE recursions ADD CONSTRAINT no_poison CHECK (thought <> 'poison')")
        .execute(&env.pool)
        .await
        .unwrap();
    let marker = "outside-text-refused";
    let mut reflecting = seed_object("REFLECT", json!({"summary": "so far"}));
    reflecting["thought"] = json!("poison");
    let mut replies = vec![ModelReply::json(reflecting), answer_reply("never stored")];
    // What a task taken up again would ask for.
    replies.extend((0..4).map(|_| answer_reply("asked again")));
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    let task = env
        .wait_terminal_within(task_id, REFUSED_TASK_ENDS_WITHIN)
        .await;
    assert_eq!(
        (task.status.as_str(), task.fail_reason.as_deref()),
        ("failed", Some("internal"))
    );
    let error = task.error.unwrap_or_default();
    assert!(
        error.contains("recursion 1") && error.contains("no_poison"),
        "{error}"
    );

    let published = env.published_events(task_id).await;
    let last = published.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["data"]["reason"].as_str()),
        (Some("task.failed"), Some("internal"))
    );
    assert_eq!(last["data"]["partial"], "so far");
    let stored = env.stored_events(task_id).await;
    for (index, event) in stored.iter().enumerate() {
        assert_eq!(event["seq"], json!(index + 1), "gapless: {stored:#?}");
    }
    // The worker drains and stops: whatever it would still do with the message is done.
    let fake = env.fake.clone();
    env.stop().await;
    let asked: Vec<Uuid> = fake
        .requests_for(marker)
        .iter()
        .filter_map(|r| r.system_state())
        .filter_map(|s| s["current_recursion"]["trace_id"].as_str()?.parse().ok())
        .collect();
    assert_eq!(asked.len(), 2, "each recursion asked once: {asked:?}");
    assert_ne!(asked[0], asked[1]);
}

#[tokio::test]
async fn a_streamed_reply_holding_nul_stores_its_deltas_as_u_fffd() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "outside-text-stream";
    let answer = seed_object("ANSWER", json!({"answer": "streamed"}));
    env.fake.script(
        marker,
        vec![ModelReply::content(format!("\u{0}{answer}\u{0}"))],
    );
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": marker, "stream": true});
    env.publish_raw(body.to_string().as_bytes()).await;
    let published = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    let deltas: String = published
        .iter()
        .filter(|e| e["type"] == "llm.delta")
        .filter_map(|e| e["data"]["content"].as_str())
        .collect();
    assert!(
        deltas.starts_with('\u{FFFD}') && !deltas.contains('\0'),
        "{deltas:?}"
    );
    assert_eq!(env.stored_events(task_id).await, published);
    env.stop().await;
}

#[tokio::test]
async fn a_provider_error_holding_nul_is_stored_as_u_fffd() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "outside-text-llm-error";
    let replies = vec![
        ModelReply::status(500, "overloaded\u{0}"),
        ModelReply::status(400, "bad\u{0}request"),
    ];
    env.fake.script(marker, replies);
    let task_id = env.submit(agent, marker).await;
    let published = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.fail_reason.as_deref(), Some("llm_error"));
    let error = task.error.unwrap_or_default();
    assert!(error.contains("bad\u{FFFD}request"), "{error}");
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT error FROM llm_calls WHERE task_id = $1 ORDER BY attempt")
            .bind(task_id)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert!(stored[0].contains("overloaded\u{FFFD}"), "{stored:?}");
    assert!(stored[1].contains("bad\u{FFFD}request"), "{stored:?}");
    let retry = published.iter().find(|e| e["type"] == "llm.retry").unwrap();
    let said = retry["data"]["error"].as_str().unwrap_or_default();
    assert!(said.contains("overloaded\u{FFFD}"), "{said}");
    env.stop().await;
}
