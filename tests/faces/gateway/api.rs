//! The JSON API around the stream: tokens and the loopback rule, the OpenAPI document,
//! the error shape, agents and their paged history.

use crate::support::gateway::{Gateway, SseStream, expect_json};
use crate::support::harness::TestEnv;
use agentd::scripted_model::answer_reply;
use serde_json::{Value, json};
use uuid::Uuid;

#[tokio::test]
async fn configured_tokens_are_required() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &["s3cret-token"]).await;
    let agent = env.agent(None, None).await;
    let client = reqwest::Client::new();

    let anonymous = client.get(gateway.url("/v1/agents")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(anonymous.headers().contains_key("www-authenticate"));
    let error: Value = anonymous.json().await.unwrap();
    assert_eq!(error["error"]["code"], "unauthorized");
    let wrong = client
        .get(gateway.url("/v1/agents"))
        .bearer_auth("s3cret-tokeN");
    assert_eq!(wrong.send().await.unwrap().status(), 401);
    let body = json!({"agent_id": agent, "input": "x"});
    let post = client
        .post(gateway.url("/v1/tasks"))
        .json(&body)
        .send()
        .await;
    assert_eq!(
        post.unwrap().status(),
        401,
        "nothing is published without a token"
    );
    gateway.get_json("/v1/agents", 200).await;
    // access_token in the query works on the event stream only.
    let query_token = client.get(gateway.url("/v1/agents?access_token=s3cret-token"));
    assert_eq!(query_token.send().await.unwrap().status(), 401);

    let marker = "gw-auth";
    env.fake.script(marker, vec![answer_reply("ok")]);
    let task_id = gateway.submit(agent, &format!("{marker}: hi")).await;
    let events_url = gateway.url(&format!("/v1/tasks/{task_id}/events"));
    let anonymous = client.get(&events_url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let with_query = client
        .get(format!("{events_url}?access_token=s3cret-token"))
        .send()
        .await
        .unwrap();
    assert_eq!(with_query.status(), 200);
    let events = SseStream::new(with_query).until_terminal().await;
    assert_eq!(
        events.last().and_then(|e| e.event.as_deref()),
        Some("task.completed")
    );

    for open in ["/", "/app.js", "/app.css", "/openapi.json", "/healthz"] {
        let response = client.get(gateway.url(open)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{open} needs no token");
    }
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn no_tokens_means_loopback_only() {
    use agentd::config::GatewaySettings;
    use agentd::gateway::{ConfigError, listen_address};
    let open = GatewaySettings {
        bind: "0.0.0.0:8787".to_owned(),
        ..GatewaySettings::default()
    };
    let refused = listen_address(&open).await;
    assert!(
        matches!(refused, Err(ConfigError::OpenWithoutTokens { .. })),
        "{refused:?}"
    );
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("gateway.tokens"), "{message}");
    let with_tokens = GatewaySettings {
        tokens: vec!["t".into()],
        ..open.clone()
    };
    assert!(listen_address(&with_tokens).await.is_ok());
    let loopback = GatewaySettings {
        bind: "[::1]:0".to_owned(),
        ..GatewaySettings::default()
    };
    assert!(listen_address(&loopback).await.is_ok());
    let localhost = GatewaySettings {
        bind: "localhost:0".to_owned(),
        ..GatewaySettings::default()
    };
    assert!(listen_address(&localhost).await.is_ok());
}

/// `(path, method)` of every operation in an OpenAPI document, sorted.
fn documented_operations(doc: &Value) -> Vec<(String, String)> {
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            documented.push((path.clone(), method.clone()));
        }
    }
    documented.sort();
    documented
}

#[tokio::test]
async fn the_openapi_document_lists_every_route_and_matches_the_router() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let doc = gateway.get_json("/openapi.json", 200).await;
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    let expected = [
        ("/v1/tasks", "post"),
        ("/v1/tasks", "get"),
        ("/v1/tasks/{task_id}", "get"),
        ("/v1/tasks/{task_id}/events", "get"),
        ("/v1/tasks/{task_id}/cancel", "post"),
        ("/v1/tasks/{task_id}/pause", "post"),
        ("/v1/tasks/{task_id}/resume", "post"),
        ("/v1/tasks/{task_id}/inject", "post"),
        ("/v1/tasks/{task_id}/llm_calls", "get"),
        ("/v1/tasks/{task_id}/state", "get"),
        ("/v1/tasks/{task_id}/approvals/{tool_call_id}", "post"),
        ("/v1/approvals", "get"),
        (
            "/v1/tasks/{task_id}/tool_calls/{tool_call_id}/resolve",
            "post",
        ),
        ("/v1/tool_calls", "get"),
        ("/v1/tasks/{task_id}/fork", "post"),
        ("/v1/tasks/{task_id}/rerun", "post"),
        ("/v1/agents", "get"),
        ("/v1/agents", "post"),
        ("/v1/agents/{agent_id}", "get"),
        ("/v1/agents/{agent_id}/tasks", "get"),
        ("/v1/agents/{agent_id}/overview", "get"),
        ("/v1/agents/{agent_id}/versions", "post"),
        ("/v1/agents/{agent_id}/versions", "get"),
        ("/v1/agents/{agent_id}/channels/{channel}", "put"),
        ("/v1/schedules", "get"),
        ("/v1/schedules", "post"),
        ("/v1/schedules/{schedule_id}", "get"),
        ("/v1/schedules/{schedule_id}", "patch"),
        ("/v1/schedules/{schedule_id}", "delete"),
        ("/v1/schedules/{schedule_id}/trigger", "post"),
        ("/v1/schedules/{schedule_id}/fires", "get"),
        ("/v1/evals", "post"),
        ("/v1/evals/{eval_run_id}", "get"),
        ("/v1/evals/{eval_run_id}/cancel", "post"),
        ("/healthz", "get"),
    ];
    let documented = documented_operations(&doc);
    let mut wanted: Vec<(String, String)> = expected
        .iter()
        .map(|(p, m)| ((*p).to_owned(), (*m).to_owned()))
        .collect();
    wanted.sort();
    assert_eq!(documented, wanted);
    for schema in [
        "Task",
        "Recursion",
        "ToolCall",
        "LlmCall",
        "Agent",
        "ErrorBody",
        "CreateTask",
    ] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "schema {schema}"
        );
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    // Every documented operation is routed (no 404 route_not_found, no 405).
    let id = Uuid::now_v7();
    for (path, method) in &documented {
        let url = gateway.url(
            &path
                .replace("{task_id}", &id.to_string())
                .replace("{agent_id}", &id.to_string())
                .replace("{schedule_id}", &id.to_string())
                .replace("{eval_run_id}", &id.to_string()),
        );
        let request = match method.as_str() {
            "post" => gateway.client.post(url).json(&json!({})),
            "patch" => gateway.client.patch(url).json(&json!({})),
            "put" => gateway.client.put(url).json(&json!({})),
            "delete" => gateway.client.delete(url),
            _ => gateway.client.get(url),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_ne!(body["error"]["code"], "route_not_found", "{method} {path}");
        assert_ne!(status, 405, "{method} {path}");
    }
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn bad_requests_get_the_json_error_shape() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"input": "x"}), 422, "invalid_body"),
        (
            json!({"agent_id": agent, "input": "  "}),
            422,
            "invalid_body",
        ),
        (
            json!({"agent_id": "nope", "input": "x"}),
            422,
            "invalid_body",
        ),
        (
            json!({"agent_id": agent, "input": "x", "extra": 1}),
            422,
            "invalid_body",
        ),
        (
            json!({"agent_id": agent, "input": "x", "stream": "yes"}),
            422,
            "invalid_body",
        ),
        (
            json!({"agent_id": Uuid::now_v7(), "input": "x"}),
            404,
            "agent_not_found",
        ),
    ];
    for (body, status, code) in cases {
        let error = gateway.post_json("/v1/tasks", &body, status).await;
        assert_eq!(error["error"]["code"], code, "{body}");
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let malformed = gateway
        .post("/v1/tasks")
        .header("content-type", "application/json");
    let error = expect_json(malformed.body("{\"agent_id\":").send().await, 400).await;
    assert_eq!(error["error"]["code"], "invalid_json");
    let text = gateway.post("/v1/tasks").body("hello");
    let error = expect_json(text.send().await, 415).await;
    assert_eq!(error["error"]["code"], "unsupported_media_type");
    let huge = json!({"agent_id": agent, "input": "x".repeat(70_000)});
    let error = gateway.post_json("/v1/tasks", &huge, 413).await;
    assert_eq!(error["error"]["code"], "payload_too_large");
    let error = gateway.get_json("/v1/tasks/not-a-uuid", 400).await;
    assert_eq!(error["error"]["code"], "invalid_path");
    let error = gateway
        .get_json(&format!("/v1/tasks/{}", Uuid::now_v7()), 404)
        .await;
    assert_eq!(error["error"]["code"], "task_not_found");
    let error = gateway.get_json("/v2/nothing", 404).await;
    assert_eq!(error["error"]["code"], "route_not_found");
    let error = expect_json(
        gateway
            .client
            .delete(gateway.url("/v1/agents"))
            .send()
            .await,
        405,
    )
    .await;
    assert_eq!(error["error"]["code"], "method_not_allowed");
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn agents_are_created_read_and_listed() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let body = json!({"name": "helper", "model": "fake-model", "max_iteration": 7,
                      "tools": ["calculate", "current_time"]});
    let created = gateway.post_json("/v1/agents", &body, 201).await;
    let agent_id = created["agent_id"].as_str().unwrap();
    assert_eq!(
        (created["name"].as_str(), created["max_iteration"].as_i64()),
        (Some("helper"), Some(7))
    );
    assert_eq!(created["tools"], json!(["calculate", "current_time"]));
    let fetched = gateway
        .get_json(&format!("/v1/agents/{agent_id}"), 200)
        .await;
    assert_eq!(fetched, created);
    let minimal = gateway
        .post_json("/v1/agents", &json!({"name": "b", "model": "m"}), 201)
        .await;
    assert_eq!(
        (
            minimal["max_iteration"].as_i64(),
            minimal["tools"].is_null()
        ),
        (Some(30), true)
    );
    let list = gateway.get_json("/v1/agents", 200).await;
    let ids: Vec<&str> = list["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["agent_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            created["agent_id"].as_str().unwrap(),
            minimal["agent_id"].as_str().unwrap()
        ]
    );
    for bad in [
        json!({"name": "", "model": "m"}),
        json!({"name": "a"}),
        json!({"name": "a", "model": "m", "max_iteration": 0}),
        json!({"name": "a", "model": "m", "tools": ["bad name"]}),
        json!({"name": "a", "model": "m", "tools": ["calculate", "calculate"]}),
    ] {
        let error = gateway.post_json("/v1/agents", &bad, 422).await;
        assert_eq!(error["error"]["code"], "invalid_body", "{bad}");
    }
    let error = gateway
        .get_json(&format!("/v1/agents/{}", Uuid::now_v7()), 404)
        .await;
    assert_eq!(error["error"]["code"], "agent_not_found");
    let unknown = format!("/v1/agents/{}/tasks", Uuid::now_v7());
    let error = gateway.get_json(&unknown, 404).await;
    assert_eq!(error["error"]["code"], "agent_not_found");
    gateway.stop().await;
    env.stop().await;
}

/// Inserts task rows of `agent_id` ("task 0" oldest); pairs share a created_at, so that
/// a page boundary falls inside a tie.
async fn insert_history(env: &TestEnv, agent_id: Uuid, count: i32) {
    for index in 0..count {
        sqlx::query(
            "INSERT INTO tasks (task_id, agent_id, input, status, created_at) \
             VALUES ($1, $2, $3, 'completed', \
                     '2026-01-01T00:00:00Z'::timestamptz + make_interval(secs => $4))",
        )
        .bind(Uuid::now_v7())
        .bind(agent_id)
        .bind(format!("task {index}"))
        .bind(f64::from(index / 2))
        .execute(&env.pool)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn agent_history_is_paged_newest_first() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent_id = env.agent(None, None).await;
    insert_history(&env, agent_id, 5).await;
    let mut inputs = Vec::new();
    let mut path = format!("/v1/agents/{agent_id}/tasks?limit=2");
    let mut pages = 0;
    loop {
        let page = gateway.get_json(&path, 200).await;
        pages += 1;
        inputs.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["input"].as_str().unwrap().to_owned()),
        );
        match page["next_before"].as_str() {
            Some(cursor) => path = format!("/v1/agents/{agent_id}/tasks?limit=2&before={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        inputs,
        ["task 4", "task 3", "task 2", "task 1", "task 0"],
        "newest first"
    );
    let all = gateway
        .get_json(&format!("/v1/agents/{agent_id}/tasks"), 200)
        .await;
    assert_eq!(
        (
            all["tasks"].as_array().map(Vec::len),
            all["next_before"].is_null()
        ),
        (Some(5), true)
    );
    for bad in [
        "limit=0",
        "limit=101",
        &format!("before={}", Uuid::now_v7()),
    ] {
        let error = gateway
            .get_json(&format!("/v1/agents/{agent_id}/tasks?{bad}"), 422)
            .await;
        assert_eq!(error["error"]["code"], "invalid_parameter", "{bad}");
    }
    let error = gateway
        .get_json(&format!("/v1/agents/{agent_id}/tasks?limit=x"), 400)
        .await;
    assert_eq!(error["error"]["code"], "invalid_query");
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn the_agent_overview_counts_statuses_durations_tokens_and_cost() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    // Three tasks that ended in 1, 2 and 3 s, and one still running, all created now.
    for (seconds, status) in [
        (1, "completed"),
        (2, "completed"),
        (3, "failed"),
        (0, "running"),
    ] {
        sqlx::query(
            "INSERT INTO tasks (task_id, agent_id, input, status, started_at, finished_at, \
                                prompt_tokens, completion_tokens, cost_usd) \
             VALUES ($1, $2, 'x', $3, now() - make_interval(secs => $4), \
                     CASE WHEN $3 = 'running' THEN NULL ELSE now() END, 10, 5, 0.25)",
        )
        .bind(Uuid::now_v7())
        .bind(agent)
        .bind(status)
        .bind(f64::from(seconds))
        .execute(&env.pool)
        .await
        .expect("task");
    }
    let overview = gateway
        .get_json(&format!("/v1/agents/{agent}/overview?hours=2"), 200)
        .await;
    assert_eq!(overview["tasks"], 4);
    assert_eq!(
        overview["by_status"],
        json!({"completed": 2, "failed": 1, "running": 1})
    );
    let hours = overview["hours"].as_array().expect("hours");
    assert!(!hours.is_empty() && hours.len() <= 2, "{hours:?}");
    let in_buckets: i64 = hours
        .iter()
        .flat_map(|h| h["by_status"].as_object().unwrap().values())
        .map(|v| v.as_i64().unwrap())
        .sum();
    assert_eq!(in_buckets, 4);
    let p50 = overview["duration_ms_p50"].as_f64().unwrap();
    let p95 = overview["duration_ms_p95"].as_f64().unwrap();
    assert!((p50 - 2000.0).abs() < 50.0, "p50 {p50}");
    assert!((p95 - 2900.0).abs() < 50.0, "p95 {p95}");
    assert_eq!(
        (
            overview["prompt_tokens"].as_i64(),
            overview["completion_tokens"].as_i64()
        ),
        (Some(40), Some(20))
    );
    assert!((overview["cost_usd"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    gateway
        .get_json(&format!("/v1/agents/{agent}/overview?hours=0"), 422)
        .await;
    gateway
        .get_json(&format!("/v1/agents/{}/overview", Uuid::now_v7()), 404)
        .await;
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn stall_and_on_unknown_are_set_at_creation_and_resolve_refuses_what_it_cannot_do() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let body = json!({"name": "ops", "model": "m", "stall": {"repeat": 4, "action": "fail"},
                      "on_unknown": "hold"});
    let created = gateway.post_json("/v1/agents", &body, 201).await;
    assert_eq!(created["stall"], json!({"repeat": 4, "action": "fail"}));
    assert_eq!(created["on_unknown"], "hold");
    let plain = gateway
        .post_json("/v1/agents", &json!({"name": "p", "model": "m"}), 201)
        .await;
    assert_eq!(plain["stall"], json!({"repeat": 3, "action": "nudge"}));
    assert_eq!(plain["on_unknown"], "tell_model");
    for bad in [
        json!({"name": "x", "model": "m", "stall": {"repeat": 1}}),
        json!({"name": "x", "model": "m", "stall": {"action": "retry"}}),
        json!({"name": "x", "model": "m", "on_unknown": "hodl"}),
    ] {
        gateway.post_json("/v1/agents", &bad, 422).await;
    }
    let task = uuid::Uuid::now_v7();
    let path = format!("/v1/tasks/{task}/tool_calls/call_0/resolve");
    let error = gateway
        .post_json(&path, &json!({"outcome": "skip", "reason": "x"}), 404)
        .await;
    assert_eq!(error["error"]["code"], "tool_call_not_found");
    gateway
        .post_json(&path, &json!({"outcome": "skip", "reason": " "}), 422)
        .await;
    gateway
        .post_json(&path, &json!({"outcome": "maybe", "reason": "x"}), 422)
        .await;
    let listed = gateway.get_json("/v1/tool_calls?state=unknown", 200).await;
    assert_eq!(listed["tool_calls"], json!([]));
    gateway.get_json("/v1/tool_calls?state=started", 422).await;
    gateway.stop().await;
    env.stop().await;
}
