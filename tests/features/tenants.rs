//! Tenants, scoped tokens and row-level security (CONTRACT v3 §15, issue 28 items 1 and 2),
//! with the real worker, the gateway, the `agentd` binary, the fake LLM over HTTP, RabbitMQ
//! and PostgreSQL: two tenants through the gateway (another tenant's task, agent, stream
//! and list are 404 or absent, a missing scope 403, a revoked or expired token 401); every
//! row of a task's trace carries its tenant; `agentd_reader` sees only the rows of its
//! `agentd.tenant` (nothing without it, nothing of another tenant when its login is bound);
//! a task whose tenant differs from its agent's is rejected; a key bound to tenant A cannot
//! cancel B's task; `agentd token create | list | revoke` keep only the SHA-256; a control
//! message a worker forwards to the task's holder is signed again with the key that signed
//! it; and any Unicode in a token note or tenant id is stored or refused with a reason.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use agentd::config::Secret;
use agentd::config::{Settings, Signer};
use agentd::contract::ControlMessage;
use agentd::contract::control::{Cancel, Inject};
use agentd::core::scopes;
use agentd::scripted_model::{answer_reply, reflect_reply};
use agentd::store::api_tokens;
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};
use uuid::Uuid;

/// An agent of `tenant`, inserted with plain SQL as CONTRACT §4 allows.
async fn agent_in(env: &TestEnv, tenant: &str) -> Uuid {
    let agent_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agents (agent_id, name, model, tenant_id) \
         VALUES ($1, 'tenant-agent', 'fake-model', $2)",
    )
    .bind(agent_id)
    .bind(tenant)
    .execute(&env.pool)
    .await
    .expect("insert agent");
    agent_id
}

/// A scoped token of `tenant` with `scopes`, recorded as `agentd token create` does.
async fn token(env: &TestEnv, tenant: &str, scope_list: &str) -> String {
    let token = format!("test-{}", Uuid::new_v4().simple());
    let sha256 = scopes::token_sha256(&token);
    let scopes = scopes::parse_scopes(scope_list).expect("scopes");
    let row = api_tokens::NewToken {
        token_sha256: &sha256,
        tenant_id: tenant,
        scopes: &scopes,
        expires_at: None,
        note: Some("test"),
    };
    api_tokens::insert(&env.pool, &row).await.expect("token");
    token
}

/// Sends `method path` with `token` (and a JSON body): the status and JSON body.
async fn call(
    gateway: &Gateway,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = gateway.client.request(method, gateway.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn get(gateway: &Gateway, path: &str, token: &str) -> (u16, Value) {
    call(gateway, reqwest::Method::GET, path, Some(token), None).await
}

async fn post(gateway: &Gateway, path: &str, token: &str, body: Value) -> (u16, Value) {
    call(
        gateway,
        reqwest::Method::POST,
        path,
        Some(token),
        Some(body),
    )
    .await
}

/// The ids of the tasks in a `/v1/tasks` answer.
fn task_ids(list: &Value) -> Vec<String> {
    list["tasks"]
        .as_array()
        .map(|tasks| {
            (tasks.iter())
                .filter_map(|t| t["task_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Rows of `table` of `task_id` whose tenant is not `tenant`, and all of its rows.
async fn foreign_rows(env: &TestEnv, table: &str, task_id: Uuid, tenant: &str) -> (i64, i64) {
    sqlx::query_as(&format!(
        "SELECT count(*) FILTER (WHERE tenant_id <> $2), count(*) FROM {table} \
         WHERE task_id = $1"
    ))
    .bind(task_id)
    .bind(tenant)
    .fetch_one(&env.pool)
    .await
    .expect("count rows")
}

#[tokio::test]
async fn two_tenants_through_the_gateway_see_only_their_own() {
    let env = TestEnv::start().await;
    let acme_agent = agent_in(&env, "acme").await;
    let globex_agent = agent_in(&env, "globex").await;
    let acme = token(&env, "acme", "read,submit,operate,decide").await;
    let acme_reader = token(&env, "acme", "read").await;
    let globex = token(&env, "globex", "read,submit,operate,decide").await;
    // A static token: tenant `*` with admin.
    let gateway = Gateway::start(&env, &["static-admin"]).await;
    env.fake
        .script("acme-work", vec![answer_reply("acme's answer")]);
    env.fake
        .script("globex-work", vec![answer_reply("globex's answer")]);

    let body = |agent: Uuid, input: &str| json!({"agent_id": agent, "input": input});
    let (status, accepted) =
        post(&gateway, "/v1/tasks", &acme, body(acme_agent, "acme-work")).await;
    assert_eq!(status, 202, "{accepted}");
    let acme_task: Uuid = accepted["task_id"].as_str().unwrap().parse().unwrap();
    let (status, accepted) = post(
        &gateway,
        "/v1/tasks",
        &globex,
        body(globex_agent, "globex-work"),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    let globex_task: Uuid = accepted["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.wait_terminal(acme_task).await.status, "completed");
    assert_eq!(env.wait_terminal(globex_task).await.status, "completed");

    // Every row of the task's trace is its tenant's (row-level security depends on it).
    for table in [
        "tasks",
        "events",
        "recursions",
        "llm_calls",
        "llm_request_parts",
    ] {
        let (foreign, all) = foreign_rows(&env, table, acme_task, "acme").await;
        assert_eq!(foreign, 0, "{table}: rows of another tenant");
        assert!(all > 0, "{table}: no rows");
    }

    // Another tenant's task, its stream, its steering and its agent: 404, as for none.
    let task = format!("/v1/tasks/{acme_task}");
    let unknown = format!("/v1/tasks/{}", Uuid::now_v7());
    let (status, missing) = get(&gateway, &unknown, &globex).await;
    assert_eq!(status, 404);
    let (status, foreign) = get(&gateway, &task, &globex).await;
    assert_eq!(
        (status, &foreign["error"]["code"]),
        (404, &missing["error"]["code"])
    );
    for path in [
        format!("{task}/events"),
        format!("{task}/events?access_token={globex}"),
        format!("{task}/llm_calls"),
        format!("{task}/state"),
        format!("/v1/agents/{acme_agent}"),
        format!("/v1/agents/{acme_agent}/tasks"),
        format!("/v1/agents/{acme_agent}/overview"),
    ] {
        let token = (!path.contains("access_token")).then_some(globex.as_str());
        let (status, answer) = call(&gateway, reqwest::Method::GET, &path, token, None).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    for (path, body) in [
        (format!("{task}/cancel"), json!({})),
        (format!("{task}/inject"), json!({"text": "stop"})),
        (format!("{task}/fork"), json!({"from_iteration": 1})),
        (format!("{task}/rerun"), json!({})),
        (
            "/v1/tasks".to_owned(),
            json!({"agent_id": acme_agent, "input": "x"}),
        ),
    ] {
        let (status, answer) = post(&gateway, &path, &globex, body).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    // Lists hold the caller's tenant's rows only; `*` sees both.
    let (_, list) = get(&gateway, "/v1/tasks", &globex).await;
    assert_eq!(task_ids(&list), [globex_task.to_string()]);
    let (_, list) = get(&gateway, "/v1/tasks", &acme_reader).await;
    assert_eq!(task_ids(&list), [acme_task.to_string()]);
    let (_, list) = get(&gateway, "/v1/tasks", "static-admin").await;
    assert_eq!(task_ids(&list).len(), 2);
    let (_, agents) = get(&gateway, "/v1/agents", &globex).await;
    let names: Vec<&Value> = agents["agents"].as_array().unwrap().iter().collect();
    assert_eq!(names.len(), 1);
    assert_eq!(names[0]["agent_id"], json!(globex_agent));
    assert_eq!(names[0]["tenant_id"], "globex");

    // A missing scope: 403 on writes, reads still work, the stream and the page included.
    let (status, answer) = post(&gateway, "/v1/tasks", &acme_reader, body(acme_agent, "x")).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("missing_scope"))
    );
    let (status, _) = post(&gateway, &format!("{task}/cancel"), &acme_reader, json!({})).await;
    assert_eq!(status, 403);
    let (status, _) = post(&gateway, &format!("{task}/rerun"), &acme_reader, json!({})).await;
    assert_eq!(status, 403);
    let (status, answer) = post(
        &gateway,
        "/v1/agents",
        &acme,
        json!({"name": "n", "model": "m"}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("missing_scope"))
    );
    let (status, detail) = get(&gateway, &task, &acme_reader).await;
    assert_eq!(
        (status, &detail["task"]["tenant_id"]),
        (200, &json!("acme"))
    );
    let stream = gateway
        .client
        .get(gateway.url(&format!("{task}/events?access_token={acme_reader}")))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    let events = crate::support::gateway::SseStream::new(stream)
        .until_terminal()
        .await;
    assert_eq!(
        events.last().unwrap().event.as_deref(),
        Some("task.completed")
    );
    let page = gateway
        .client
        .get(gateway.url("/"))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);

    // Without a token, with a revoked or an expired one: 401.
    let (status, _) = call(&gateway, reqwest::Method::GET, "/v1/tasks", None, None).await;
    assert_eq!(status, 401);
    api_tokens::revoke(&env.pool, &scopes::token_sha256(&acme_reader))
        .await
        .expect("revoke");
    let (status, answer) = get(&gateway, "/v1/tasks", &acme_reader).await;
    assert_eq!(status, 401, "{answer}");
    sqlx::query(
        "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE token_sha256 = $1",
    )
    .bind(scopes::token_sha256(&globex))
    .execute(&env.pool)
    .await
    .expect("expire");
    let (status, answer) = get(&gateway, "/v1/tasks", &globex).await;
    assert_eq!(status, 401, "{answer}");
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn an_agent_or_task_made_through_the_gateway_is_of_its_token_s_tenant() {
    let env = TestEnv::start().await;
    let acme = token(&env, "acme", "admin").await;
    let gateway = Gateway::start(&env, &["static-admin"]).await;
    let agent = json!({"name": "acme-bot", "model": "fake-model"});
    let (status, made) = post(&gateway, "/v1/agents", &acme, agent.clone()).await;
    assert_eq!(
        (status, &made["tenant_id"]),
        (201, &json!("acme")),
        "{made}"
    );
    let other = json!({"name": "x", "model": "m", "tenant_id": "globex"});
    let (status, answer) = post(&gateway, "/v1/agents", &acme, other.clone()).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("wrong_tenant"))
    );
    let (status, made) = post(&gateway, "/v1/agents", "static-admin", other).await;
    assert_eq!(
        (status, &made["tenant_id"]),
        (201, &json!("globex")),
        "{made}"
    );
    let globex_agent = made["agent_id"].clone();
    // A task names its token's tenant only; one of every tenant naming another tenant than
    // its agent's is rejected by the worker, the reason in tasks.error.
    let acme_agent = agent_in(&env, "acme").await;
    let task = json!({"agent_id": acme_agent, "input": "x", "tenant_id": "globex"});
    let (status, answer) = post(&gateway, "/v1/tasks", &acme, task.clone()).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("wrong_tenant"))
    );
    let (status, accepted) = post(&gateway, "/v1/tasks", "static-admin", task).await;
    assert_eq!(status, 202, "{accepted}");
    let task_id: Uuid = accepted["task_id"].as_str().unwrap().parse().unwrap();
    let rejected = env.wait_terminal(task_id).await;
    assert_eq!(rejected.status, "rejected");
    assert!(
        rejected
            .error
            .unwrap_or_default()
            .contains("not the tenant of its agent")
    );
    let task = json!({"agent_id": globex_agent, "input": "y"});
    let (status, _) = post(&gateway, "/v1/tasks", &acme, task).await;
    assert_eq!(status, 404, "another tenant's agent");
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_task_whose_tenant_differs_from_its_agent_s_is_rejected() {
    let env = TestEnv::start().await;
    let agent = agent_in(&env, "acme").await;
    env.fake.script("own-tenant", vec![answer_reply("ok")]);
    let (foreign, own) = (Uuid::now_v7(), Uuid::now_v7());
    let body = json!({"task_id": foreign, "agent_id": agent, "input": "x", "tenant_id": "globex"});
    env.publish_raw(body.to_string().as_bytes()).await;
    let body =
        json!({"task_id": own, "agent_id": agent, "input": "own-tenant", "tenant_id": "acme"});
    env.publish_raw(body.to_string().as_bytes()).await;
    let rejected = env.wait_terminal(foreign).await;
    assert_eq!(rejected.status, "rejected");
    let error = rejected.error.unwrap_or_default();
    assert!(
        error.contains("\"globex\"") && error.contains("not the tenant of its agent"),
        "{error}"
    );
    assert!(
        !error.contains("acme"),
        "the agent's tenant is not told: {error}"
    );
    assert_eq!(
        rejected.tenant_id, "globex",
        "recorded as the message named it"
    );
    assert!(env.fake.requests_for("x").is_empty(), "nothing ran");
    let ran = env.wait_terminal(own).await;
    assert_eq!(
        (ran.status.as_str(), ran.tenant_id.as_str()),
        ("completed", "acme")
    );
    // Without tenant_id, the task is its agent's tenant's.
    env.fake.script("no-tenant", vec![answer_reply("ok")]);
    let task = env.submit(agent, "no-tenant").await;
    assert_eq!(env.wait_terminal(task).await.tenant_id, "acme");
    env.stop().await;
}

const OPS_SECRET: &str = "ops-secret-0123456789";
const ACME_SECRET: &str = "acme-secret-0123456789";

/// Signing on: `ops` (bound to no tenant, the one agentd signs with) and `acme-key` (bound
/// to tenant `acme`).
fn signing(settings: &mut Settings) {
    settings.control.signing_keys = BTreeMap::from([
        ("ops".to_owned(), Secret::from(OPS_SECRET)),
        ("acme-key".to_owned(), Secret::from(ACME_SECRET)),
    ]);
    settings.control.key_tenants = BTreeMap::from([("acme-key".to_owned(), "acme".to_owned())]);
}

/// Publishes `message` on the control fanout, signed with `key_id`'s `secret`.
async fn publish_signed(env: &TestEnv, message: &ControlMessage, key_id: &str, secret: &str) {
    let secret = Secret::from(secret);
    let signer = Some(Signer {
        key_id,
        secret: &secret,
    });
    let body = message.body();
    let properties =
        agentd::amqp::signing::control_properties(message, &body, signer, FieldTable::default());
    env.publisher
        .publish(&env.settings.amqp.control_exchange, "", &body, properties)
        .await
        .expect("publish a control message");
}

#[tokio::test]
async fn a_key_bound_to_one_tenant_cannot_cancel_another_tenant_s_task() {
    let env = TestEnv::start_with(signing).await;
    let (acme_agent, globex_agent) = (agent_in(&env, "acme").await, agent_in(&env, "globex").await);
    // Both tasks are in their first LLM call when the cancels come.
    let slow = || {
        vec![
            reflect_reply("thinking").with_delay(Duration::from_millis(1500)),
            answer_reply("done"),
        ]
    };
    env.fake.script("globex-slow", slow());
    env.fake.script("acme-slow", slow());
    let globex_task = env.submit(globex_agent, "globex-slow").await;
    let acme_task = env.submit(acme_agent, "acme-slow").await;
    env.wait_status(globex_task, "running").await;
    env.wait_status(acme_task, "running").await;
    for task_id in [globex_task, acme_task] {
        let cancel = ControlMessage::Cancel(Cancel { task_id });
        publish_signed(&env, &cancel, "acme-key", ACME_SECRET).await;
    }
    let acme_end = env.wait_terminal(acme_task).await;
    assert_eq!(acme_end.status, "cancelled", "its own tenant's task");
    let globex_end = env.wait_terminal(globex_task).await;
    assert_eq!(
        globex_end.status, "completed",
        "another tenant's task runs on"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_forwarded_control_message_is_signed_again_with_the_key_that_signed_it() {
    let env = TestEnv::start_with(signing).await;
    let agent = agent_in(&env, "acme").await;
    // The task is held by a worker that is not this process's: the test plays it, with a
    // live lease and the control queue a worker declares, so the worker that reads the
    // message from the pending queue forwards it there.
    let (task_id, holder) = (Uuid::now_v7(), Uuid::now_v7());
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, started_at, lease_owner, \
                            lease_until, tenant_id) \
         VALUES ($1, $2, 'held elsewhere', 'running', now(), $3, now() + interval '1 hour', \
                 'acme')",
    )
    .bind(task_id)
    .bind(agent)
    .bind(holder)
    .execute(&env.pool)
    .await
    .expect("a task held elsewhere");
    let names = &env.settings.amqp;
    let queue = names.worker_control_queue(holder);
    let broker = env.publisher.broker();
    let channel = broker.channel().await.expect("channel");
    agentd::amqp::topology::declare_worker_queue(&channel, names, &queue)
        .await
        .expect("the holder's queue");

    // An inject signed by the key bound to the task's tenant, one signed by the workers' key.
    let by_acme = ControlMessage::Inject(Inject {
        task_id,
        text: "from acme".into(),
    });
    let by_ops = ControlMessage::Inject(Inject {
        task_id,
        text: "from ops".into(),
    });
    publish_signed(&env, &by_acme, "acme-key", ACME_SECRET).await;
    publish_signed(&env, &by_ops, "ops", OPS_SECRET).await;

    let secrets = BTreeMap::from([("ops", OPS_SECRET), ("acme-key", ACME_SECRET)]);
    let mut forwarded = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while forwarded.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "forwarded: {forwarded:?}"
        );
        let got = channel
            .basic_get(
                queue.as_str().into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .expect("basic_get");
        let Some(message) = got else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let properties = &message.delivery.properties;
        let headers = properties.headers().clone().unwrap_or_default();
        if !matches!(
            headers.inner().get("x-agentd-forwarded"),
            Some(AMQPValue::Boolean(true))
        ) {
            continue; // the fanout's own copy
        }
        let (key_id, signature) = agentd::amqp::signing::signature_of(properties);
        let body = message.delivery.data.clone();
        let verified = agentd::core::signing::verify(
            |id| secrets.get(id).map(|s| s.as_bytes()),
            key_id.as_deref(),
            signature.as_deref(),
            &body,
        )
        .map(str::to_owned);
        let text: Value = serde_json::from_slice(&body).expect("JSON body");
        forwarded.insert(text["text"].as_str().unwrap_or("").to_owned(), verified);
    }
    assert_eq!(
        forwarded["from acme"],
        Ok("acme-key".to_owned()),
        "signed again by its key"
    );
    assert_eq!(forwarded["from ops"], Ok("ops".to_owned()));
    env.stop().await;
}

/// Runs the real `agentd` binary with the test's settings.
async fn agentd(settings: &Settings, args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(settings))
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("agentd ends")
        .expect("agentd runs")
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn tokens_are_created_listed_and_revoked_with_the_cli_and_only_their_sha256_is_kept() {
    let env = TestEnv::start().await;
    let settings = &env.settings;
    // A gateway open beyond loopback needs tokens: static ones or, from now on, scoped ones.
    let mut open = settings.clone();
    open.gateway.bind = "0.0.0.0:0".to_owned();
    let binds = || agentd::gateway::bind(open.clone(), tokio_util::sync::CancellationToken::new());
    assert!(binds().await.is_err(), "no token: refused");
    let created = agentd(
        settings,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--scopes",
            "read,submit",
            "--expires",
            "30d",
            "--note",
            "ci bot",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", stderr(&created));
    let token = stdout(&created).trim().to_owned();
    assert!(token.starts_with("agentd_") && token.len() > 60, "{token}");
    let sha256 = scopes::token_sha256(&token);
    let row = api_tokens::find(&env.pool, &sha256)
        .await
        .expect("find")
        .expect("stored");
    assert_eq!(
        (row.tenant_id.as_str(), row.note.as_deref()),
        ("acme", Some("ci bot"))
    );
    assert_eq!(row.scopes, ["read", "submit"]);
    let days = (row.expires_at.expect("expires") - chrono::Utc::now()).num_days();
    assert!((29..=30).contains(&days), "{days}");
    // The token itself is nowhere in the database.
    let anywhere: i64 =
        sqlx::query_scalar("SELECT count(*) FROM api_tokens t WHERE strpos(t::text, $1) > 0")
            .bind(&token)
            .fetch_one(&env.pool)
            .await
            .expect("search");
    assert_eq!(anywhere, 0);

    let listed = agentd(settings, &["token", "list"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listing = stdout(&listed);
    assert!(
        listing.contains(&sha256[..12]) && listing.contains("ci bot"),
        "{listing}"
    );
    assert!(!listing.contains(&token), "the token is never shown again");

    assert!(binds().await.is_ok(), "a live scoped token closes it");
    let gateway = Gateway::start(&env, &[]).await;
    let (status, _) = get(&gateway, "/v1/tasks", &token).await;
    assert_eq!(status, 200);
    let revoked = agentd(settings, &["token", "revoke", &sha256[..10]]).await;
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    let (status, answer) = get(&gateway, "/v1/tasks", &token).await;
    assert_eq!(status, 401, "{answer}");

    // Mistakes are refused before anything connects, naming the flag.
    for (args, needle) in [
        (
            vec!["--tenant", "acme", "--scopes", "read,write"],
            "--scopes",
        ),
        (vec!["--tenant", "", "--scopes", "read"], "--tenant"),
        (
            vec!["--tenant", "acme", "--scopes", "read", "--expires", "soon"],
            "--expires",
        ),
    ] {
        let mut full = vec!["token", "create"];
        full.extend(args);
        let refused = agentd(settings, &full).await;
        assert_eq!(refused.status.code(), Some(2), "{full:?}");
        assert!(stderr(&refused).contains(needle), "{}", stderr(&refused));
    }
    let unknown = agentd(settings, &["token", "revoke", "0123456789abcdef"]).await;
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    gateway.stop().await;
    env.stop().await;
}

/// Text that PostgreSQL, JSON or Unicode treat specially, NUL first.
fn outside_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop_oneof![
        3 => proptest::sample::select(&["\u{0}", "\\u0000", "\\", "\"", "\u{FFFF}", "\u{10FFFF}", "好", " ", "*"][..])
            .prop_map(str::to_owned),
        2 => any::<char>().prop_map(String::from),
        2 => "[a-z ]{0,8}",
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

#[tokio::test]
async fn any_unicode_in_a_token_note_or_tenant_id_is_stored_or_refused_with_a_reason() {
    use proptest::test_runner::{Config, TestRunner};

    let env = TestEnv::without_worker(|_| {}).await;
    let mut runner = TestRunner::new(Config {
        cases: 48,
        ..Config::default()
    });
    let strategy = (outside_text(), outside_text());
    let cases = std::cell::RefCell::new(Vec::new());
    runner
        .run(&strategy, |case| {
            cases.borrow_mut().push(case);
            Ok(())
        })
        .expect("cases");
    let (mut stored, mut refused) = (0, 0);
    for (tenant, note) in cases.into_inner() {
        let tenant = match agentd::core::tenancy::parse_tenant(&tenant, true) {
            Ok(tenant) => tenant,
            Err(err) => {
                assert!(!err.to_string().is_empty());
                refused += 1;
                continue;
            }
        };
        let note = agentd::core::scopes::parse_note(&note).expect("a short note is kept");
        let token = format!("t-{}", Uuid::new_v4());
        let sha256 = scopes::token_sha256(&token);
        let row = api_tokens::NewToken {
            token_sha256: &sha256,
            tenant_id: &tenant,
            scopes: &[agentd::core::scopes::Scope::Read],
            expires_at: None,
            note: Some(&note),
        };
        api_tokens::insert(&env.pool, &row).await.expect("stored");
        let back = api_tokens::find(&env.pool, &sha256)
            .await
            .expect("read")
            .expect("row");
        assert_eq!((back.tenant_id, back.note), (tenant.clone(), Some(note)));
        // The same tenant on an agent and a task message's tenant_id.
        if tenant != "*" {
            sqlx::query(
                "INSERT INTO agents (agent_id, name, model, tenant_id) VALUES ($1, 'u', 'm', $2)",
            )
            .bind(Uuid::now_v7())
            .bind(&tenant)
            .execute(&env.pool)
            .await
            .expect("an agent of that tenant");
        }
        stored += 1;
    }
    assert!(
        stored > 0 && refused > 0,
        "stored {stored}, refused {refused}"
    );
    env.stop().await;
}

/// A login role made for one test (roles belong to the whole server): dropped with what it
/// was granted when the test ends, even by a panic.
struct ReaderLogin {
    name: String,
    database_url: String,
}

impl ReaderLogin {
    async fn create(env: &TestEnv) -> Self {
        let name = format!(
            "agentd_test_reader_{}",
            &Uuid::new_v4().simple().to_string()[..12]
        );
        sqlx::query(&format!("CREATE ROLE {name} LOGIN IN ROLE agentd_reader"))
            .execute(&env.pool)
            .await
            .expect("create the login");
        Self {
            name,
            database_url: env.settings.database.url.clone(),
        }
    }

    /// A session of the login on the test's database.
    async fn connect(&self) -> sqlx::PgConnection {
        use sqlx::Connection;
        let url = self.database_url.replacen(
            "postgres://postgres@",
            &format!("postgres://{}@", self.name),
            1,
        );
        sqlx::PgConnection::connect(&url)
            .await
            .expect("connect as the reader")
    }
}

impl Drop for ReaderLogin {
    fn drop(&mut self) {
        let (name, url) = (self.name.clone(), self.database_url.clone());
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok(pool) = sqlx::PgPool::connect(&url).await {
                    let _ = sqlx::query(&format!("DROP OWNED BY {name}"))
                        .execute(&pool)
                        .await;
                    let _ = sqlx::query(&format!("DROP ROLE IF EXISTS {name}"))
                        .execute(&pool)
                        .await;
                    pool.close().await;
                }
            });
        });
        let _ = dropping.join();
    }
}

/// Every tenant-scoped table (and the record's view) a reader may query.
const READABLE: [&str; 16] = [
    "agents",
    "agent_versions",
    "agent_channels",
    "tasks",
    "recursions",
    "llm_calls",
    "tool_calls",
    "approvals",
    "events",
    "llm_request_parts",
    "llm_call_bodies",
    "schedules",
    "schedule_fires",
    "operator_actions",
    "conversations",
    "tenants",
];

/// How many rows of `table` the session sees.
async fn visible(reader: &mut sqlx::PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&mut *reader)
        .await
        .unwrap_or_else(|err| panic!("{table}: {err}"))
}

#[tokio::test]
async fn agentd_reader_sees_only_the_rows_of_its_tenant() {
    let env = TestEnv::start().await;
    let (acme_agent, globex_agent) = (agent_in(&env, "acme").await, agent_in(&env, "globex").await);
    env.fake.script("acme-rls", vec![answer_reply("a")]);
    env.fake.script("globex-rls", vec![answer_reply("g")]);
    let acme_task = env.submit(acme_agent, "acme-rls").await;
    let globex_task = env.submit(globex_agent, "globex-rls").await;
    env.wait_terminal(acme_task).await;
    env.wait_terminal(globex_task).await;
    sqlx::query("INSERT INTO tenants (tenant_id, max_running) VALUES ('acme', 50), ('globex', 50)")
        .execute(&env.pool)
        .await
        .expect("tenants");
    let login = ReaderLogin::create(&env).await;
    let mut reader = login.connect().await;

    // Without agentd.tenant: nothing at all.
    for table in READABLE {
        assert_eq!(
            visible(&mut reader, table).await,
            0,
            "{table} without agentd.tenant"
        );
    }
    // With it: that tenant's rows, and only those.
    sqlx::query("SET agentd.tenant = 'acme'")
        .execute(&mut reader)
        .await
        .expect("set");
    for table in READABLE
        .iter()
        .filter(|t| !t.starts_with("agent_") && **t != "llm_call_bodies")
    {
        let foreign: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} WHERE tenant_id <> 'acme'"
        ))
        .fetch_one(&mut reader)
        .await
        .expect("count");
        assert_eq!(foreign, 0, "{table}");
    }
    let tasks: Vec<Uuid> = sqlx::query_scalar("SELECT task_id FROM tasks")
        .fetch_all(&mut reader)
        .await
        .expect("tasks");
    assert_eq!(tasks, [acme_task]);
    for table in [
        "agents",
        "agent_versions",
        "agent_channels",
        "events",
        "recursions",
        "llm_calls",
        "llm_request_parts",
        "llm_call_bodies",
        "tenants",
    ] {
        assert!(
            visible(&mut reader, table).await > 0,
            "{table}: the tenant's own rows"
        );
    }
    let versions: Vec<Uuid> = sqlx::query_scalar("SELECT DISTINCT agent_id FROM agent_versions")
        .fetch_all(&mut reader)
        .await
        .expect("versions");
    assert_eq!(versions, [acme_agent]);
    // Tokens are not a reader's, and a reader writes nothing.
    assert!(
        sqlx::query("SELECT count(*) FROM api_tokens")
            .execute(&mut reader)
            .await
            .is_err()
    );
    assert!(
        sqlx::query("DELETE FROM tasks")
            .execute(&mut reader)
            .await
            .is_err()
    );

    // A login bound to its tenant reads nothing of another, whatever it sets.
    sqlx::query("INSERT INTO tenant_readers (login, tenant_id) VALUES ($1, 'globex')")
        .bind(&login.name)
        .execute(&env.pool)
        .await
        .expect("bind the login");
    assert_eq!(
        visible(&mut reader, "tasks").await,
        0,
        "bound to globex, set to acme"
    );
    sqlx::query("SET agentd.tenant = 'globex'")
        .execute(&mut reader)
        .await
        .expect("set");
    let tasks: Vec<Uuid> = sqlx::query_scalar("SELECT task_id FROM tasks")
        .fetch_all(&mut reader)
        .await
        .expect("tasks");
    assert_eq!(tasks, [globex_task]);
    assert!(
        sqlx::query("SELECT * FROM tenant_readers")
            .execute(&mut reader)
            .await
            .is_err()
    );
    drop(reader);
    drop(login);
    env.stop().await;
}
