//! The exact record of every model call (CONTRACT v3 §12), end to end: tasks run by the real
//! worker against the scripted fake LLM over real HTTP, then the record read back from
//! PostgreSQL (`llm_calls`, the view `llm_call_bodies`, `llm_request_text`) and through the
//! gateway, compared with the bytes the fake received.

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use agentd::llm::Secret;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply, plan_reply};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

const KEY: &str = "sk-record-test-key-0123456789";

/// One attempt as recorded.
#[derive(Debug, sqlx::FromRow)]
struct Row {
    iteration: i32,
    attempt: i32,
    status: String,
    request_sha256: Option<String>,
    request_key: Option<String>,
    text: Option<String>,
    request: Option<Value>,
    response: Option<Value>,
}

async fn recorded(env: &TestEnv, task_id: Uuid) -> Vec<Row> {
    sqlx::query_as(
        "SELECT c.iteration, c.attempt, c.status, c.request_sha256, c.request_key,
                llm_request_text(c.task_id, c.request_parts) AS text, b.request, b.response
         FROM llm_calls c LEFT JOIN llm_call_bodies b ON b.llm_call_id = c.id
         WHERE c.task_id = $1 ORDER BY c.iteration, c.attempt",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("llm_calls")
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn script(env: &TestEnv, marker: &str) {
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute 6*7"), ("2", "answer")]),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("6*7 = 42"),
        ],
    );
}

async fn submit(env: &TestEnv, agent: Uuid, input: &str, stream: bool) -> Uuid {
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": input, "stream": stream});
    env.publish_raw(body.to_string().as_bytes()).await;
    task_id
}

/// Asserts that every recorded request is byte for byte what the fake received, and
/// returns the rows.
async fn assert_exact(env: &TestEnv, task_id: Uuid, marker: &str) -> Vec<Row> {
    let received = env.fake.requests_for(marker);
    let rows = recorded(env, task_id).await;
    assert_eq!(rows.len(), received.len(), "{rows:#?}");
    for (row, got) in rows.iter().zip(&received) {
        let sent = std::str::from_utf8(&got.bytes).expect("utf-8 body");
        assert_eq!(
            row.text.as_deref(),
            Some(sent),
            "{} {}",
            row.iteration,
            row.attempt
        );
        assert_eq!(
            row.request_sha256.as_deref(),
            Some(&*sha256_hex(&got.bytes))
        );
        let parsed: Value = serde_json::from_slice(&got.bytes).expect("JSON body");
        assert_eq!(row.request.as_ref(), Some(&parsed));
        assert_eq!(row.request_key.as_ref().map(String::len), Some(64));
        assert!(!sent.contains(KEY));
    }
    let leaked: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM llm_request_parts WHERE content LIKE '%' || $1 || '%')
              + (SELECT count(*) FROM llm_calls WHERE response::text LIKE '%' || $1 || '%')",
    )
    .bind(KEY)
    .fetch_one(&env.pool)
    .await
    .expect("leak check");
    assert_eq!(leaked, 0, "the API key is stored somewhere");
    rows
}

/// The content of a recorded completion, parsed as the seed object.
fn reply_object(response: &Value) -> Value {
    let content = response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    serde_json::from_str(content).unwrap_or(Value::Null)
}

#[tokio::test]
async fn the_record_is_the_bytes_the_model_received_plain_and_streamed() {
    let env = TestEnv::start_with(|s| s.llm.api_key = Some(Secret::new(KEY))).await;
    let agent = env.agent(None, None).await;
    let (plain, streamed) = ("record-plain", "record-streamed");
    script(&env, plain);
    script(&env, streamed);
    let a = submit(&env, agent, &format!("{plain}: 6*7?"), false).await;
    let b = submit(&env, agent, &format!("{streamed}: 6*7?"), true).await;
    for task in [a, b] {
        assert_eq!(env.wait_terminal(task).await.status, "completed");
    }
    assert!(env.fake.requests_for(plain).iter().all(|r| !r.streamed()));
    assert!(env.fake.requests_for(streamed).iter().all(|r| r.streamed()));

    let rows = assert_exact(&env, a, plain).await;
    // Not streamed: the provider's JSON body as it came.
    let last = rows
        .last()
        .and_then(|r| r.response.clone())
        .expect("response");
    assert_eq!(
        reply_object(&last)["action"]["output"]["answer"],
        "6*7 = 42"
    );
    assert!(last["usage"].is_object(), "{last}");

    let rows = assert_exact(&env, b, streamed).await;
    // Streamed: reassembled, with the tool call whole and the finish reason.
    let tool = rows[1].response.clone().expect("response");
    let call = &tool["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "calculate");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("")).unwrap();
    assert_eq!(arguments, json!({"expression": "6*7"}));
    assert_eq!(tool["choices"][0]["finish_reason"], "tool_calls");
    let last = rows[2].response.clone().expect("response");
    assert_eq!(
        reply_object(&last)["action"]["output"]["answer"],
        "6*7 = 42"
    );
    assert!(last["usage"]["prompt_tokens"].is_number(), "{last}");

    // The same task on the same input, run twice: the keys are equal, the bytes are not.
    let key_of = |rows: &[Row]| -> Vec<Option<String>> {
        rows.iter().map(|r| r.request_key.clone()).collect()
    };
    let sha_of = |rows: &[Row]| -> Vec<Option<String>> {
        rows.iter().map(|r| r.request_sha256.clone()).collect()
    };
    let again = "record-again";
    // Two runs' worth of replies, consumed in order: the first run ends before the second.
    script(&env, again);
    script(&env, again);
    let first = submit(&env, agent, &format!("{again}: 6*7?"), false).await;
    assert_eq!(env.wait_terminal(first).await.status, "completed");
    let second = submit(&env, agent, &format!("{again}: 6*7?"), false).await;
    assert_eq!(env.wait_terminal(second).await.status, "completed");
    let (one, two) = (recorded(&env, first).await, recorded(&env, second).await);
    assert_eq!(key_of(&one), key_of(&two));
    assert_ne!(sha_of(&one), sha_of(&two));
    env.stop().await;
}

#[tokio::test]
async fn failed_attempts_redaction_and_the_gateway() {
    let env = TestEnv::start_with(|s| {
        s.llm.api_key = Some(Secret::new(KEY));
        s.llm.record_redact = vec!["secret-[0-9]+".into(), "(?m)^line two$".into()];
    })
    .await;
    let agent = env.agent(None, None).await;
    let marker = "record-redact";
    env.fake.script(
        marker,
        vec![
            ModelReply::status(500, &format!("boom echoing {KEY}")),
            answer_reply("the code is secret-456"),
        ],
    );
    let input = format!("{marker}: keep secret-123 \"quoted\"\nline two\nline three");
    let task_id = submit(&env, agent, &input, false).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");

    let received = env.fake.requests_for(marker);
    let rows = recorded(&env, task_id).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (row, got) in rows.iter().zip(&received) {
        // The hash is of what was sent; what is stored is redacted, and still JSON.
        assert_eq!(
            row.request_sha256.as_deref(),
            Some(&*sha256_hex(&got.bytes))
        );
        let request = row.request.as_ref().expect("request is JSON");
        let stored_input = request["messages"][0]["content"].as_str().unwrap_or("");
        assert_eq!(
            stored_input,
            format!("{marker}: keep [redacted] \"quoted\"\n[redacted]\nline three")
        );
        assert!(!row.text.as_deref().unwrap_or("").contains("secret-123"));
    }
    // The failed attempt: its status and body, with the echoed key scrubbed.
    assert_eq!(rows[0].status, "http_500");
    let failed = rows[0].response.clone().expect("failed response");
    assert_eq!(failed["status"], 500);
    assert!(failed["body"].is_object(), "{failed}");
    assert!(!failed.to_string().contains(KEY), "{failed}");
    let answer = reply_object(rows[1].response.as_ref().expect("response"));
    assert_eq!(
        answer["action"]["output"]["answer"],
        "the code is [redacted]"
    );
    // Both attempts of recursion 1 asked the same: equal keys and hashes.
    assert_eq!(rows[0].request_key, rows[1].request_key);
    assert_eq!(rows[0].request_sha256, rows[1].request_sha256);

    let gateway = Gateway::start(&env, &["tok"]).await;
    let listed = gateway
        .get_json(&format!("/v1/tasks/{task_id}/llm_calls"), 200)
        .await;
    let calls = listed["llm_calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 2, "{listed}");
    assert_eq!(calls[1]["request"], rows[1].request.clone().unwrap());
    assert_eq!(calls[1]["response"], rows[1].response.clone().unwrap());
    assert_eq!(
        calls[0]["request_sha256"].as_str(),
        rows[0].request_sha256.as_deref()
    );
    let one = gateway
        .get_json(&format!("/v1/tasks/{task_id}/llm_calls?iteration=2"), 200)
        .await;
    assert_eq!(one["llm_calls"], json!([]));
    let missing = gateway
        .get_json(&format!("/v1/tasks/{}/llm_calls", Uuid::now_v7()), 404)
        .await;
    assert_eq!(missing["error"]["code"], "task_not_found", "{missing}");
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn hash_and_off_modes_and_prune() {
    for (mode, hashes) in [
        (agentd::core::call_record::RecordMode::Hash, true),
        (agentd::core::call_record::RecordMode::Off, false),
    ] {
        let env = TestEnv::start_with(|s| s.llm.record = mode).await;
        let agent = env.agent(None, None).await;
        let marker = "record-mode";
        env.fake.script(marker, vec![answer_reply("done")]);
        let task_id = submit(&env, agent, marker, false).await;
        assert_eq!(env.wait_terminal(task_id).await.status, "completed");
        let rows = recorded(&env, task_id).await;
        assert_eq!(rows.len(), 1);
        let got = &env.fake.requests_for(marker)[0];
        let expected = hashes.then(|| sha256_hex(&got.bytes));
        assert_eq!(rows[0].request_sha256, expected, "{mode:?}");
        assert_eq!(rows[0].request_key.is_some(), hashes, "{mode:?}");
        assert!(rows[0].request.is_none() && rows[0].response.is_none());
        env.stop().await;
    }

    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    env.fake.script("record-prune", vec![answer_reply("done")]);
    let task_id = submit(&env, agent, "record-prune", false).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let parts = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM llm_request_parts WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&pool)
            .await
            .expect("parts")
    };
    assert!(parts(env.pool.clone()).await > 0);
    // Pruned once the worker is done with the task's row: prune skips a row still locked.
    env.wait_confirmed(task_id).await;
    let request = agentd::store::prune::PruneRequest {
        finished_before: chrono::Utc::now() + chrono::Duration::seconds(5),
        statuses: vec!["completed".into()],
        batch_size: 10,
        now: chrono::Utc::now(),
    };
    agentd::store::prune::prune(&env.pool, &request)
        .await
        .expect("prune");
    assert_eq!(parts(env.pool.clone()).await, 0);
    env.stop().await;
}

/// What the record stores per recursion of a 30-recursion task under the shipped 15 KB
/// system prompt: printed (docs/performance.md has the figures), and bounded so that
/// quadratic growth (every request stored whole) fails: a request repeats the whole prompt
/// and every earlier history message, the record only what is new.
#[tokio::test]
async fn storage_per_recursion_does_not_grow_with_the_task() {
    let env = TestEnv::start().await;
    let agent = env.agent(Some(30), None).await;
    let marker = "record-growth";
    let mut replies = Vec::new();
    for i in 0..29 {
        replies.push(if i % 2 == 0 {
            call_tool_reply(vec![("calculate", json!({"expression": format!("{i}*7")}))])
        } else {
            agentd::scripted_model::reflect_reply(&format!(
                "step {i} done, the sum so far is {}",
                i * 7
            ))
        });
    }
    replies.push(answer_reply("done"));
    env.fake.script(marker, replies);
    let task_id = submit(&env, agent, &format!("{marker}: add things up"), false).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!((task.status.as_str(), task.iterations), ("completed", 30));
    let per_recursion: Vec<(i32, i64, i64, i64)> = sqlx::query_as(
        "WITH calls AS (SELECT id, iteration, request_parts, response FROM llm_calls
                        WHERE task_id = $1),
              first AS (SELECT part_id, min(c.iteration) AS iteration
                        FROM calls c, unnest(c.request_parts) AS part_id GROUP BY part_id)
         SELECT c.iteration,
                octet_length(llm_request_text($1, c.request_parts))::bigint AS sent,
                (SELECT coalesce(sum(pg_column_size(p.content)), 0) FROM first f
                 JOIN llm_request_parts p ON p.task_id = $1 AND p.part_id = f.part_id
                 WHERE f.iteration = c.iteration)::bigint
                + pg_column_size(c.request_parts) + pg_column_size(c.response)
                + 2 * 65 AS stored,
                pg_column_size(c.response)::bigint AS response
         FROM calls c ORDER BY c.iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("sizes");
    assert_eq!(per_recursion.len(), 30);
    let sent: i64 = per_recursion.iter().map(|r| r.1).sum();
    let stored: i64 = per_recursion.iter().map(|r| r.2).sum();
    for (iteration, sent, stored, response) in &per_recursion {
        println!(
            "recursion {iteration:>2}: sent {sent:>6} B, stored {stored:>6} B (response {response} B)"
        );
    }
    println!(
        "30 recursions: sent {sent} B, stored {stored} B ({} B per recursion, {:.1} % of what was sent)",
        stored / 30,
        stored as f64 * 100.0 / sent as f64
    );
    // The first recursion stores the prompt; later ones store what is new. Recursion 30
    // must not store much more than recursion 3 (a whole request would be ~2x).
    let (early, late) = (per_recursion[2].2, per_recursion[29].2);
    assert!(
        late < early * 3 / 2 + 2048,
        "recursion 3: {early} B, recursion 30: {late} B"
    );
    assert!(stored * 5 < sent, "stored {stored} B of {sent} B sent");
    env.stop().await;
}
