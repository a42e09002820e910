//! Who may steer, and the smaller doors (CONTRACT v3 §15, issue 28 items 4 and 5), with the
//! real worker, the fake LLM over HTTP, RabbitMQ and PostgreSQL: with `control.signing_keys`
//! set, an approval that is unsigned, signed with a wrong secret or an unknown key, edited
//! after signing, or signed by a key bound to another tenant changes nothing (and is
//! counted by reason), while a signed one decides and is recorded with its key; the gateway
//! and the CLI sign what they publish; a token-less gateway refuses a DNS-rebinding `Host`;
//! an inject over `control.max_inject_bytes` is refused at every door; a conversation
//! belongs to the agent of its first turn; and a cancel for an id no message brings leaves
//! a tombstone only for `control.tombstone_secs`.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::gateway::Gateway;
use crate::support::harness::{self, TestEnv};
use crate::support::process::env_for;
use crate::support::wait::{self, NEXT_STEP_WITHIN};
use agentd::config::Secret;
use agentd::config::{Settings, Signer};
use agentd::contract::ControlMessage;
use agentd::contract::control::{Approval, Cancel, Inject, Pause};
use agentd::core::approval::DecisionKind;
use agentd::scripted_model::{answer_reply, call_tool_reply, reflect_reply};
use lapin::types::FieldTable;
use serde_json::{Value, json};
use uuid::Uuid;

/// A cancel through the gateway ends the task within this: the contract's second, plus
/// the HTTP request and the gateway's signing.
const GATEWAY_CANCEL_WITHIN: Duration = Duration::from_secs(3);

/// A tombstone of `control.tombstone_secs = 2` is gone within this: its age, plus a period
/// of the tombstone sweep (`worker::control::tombstones::period`), plus a margin.
const TOMBSTONE_GONE_WITHIN: Duration = Duration::from_secs(15);

const OPS_SECRET: &str = "ops-secret-0123456789";
const ACME_SECRET: &str = "acme-secret-0123456789";

/// Signing on: `ops` (bound to no tenant, the one agentd signs with) and `acme-key` (bound
/// to tenant `acme`; the tasks of these tests are of tenant `default`).
fn signing(settings: &mut Settings) {
    settings.control.signing_keys = BTreeMap::from([
        ("ops".to_owned(), Secret::from(OPS_SECRET)),
        ("acme-key".to_owned(), Secret::from(ACME_SECRET)),
    ]);
    settings.control.key_tenants = BTreeMap::from([("acme-key".to_owned(), "acme".to_owned())]);
}

/// Publishes `body` as a control message of `message`'s type, signed by `signer` when given.
async fn publish(env: &TestEnv, message: &ControlMessage, body: &[u8], signer: Option<Signer<'_>>) {
    let properties =
        agentd::amqp::signing::control_properties(message, body, signer, FieldTable::default());
    env.publisher
        .publish(&env.settings.amqp.control_exchange, "", body, properties)
        .await
        .expect("publish a control message");
}

/// A gated `calculate` call of a new task, waiting for a decision: the task id.
async fn waiting_for_approval(env: &TestEnv, marker: &str) -> Uuid {
    let agent = env.agent(None, None).await;
    sqlx::query("UPDATE agents SET approval_tools = ARRAY['calculate'] WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("gate calculate");
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("calculate", json!({"expression": "1+1"}))]),
            answer_reply("decided"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    task_id
}

fn approval(task_id: Uuid, decision: DecisionKind, by: &str) -> Approval {
    Approval {
        task_id,
        tool_call_id: "call_1".into(),
        decision,
        arguments: (decision == DecisionKind::Edit).then(|| json!({"expression": "6*7"})),
        reason: None,
        result: None,
        by: Some(by.into()),
    }
}

/// (decision, arguments_edited, decided_by, decided_by_verified) of the task's call_1.
async fn decided_row(
    env: &TestEnv,
    task_id: Uuid,
) -> (
    Option<String>,
    Option<Value>,
    Option<String>,
    Option<String>,
) {
    sqlx::query_as(
        "SELECT decision, arguments_edited, decided_by, decided_by_verified FROM approvals \
         WHERE task_id = $1 AND tool_call_id = 'call_1'",
    )
    .bind(task_id)
    .fetch_one(&env.pool)
    .await
    .expect("the approval row")
}

/// The value of a Prometheus series line `name{labels} value` in a scrape.
fn series(scrape: &str, name_and_labels: &str) -> f64 {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn an_unsigned_or_wrongly_signed_approval_changes_nothing_and_a_signed_one_decides() {
    let metrics = harness::free_local_addr();
    let env = TestEnv::start_with(|s| {
        signing(s);
        s.metrics.bind = metrics.clone();
    })
    .await;
    let task_id = waiting_for_approval(&env, "steer-signed").await;

    // What the security probe sent: an edit with the attacker's arguments under any name.
    let forged = ControlMessage::Approval(approval(task_id, DecisionKind::Edit, "ana"));
    let body = forged.body();
    let ops = Secret::from(OPS_SECRET);
    let wrong = Secret::from("a guess");
    let acme = Secret::from(ACME_SECRET);
    let signer = |key_id, secret| Some(Signer { key_id, secret });
    publish(&env, &forged, &body, None).await;
    publish(&env, &forged, &body, signer("ops", &wrong)).await;
    publish(&env, &forged, &body, signer("nobody", &ops)).await;
    // Signed, then edited on the way: the signature is the other body's.
    let approve_body = ControlMessage::Approval(approval(task_id, DecisionKind::Approve, "ops"));
    let signed_other = agentd::amqp::signing::control_properties(
        &approve_body,
        &approve_body.body(),
        signer("ops", &ops),
        FieldTable::default(),
    );
    env.publisher
        .publish(&env.settings.amqp.control_exchange, "", &body, signed_other)
        .await
        .expect("publish");
    // Well signed by a key that steers only tenant acme's tasks.
    publish(&env, &forged, &body, signer("acme-key", &acme)).await;
    // Then a signed approval, last: had any of the above been applied, it would have won.
    let good = ControlMessage::Approval(approval(task_id, DecisionKind::Approve, "bea"));
    publish(&env, &good, &good.body(), signer("ops", &ops)).await;

    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    let (decision, edited, by, verified) = decided_row(&env, task_id).await;
    assert_eq!(decision.as_deref(), Some("approve"));
    assert_eq!(edited, None, "no forged edit applied");
    assert_eq!(by.as_deref(), Some("bea"));
    assert_eq!(verified.as_deref(), Some("ops"), "the key that signed it");
    let arguments: Value =
        sqlx::query_scalar("SELECT arguments FROM tool_calls WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("the call");
    assert_eq!(
        arguments,
        json!({"expression": "1+1"}),
        "ran as the model asked"
    );
    let stored = env.stored_events(task_id).await;
    let decided: Vec<&Value> = stored
        .iter()
        .filter(|e| e["type"] == "approval.decided")
        .collect();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["verified_by"], "ops");
    assert_eq!(decided[0]["data"]["by"], "bea");

    // Each refusal counted once, by reason (at least: the tests of this binary share the recorder).
    let (status, scrape) = harness::http_get(&metrics, "/metrics").await;
    assert_eq!(status, 200);
    let rejected = |reason: &str| {
        series(
            &scrape,
            &format!("agentd_control_rejected_total{{reason=\"{reason}\"}}"),
        )
    };
    assert!(rejected("unsigned") >= 1.0, "{scrape}");
    assert!(rejected("bad_signature") >= 2.0, "{scrape}");
    assert!(rejected("unknown_key") >= 1.0, "{scrape}");
    assert!(rejected("wrong_tenant") >= 1.0, "{scrape}");
    assert!(scrape.contains("agentd_control_rejected_total{reason=\"invalid\"}"));
    env.stop().await;
}

#[tokio::test]
async fn the_gateway_and_the_cli_sign_what_they_publish_and_record_who_decided() {
    let env = TestEnv::start_with(signing).await;
    let agent = env.agent(None, None).await;
    // Two slow tasks: an unsigned cancel leaves the first alone, the gateway's stops the second.
    let slow = Duration::from_secs(4);
    env.fake
        .script("steer-slow-a", vec![answer_reply("a").with_delay(slow)]);
    env.fake
        .script("steer-slow-b", vec![answer_reply("b").with_delay(slow)]);
    let first = env.submit(agent, "steer-slow-a").await;
    let second = env.submit(agent, "steer-slow-b").await;
    env.wait_status(first, "running").await;
    env.wait_status(second, "running").await;
    let cancel = ControlMessage::Cancel(Cancel { task_id: first });
    publish(&env, &cancel, &cancel.body(), None).await;
    let gateway = Gateway::start(&env, &["tok-1"]).await;
    gateway
        .post_json(&format!("/v1/tasks/{second}/cancel"), &json!({}), 202)
        .await;
    let started = Instant::now();
    assert_eq!(env.wait_terminal(second).await.status, "cancelled");
    assert!(
        started.elapsed() < GATEWAY_CANCEL_WITHIN,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        env.wait_terminal(first).await.status,
        "completed",
        "unsigned cancel ignored"
    );

    // A decision through the gateway is the token's; through the CLI the OS user's.
    let by_gateway = waiting_for_approval(&env, "steer-gateway").await;
    gateway
        .post_json(
            &format!("/v1/tasks/{by_gateway}/approvals/call_1"),
            &json!({"decision": "approve", "by": "anyone at all"}),
            200,
        )
        .await;
    let (_, _, by, verified) = decided_row(&env, by_gateway).await;
    assert_eq!(by.as_deref(), Some("anyone at all"));
    let verified = verified.expect("verified by the token");
    assert!(
        verified.starts_with("* (gateway token sha256:"),
        "{verified}"
    );
    assert!(
        !verified.contains("tok-1"),
        "the token itself is never stored"
    );
    gateway.stop().await;

    let by_cli = waiting_for_approval(&env, "steer-cli").await;
    let (id, call) = (by_cli.to_string(), "call_1");
    let output = agentd(
        &env.settings,
        &["approve", &id, call, "--by", "claimed"],
        &[],
    )
    .await;
    assert!(output.status.success(), "{output:?}");
    let (_, _, by, verified) = decided_row(&env, by_cli).await;
    assert_eq!(by.as_deref(), Some("claimed"));
    assert_eq!(verified, Some(whoami()), "the OS user, not $USER");

    // `agentd pause` signs with the configured key: the worker obeys.
    env.fake.script(
        "pause-by-cli",
        vec![
            reflect_reply("x").with_delay(Duration::from_secs(2)),
            answer_reply("y"),
        ],
    );
    let paused = env.submit(agent, "pause-by-cli").await;
    env.wait_status(paused, "running").await;
    let id = paused.to_string();
    let keys = [("AGENTD__CONTROL__SIGNING_KEYS__OPS", OPS_SECRET)];
    let output = agentd(&env.settings, &["pause", &id], &keys).await;
    assert!(output.status.success(), "{output:?}");
    env.wait_status(paused, "waiting").await;
    env.stop().await;
}

/// Runs the real `agentd` binary with the test's settings; its output.
async fn agentd(
    settings: &Settings,
    args: &[&str],
    extra: &[(&str, &str)],
) -> std::process::Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(settings))
        .envs(extra.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(wait::COMMAND_WITHIN, command.output())
        .await
        .expect("agentd ends")
        .expect("agentd runs")
}

fn whoami() -> String {
    let output = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("id -un");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test]
async fn a_token_less_gateway_refuses_a_dns_rebinding_host() {
    let env = TestEnv::without_worker(|_| {}).await;
    let gateway = Gateway::start(&env, &[]).await;
    let port = gateway.base.rsplit(':').next().expect("port").to_owned();
    let status = |host: String, path: &'static str| {
        let request = gateway.client.get(gateway.url(path)).header("host", host);
        async move { request.send().await.expect("answered") }
    };
    for path in ["/healthz", "/v1/agents", "/"] {
        let refused = status(format!("rebind.evil.example:{port}"), path).await;
        assert_eq!(refused.status(), 403, "{path}");
        let body: Value = refused.json().await.unwrap_or_default();
        assert_eq!(body["error"]["code"], "host_not_allowed", "{path}");
        for host in [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("app.localhost:{port}"),
        ] {
            assert_eq!(
                status(host.clone(), path).await.status(),
                200,
                "{host}{path}"
            );
        }
    }
    gateway.stop().await;

    // With tokens, the token is the boundary: any Host name is served.
    let gateway = Gateway::start(&env, &["tok-2"]).await;
    let answered = gateway
        .get("/v1/agents")
        .header("host", "rebind.evil.example")
        .send()
        .await
        .expect("answered");
    assert_eq!(answered.status(), 200);
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn an_inject_over_the_cap_is_refused_at_every_door() {
    let env = TestEnv::start_with(|s| s.control.max_inject_bytes = 32).await;
    let task_id = waiting_for_approval(&env, "steer-inject").await;
    let gateway = Gateway::start(&env, &[]).await;
    let long = "x".repeat(33);
    let answer = gateway
        .post_json(
            &format!("/v1/tasks/{task_id}/inject"),
            &json!({"text": long}),
            413,
        )
        .await;
    assert_eq!(answer["error"]["code"], "inject_too_large");
    gateway.stop().await;
    let id = task_id.to_string();
    let output = agentd(
        &env.settings,
        &["inject", &id, &long],
        &[("AGENTD__CONTROL__MAX_INJECT_BYTES", "32")],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("max_inject_bytes"), "{stderr}");
    // Straight to the exchange: the worker drops it; the short one after it is kept.
    for text in [long.as_str(), "short guidance"] {
        let inject = ControlMessage::Inject(Inject {
            task_id,
            text: text.into(),
        });
        publish(&env, &inject, &inject.body(), None).await;
    }
    // The short one comes after the long one: once it is stored, the long one was dropped.
    let injected = wait::until("guidance stored", NEXT_STEP_WITHIN, || async {
        let stored = env.stored_events(task_id).await;
        let injected: Vec<Value> = stored
            .into_iter()
            .filter(|e| e["type"] == "input.injected")
            .map(|e| e["data"]["text"].clone())
            .collect();
        (!injected.is_empty()).then_some(injected)
    })
    .await;
    assert_eq!(injected, [json!("short guidance")]);
    env.stop().await;
}

#[tokio::test]
async fn a_conversation_belongs_to_the_agent_of_its_first_turn() {
    let env = TestEnv::start().await;
    let (owner, other) = (env.agent(None, None).await, env.agent(None, None).await);
    let conversation = Uuid::now_v7();
    env.fake.script(
        "conv-owner-1",
        vec![answer_reply("the owner's secret answer")],
    );
    env.fake
        .script("conv-other", vec![answer_reply("should never run")]);
    env.fake
        .script("conv-owner-2", vec![answer_reply("second")]);
    let turn = |agent: Uuid, input: &str| {
        let task_id = Uuid::now_v7();
        let body = json!({"task_id": task_id, "agent_id": agent, "input": input,
                          "conversation_id": conversation});
        (task_id, body.to_string())
    };
    let (first, body) = turn(owner, "conv-owner-1");
    env.publish_raw(body.as_bytes()).await;
    assert_eq!(env.wait_terminal(first).await.status, "completed");

    let (intruder, body) = turn(other, "conv-other");
    env.publish_raw(body.as_bytes()).await;
    let task = env.wait_terminal(intruder).await;
    assert_eq!(task.status, "rejected");
    let error = task.error.unwrap_or_default();
    assert!(error.contains("belongs to another agent"), "{error}");
    assert!(
        env.fake.requests_for("conv-other").is_empty(),
        "it saw nothing"
    );

    // The owner's next turn goes on and sees its earlier turn (not the intruder).
    let (second, body) = turn(owner, "conv-owner-2");
    env.publish_raw(body.as_bytes()).await;
    assert_eq!(env.wait_terminal(second).await.status, "completed");
    let prompt =
        serde_json::to_string(&env.fake.requests_for("conv-owner-2")[0].body).unwrap_or_default();
    assert!(prompt.contains("the owner's secret answer"), "{prompt}");
    // The gateway refuses such a turn at once.
    let gateway = Gateway::start(&env, &[]).await;
    let refused = gateway
        .post_json(
            "/v1/tasks",
            &json!({"agent_id": other, "input": "conv-other", "conversation_id": conversation}),
            409,
        )
        .await;
    assert_eq!(refused["error"]["code"], "conversation_of_another_agent");
    gateway.stop().await;
    let owner_row: (Uuid, String) =
        sqlx::query_as("SELECT agent_id, tenant_id FROM conversations WHERE conversation_id = $1")
            .bind(conversation)
            .fetch_one(&env.pool)
            .await
            .expect("the conversation's owner");
    assert_eq!(owner_row, (owner, "default".to_owned()));
    env.stop().await;
}

#[tokio::test]
async fn a_cancel_for_an_id_no_message_brings_leaves_a_tombstone_for_a_while_only() {
    let env = TestEnv::start_with(|s| s.control.tombstone_secs = 2).await;
    let agent = env.agent(None, None).await;
    let made_up = Uuid::now_v7();
    let awaited = Uuid::now_v7();
    for task_id in [made_up, awaited] {
        let result = agentd::lifecycle::cancel::cancel_task(
            &env.pool,
            &env.publisher,
            &env.settings,
            task_id,
        )
        .await
        .expect("cancel");
        assert_eq!(
            result,
            agentd::lifecycle::cancel::CancelResult::CancelledBeforeStart
        );
    }
    let rows = |task_id: Uuid| {
        let pool = env.pool.clone();
        async move {
            let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_id = $1")
                .bind(task_id)
                .fetch_one(&pool)
                .await
                .expect("count");
            let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE task_id = $1")
                .bind(task_id)
                .fetch_one(&pool)
                .await
                .expect("count");
            (tasks, events)
        }
    };
    assert_eq!(
        rows(made_up).await,
        (1, 1),
        "the tombstone and its task.cancelled"
    );
    // The awaited task's message arrives: acknowledged unrun, and its row kept from now on.
    env.fake
        .script("tomb-awaited", vec![answer_reply("must not run")]);
    let body = json!({"task_id": awaited, "agent_id": agent, "input": "tomb-awaited"});
    env.publish_raw(body.to_string().as_bytes()).await;
    let what = "the tombstone gone after control.tombstone_secs";
    wait::until_true(what, TOMBSTONE_GONE_WITHIN, || async {
        rows(made_up).await == (0, 0)
    })
    .await;
    let adopted: (Option<Uuid>, String) =
        sqlx::query_as("SELECT agent_id, status FROM tasks WHERE task_id = $1")
            .bind(awaited)
            .fetch_one(&env.pool)
            .await
            .expect("the cancelled task is kept");
    assert_eq!(adopted, (Some(agent), "cancelled".to_owned()));
    assert!(env.fake.requests_for("tomb-awaited").is_empty());
    env.stop().await;
}

#[tokio::test]
async fn a_pause_signed_by_a_key_bound_to_the_tasks_tenant_is_applied() {
    // The task is of tenant `default` (its agent's): a key bound to it steers.
    let env = TestEnv::start_with(|s| {
        signing(s);
        s.control
            .signing_keys
            .insert("default-key".into(), Secret::from("default-secret"));
        s.control
            .key_tenants
            .insert("default-key".into(), "default".into());
    })
    .await;
    let agent = env.agent(None, None).await;
    env.fake.script(
        "steer-bound",
        vec![
            reflect_reply("x").with_delay(Duration::from_secs(2)),
            answer_reply("y"),
        ],
    );
    let task_id = env.submit(agent, "steer-bound").await;
    env.wait_status(task_id, "running").await;
    let pause = ControlMessage::Pause(Pause { task_id });
    let acme = Secret::from(ACME_SECRET);
    publish(
        &env,
        &pause,
        &pause.body(),
        Some(Signer {
            key_id: "acme-key",
            secret: &acme,
        }),
    )
    .await;
    let bound = Secret::from("default-secret");
    publish(
        &env,
        &pause,
        &pause.body(),
        Some(Signer {
            key_id: "default-key",
            secret: &bound,
        }),
    )
    .await;
    env.wait_status(task_id, "waiting").await;
    let reason: Option<String> =
        sqlx::query_scalar("SELECT wait_reason FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("wait_reason");
    assert_eq!(reason.as_deref(), Some("paused"));
    env.stop().await;
}

/// Text that PostgreSQL, JSON or Unicode treat specially, NUL first.
fn outside_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop_oneof![
        3 => proptest::sample::select(&["\u{0}", "\\u0000", "\\", "\"", "\u{FFFF}", "\u{10FFFF}", "好"][..])
            .prop_map(str::to_owned),
        2 => any::<char>().prop_map(String::from),
        2 => "[a-z ]{0,8}",
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

#[tokio::test]
async fn who_decided_is_stored_whatever_unicode_it_holds() {
    use agentd::core::approval::Decision;
    use agentd::core::storable;
    use agentd::lifecycle::approvals::{Decided, decide_verified};
    use agentd::lifecycle::unheld::Sink;
    use proptest::test_runner::{Config, TestRunner};

    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let cases = std::cell::RefCell::new(Vec::new());
    runner
        .run(&(outside_text(), outside_text(), outside_text()), |case| {
            cases.borrow_mut().push(case);
            Ok(())
        })
        .expect("cases");
    for (by, reason, verified) in cases.into_inner() {
        // A task waiting for two calls: deciding one records it and resumes nothing.
        let task_id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO tasks (task_id, agent_id, input, status, wait_reason) \
             VALUES ($1, $2, 'prop', 'waiting', 'approval')",
        )
        .bind(task_id)
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("task");
        sqlx::query(
            "INSERT INTO approvals (task_id, tool_call_id, trace_id, name, expires_at) \
             SELECT $1, call, $2, 'calculate', now() + interval '1 hour' \
             FROM unnest(ARRAY['call_1', 'call_2']) AS call",
        )
        .bind(task_id)
        .bind(Uuid::now_v7())
        .execute(&env.pool)
        .await
        .expect("approvals");
        let decision = Decision {
            kind: DecisionKind::Reject,
            arguments: None,
            result: None,
            reason: Some(reason.clone()),
            by: Some(by.clone()),
        };
        let sink = Sink {
            pool: &env.pool,
            publisher: &env.publisher,
            exchange: &env.settings.amqp.events_exchange,
        };
        let queue = &env.settings.amqp.tasks_queue;
        let decided = decide_verified(sink, queue, task_id, "call_1", &decision, Some(&verified))
            .await
            .expect("stored");
        assert_eq!(decided, Decided::Recorded { resumed: false });
        let (_, _, stored_by, stored_verified) = decided_row(&env, task_id).await;
        assert_eq!(stored_by, Some(storable::text(&by).into_owned()));
        assert_eq!(
            stored_verified,
            Some(storable::text(&verified).into_owned())
        );
        let event: Value = sqlx::query_scalar(
            "SELECT payload FROM events WHERE task_id = $1 AND type = 'approval.decided'",
        )
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("approval.decided");
        assert_eq!(
            event["data"]["verified_by"],
            json!(storable::text(&verified))
        );
    }
    env.stop().await;
}
