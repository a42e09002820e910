//! `POST /v1/evals` and `GET /v1/evals/{id}` (CONTRACT v3 §13, §15): a structured
//! selection (no SQL: a `where` field is refused), `operate` needed to start a run and
//! `read` to read one (403 without), another tenant's agent or run 404 like a missing one,
//! and the run read back with its items filled once its reruns end.

use jsonschema::{Draft, Registry};
use serde_json::{Value, json};
use uuid::Uuid;

use super::wait_completed;
use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use agentd::core::{eval, scopes};
use agentd::scripted_model::answer_reply;
use agentd::store::api_tokens;

async fn agent_in(env: &TestEnv, tenant: &str) -> Uuid {
    let agent_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agents (agent_id, name, model, tenant_id) \
         VALUES ($1, 'eval-agent', 'fake-model', $2)",
    )
    .bind(agent_id)
    .bind(tenant)
    .execute(&env.pool)
    .await
    .expect("insert agent");
    agent_id
}

async fn token(env: &TestEnv, tenant: &str, scope_list: &str) -> String {
    let token = format!("test-{}", Uuid::new_v4().simple());
    let sha256 = scopes::token_sha256(&token);
    let scopes = scopes::parse_scopes(scope_list).expect("scopes");
    let row = api_tokens::NewToken {
        token_sha256: &sha256,
        tenant_id: tenant,
        scopes: &scopes,
        expires_at: None,
        note: Some("evals"),
    };
    api_tokens::insert(&env.pool, &row).await.expect("token");
    token
}

async fn call(gateway: &Gateway, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    // The client itself: the helpers' requests carry the gateway's static token already.
    let request = match &body {
        Some(body) => gateway.client.post(gateway.url(path)).json(body),
        None => gateway.client.get(gateway.url(path)),
    };
    let request = request.bearer_auth(token);
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

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
async fn the_routes_start_and_read_runs_of_the_caller_s_tenant_only() {
    let env = TestEnv::start().await;
    let agent = agent_in(&env, "acme").await;
    env.fake.script(
        "evalroute",
        vec![
            answer_reply("routed"),
            answer_reply("routed"),
            answer_reply("routed"),
        ],
    );
    let source = env.submit(agent, "evalroute").await;
    assert_eq!(env.wait_terminal(source).await.status, "completed");
    let operator = token(&env, "acme", "read,operate").await;
    let reader = token(&env, "acme", "read").await;
    let submitter = token(&env, "acme", "read,submit").await;
    let stranger = token(&env, "globex", "read,operate").await;
    let gateway = Gateway::start(&env, &["static-admin"]).await;
    let body = json!({"agent_id": agent, "status": "completed", "rate": 50.0, "name": "nightly"});

    // A missing scope is 403; another tenant's agent is as unknown as a missing one.
    for token in [&reader, &submitter] {
        let (status, answer) = call(&gateway, "/v1/evals", token, Some(body.clone())).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (403, &json!("missing_scope"))
        );
    }
    let (status, answer) = call(&gateway, "/v1/evals", &stranger, Some(body.clone())).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("agent_not_found"))
    );
    // Never SQL, and a wrong field is named.
    let mut with_sql = body.clone();
    with_sql["where"] = json!("true");
    let (status, _) = call(&gateway, "/v1/evals", &operator, Some(with_sql)).await;
    assert_eq!(status, 422);
    for (field, value) in [("llm", json!("replayed")), ("status", json!("rejected"))] {
        let mut wrong = body.clone();
        wrong[field] = value;
        let (status, answer) = call(&gateway, "/v1/evals", &operator, Some(wrong)).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (400, &json!("invalid_eval"))
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field)
        );
    }
    let nothing = json!({"agent_id": agent, "task_ids": [Uuid::now_v7()]});
    let (status, answer) = call(&gateway, "/v1/evals", &operator, Some(nothing)).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!("nothing_selected"))
    );
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM eval_runs")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "no refused request made a run");

    let (status, created) = call(&gateway, "/v1/evals", &operator, Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let run = Uuid::parse_str(created["eval_run_id"].as_str().unwrap()).unwrap();
    assert_eq!(created["tenant_id"], "acme");
    assert_eq!(created["llm_mode"], "live");
    assert_eq!(created["tools_mode"], "recorded");
    assert_eq!(created["items"].as_array().unwrap().len(), 1);
    assert_eq!(created["items"][0]["source_task_id"], json!(source));
    assert_eq!(
        created["items"][0]["rerun_task_id"],
        json!(eval::rerun_task_id(run, source))
    );

    let path = format!("/v1/evals/{run}");
    let (status, answer) = call(&gateway, &path, &stranger, None).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (404, &json!("eval_not_found"))
    );
    let missing = format!("/v1/evals/{}", Uuid::now_v7());
    let (status, _) = call(&gateway, &missing, &reader, None).await;
    assert_eq!(status, 404);
    wait_completed(&env, run).await;
    let (status, read) = call(&gateway, &path, &reader, None).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["status"], "completed");
    assert_eq!(
        (read["passed"].as_u64(), read["pass_ratio"].as_f64()),
        (Some(1), Some(1.0))
    );
    assert_eq!(read["items"][0]["passed"], true);
    assert_eq!(read["items"][0]["answer_equal"], true);
    let (_, doc) = call(&gateway, "/openapi.json", &reader, None).await;
    assert!(doc["paths"]["/v1/evals/{eval_run_id}"]["get"].is_object());
    assert_documented(&doc, "EvalRun", &created);
    assert_documented(&doc, "EvalRun", &read);
    let (status, admin) = call(&gateway, &path, "static-admin", None).await;
    assert_eq!((status, &admin["eval_run_id"]), (200, &json!(run)));

    // Cancelling: `operate` of the run's tenant, only while it runs.
    let cancel = format!("{path}/cancel");
    for (token, status, code) in [
        (&reader, 403, "missing_scope"),
        (&stranger, 404, "eval_not_found"),
        (&operator, 409, "eval_not_running"),
    ] {
        let (got, answer) = call(&gateway, &cancel, token, Some(json!({}))).await;
        assert_eq!((got, &answer["error"]["code"]), (status, &json!(code)));
    }
    let unknown = format!("/v1/evals/{}/cancel", Uuid::now_v7());
    let (status, _) = call(&gateway, &unknown, &operator, Some(json!({}))).await;
    assert_eq!(status, 404);
    env.fake.hold();
    let again = json!({"agent_id": agent, "status": "completed", "rate": 50.0});
    let (status, second) = call(&gateway, "/v1/evals", &operator, Some(again)).await;
    assert_eq!(status, 201, "{second}");
    let second_cancel = format!(
        "/v1/evals/{}/cancel",
        second["eval_run_id"].as_str().unwrap()
    );
    let (status, cancelled) = call(&gateway, &second_cancel, &operator, Some(json!({}))).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert!(doc["paths"]["/v1/evals/{eval_run_id}/cancel"]["post"].is_object());
    assert_documented(&doc, "EvalRun", &cancelled);
    env.fake.release();
    gateway.stop().await;
    env.stop().await;
}
