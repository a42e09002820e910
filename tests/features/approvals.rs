//! Tool approvals (CONTRACT §7) with the real worker, the fake LLM over HTTP, RabbitMQ and
//! PostgreSQL: a reply calling gated tools makes its task `waiting` (nothing ran, no lease),
//! each decision kind reaches the model, ungated calls of the same reply run with the
//! approved ones, the first of two racing decisions wins, an expired request is rejected or
//! fails the task (cancel while waiting: `cancel.rs`), a decision taken while no worker runs (the
//! CLI, the binary killed) completes the task once a worker starts, the gateway's routes
//! decide and list, and a decision holding NUL is stored as U+FFFD.

use std::process::Command;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::{WorkerProcess, env_for};
use crate::support::wait::{self, NEXT_STEP_WITHIN};
use agentd::amqp::control::send_control;
use agentd::contract::ControlMessage;
use agentd::contract::control::Approval;
use agentd::core::approval::{Decision, DecisionKind};
use agentd::lifecycle::approvals::{Decided, decide};
use agentd::lifecycle::unheld::Sink;
use agentd::scripted_model::{answer_reply, call_tool_reply};
use serde_json::{Value, json};
use uuid::Uuid;

/// Gates `calculate` (by a glob) for `agent`, with an optional timeout and expiry action.
pub(super) async fn gate(
    env: &TestEnv,
    agent: Uuid,
    timeout_secs: Option<i32>,
    on_expiry: Option<&str>,
) {
    sqlx::query(
        "UPDATE agents SET approval_tools = ARRAY['calc*'], approval_timeout_secs = $2, \
                on_approval_expiry = $3 WHERE agent_id = $1",
    )
    .bind(agent)
    .bind(timeout_secs)
    .bind(on_expiry)
    .execute(&env.pool)
    .await
    .expect("gate calculate");
}

/// The published stream after dedupe by `(task_id, seq)`: delivery is at least once, so
/// an event published by the decider may be published again by the worker that resumes.
fn dedupe(events: Vec<Value>) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    events
        .into_iter()
        .filter(|e| seen.insert(e["seq"].as_i64()))
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

pub(super) fn decision(kind: DecisionKind, by: &str) -> Decision {
    Decision {
        kind,
        arguments: None,
        result: None,
        reason: None,
        by: Some(by.into()),
    }
}

/// Records a decision as the gateway and the CLI do.
pub(super) async fn decide_now(
    env: &TestEnv,
    task_id: Uuid,
    call: &str,
    decision: &Decision,
) -> Decided {
    let sink = Sink {
        pool: &env.pool,
        publisher: &env.publisher,
        exchange: &env.settings.amqp.events_exchange,
    };
    decide(
        sink,
        &env.settings.amqp.tasks_queue,
        task_id,
        call,
        decision,
    )
    .await
    .expect("decide")
}

async fn send_approval(env: &TestEnv, approval: Approval) {
    send_control(
        &env.publisher,
        &env.settings.amqp,
        &ControlMessage::Approval(approval),
    )
    .await
    .expect("approval control message");
}

/// (tool_call_id, state, arguments) of the task's tool calls, by id.
async fn ledger(env: &TestEnv, task_id: Uuid) -> Vec<(String, String, Value)> {
    sqlx::query_as(
        "SELECT tool_call_id, state, arguments FROM tool_calls WHERE task_id = $1 \
         ORDER BY tool_call_id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("tool_calls")
}

#[tokio::test]
async fn each_decision_kind_reaches_the_model_and_ungated_calls_run_with_the_approved_ones() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    gate(&env, agent, None, None).await;
    let marker = "approval-kinds";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![
                ("calculate", json!({"expression": "1+1"})),
                ("calculate", json!({"expression": "2+2"})),
                ("calculate", json!({"expression": "3+3"})),
                ("calculate", json!({"expression": "4+4"})),
                ("current_time", json!({})),
            ]),
            answer_reply("decided"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;

    // Waiting: the gated calls are recorded and requested, nothing ran, nobody holds it.
    let stored = env.stored_events(task_id).await;
    let requested = of_type(&stored, "approval.requested");
    let ids: Vec<&str> = requested
        .iter()
        .map(|e| e["data"]["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3", "call_4"]);
    assert_eq!(
        requested[1]["data"]["arguments"],
        json!({"expression": "2+2"})
    );
    assert_eq!(requested[0]["data"]["name"], "calculate");
    assert_eq!(requested[0]["data"]["effect"], "read_only");
    assert!(requested[0]["data"]["expires_at"].is_string());
    let waiting = of_type(&stored, "task.waiting");
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        waiting[0]["data"],
        json!({"reason": "approval", "tool_call_ids": ["call_1", "call_2", "call_3", "call_4"]})
    );
    assert!(
        of_type(&stored, "tool.started").is_empty(),
        "nothing runs before decisions"
    );
    let (lease, wait_reason): (Option<Uuid>, Option<String>) =
        sqlx::query_as("SELECT lease_owner, wait_reason FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("task");
    assert_eq!((lease, wait_reason.as_deref()), (None, Some("approval")));
    let states: Vec<String> = ledger(&env, task_id)
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(states, ["awaiting_approval"; 4]);
    assert_eq!(env.fake.requests_for(marker).len(), 1);

    // Three decisions by control message, the last one as the gateway and CLI record it.
    send_approval(
        &env,
        Approval {
            task_id,
            tool_call_id: "call_1".into(),
            decision: DecisionKind::Approve,
            arguments: None,
            reason: None,
            result: None,
            by: Some("ana".into()),
        },
    )
    .await;
    send_approval(
        &env,
        Approval {
            task_id,
            tool_call_id: "call_2".into(),
            decision: DecisionKind::Edit,
            arguments: Some(json!({"expression": "10*10"})),
            reason: None,
            result: None,
            by: Some("ana".into()),
        },
    )
    .await;
    send_approval(
        &env,
        Approval {
            task_id,
            tool_call_id: "call_3".into(),
            decision: DecisionKind::Reject,
            arguments: None,
            reason: Some("not this one".into()),
            result: None,
            by: Some("bo".into()),
        },
    )
    .await;
    // The control messages are applied in order by the pending-queue consumer.
    let decided_count = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM approvals WHERE task_id = $1 AND decision IS NOT NULL",
        )
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("decided")
    };
    wait::until_true(
        "the control decisions applied",
        NEXT_STEP_WITHIN,
        || async { decided_count().await >= 3 },
    )
    .await;
    env.wait_status(task_id, "waiting").await;
    let mut respond = decision(DecisionKind::Respond, "cy");
    respond.result = Some(json!({"value": 42}));
    let last = decide_now(&env, task_id, "call_4", &respond).await;
    assert_eq!(last, Decided::Recorded { resumed: true });

    let events = dedupe(env.published_events(task_id).await);
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("decided"));
    let decided = of_type(&events, "approval.decided");
    let kinds: Vec<(&str, &str)> = decided
        .iter()
        .map(|e| {
            let data = &e["data"];
            (
                data["tool_call_id"].as_str().unwrap(),
                data["decision"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("call_1", "approve"),
            ("call_2", "edit"),
            ("call_3", "reject"),
            ("call_4", "respond")
        ]
    );
    assert_eq!(decided[2]["data"]["by"], "bo");
    assert_eq!(decided[2]["data"]["reason"], "not this one");
    // It resumed within a second of the last decision, with reason approval.
    let resumed = of_type(&events, "task.resumed");
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0]["data"]["reason"], "approval");
    let ts =
        |e: &Value| chrono::DateTime::parse_from_rfc3339(e["ts"].as_str().unwrap()).expect("ts");
    let took = ts(resumed[0]) - ts(decided[3]);
    assert!(took < chrono::Duration::seconds(1), "resumed after {took}");
    // Approved and edited calls ran, with the ungated one; rejected and answered did not.
    let started: Vec<&str> = of_type(&events, "tool.started")
        .iter()
        .map(|e| e["data"]["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(started, ["call_1", "call_2", "call_5"]);
    let second = env.fake.requests_for(marker)[1].system_state().unwrap();
    let results = second["last_recursion"]["tool_call_results"]
        .as_array()
        .expect("tool results");
    assert_eq!(results.len(), 5);
    assert_eq!(results[0]["success"], true);
    assert_eq!(results[0]["result"], json!(2));
    assert_eq!(results[1]["arguments"], json!({"expression": "10*10"}));
    assert_eq!(results[1]["result"], json!(100));
    assert_eq!(results[2]["success"], false);
    let rejected = results[2]["error"].as_str().unwrap();
    assert!(
        rejected.contains("rejected by bo") && rejected.contains("not this one"),
        "{rejected}"
    );
    assert_eq!(results[3]["success"], true);
    assert_eq!(results[3]["result"], json!({"value": 42}));
    assert_eq!(results[4]["name"], "current_time");
    assert_eq!(results[4]["success"], true);
    let rows = ledger(&env, task_id).await;
    let states: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        states,
        [
            "succeeded",
            "succeeded",
            "rejected",
            "succeeded",
            "succeeded"
        ]
    );
    assert_eq!(rows[1].2, json!({"expression": "10*10"}));
    let stored: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT tool_call_id, decision, decided_by FROM approvals WHERE task_id = $1 \
         ORDER BY tool_call_id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("approvals");
    assert_eq!(stored[1].1, "edit");
    assert_eq!(stored[3].2.as_deref(), Some("cy"));
    env.stop().await;
}

#[tokio::test]
async fn the_first_of_two_racing_decisions_wins() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    gate(&env, agent, None, None).await;
    let marker = "approval-race";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("raced"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    let mut reject = decision(DecisionKind::Reject, "bo");
    reject.reason = Some("late".into());
    let approve = decision(DecisionKind::Approve, "ana");
    let (a, b) = tokio::join!(
        decide_now(&env, task_id, "call_1", &approve),
        decide_now(&env, task_id, "call_1", &reject),
    );
    let outcomes = [&a, &b];
    let won: Vec<_> = outcomes
        .iter()
        .filter(|d| matches!(d, Decided::Recorded { .. }))
        .collect();
    assert_eq!(won.len(), 1, "{a:?} {b:?}");
    let lost = outcomes
        .iter()
        .find(|d| matches!(d, Decided::AlreadyDecided(_)))
        .expect("the other decision changed nothing");
    let winner = match lost {
        Decided::AlreadyDecided(kind) => kind.clone(),
        _ => unreachable!(),
    };
    // A third, later decision changes nothing either.
    let again = decide_now(&env, task_id, "call_1", &approve).await;
    assert_eq!(again, Decided::AlreadyDecided(winner.clone()));
    let events = dedupe(env.published_events(task_id).await);
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let decided = of_type(&events, "approval.decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["decision"], json!(winner));
    let second = env.fake.requests_for(marker)[1].system_state().unwrap();
    let result = &second["last_recursion"]["tool_call_results"][0];
    assert_eq!(result["success"], json!(winner == "approve"), "{result}");
    env.stop().await;
}

#[tokio::test]
async fn an_expired_request_is_rejected_or_fails_the_task_as_the_agent_says() {
    let mut env = TestEnv::start().await;
    let rejecting = env.agent(None, None).await;
    gate(&env, rejecting, Some(1), None).await;
    let failing = env.agent(None, None).await;
    gate(&env, failing, Some(1), Some("fail")).await;
    for marker in ["expiry-reject", "expiry-fail"] {
        env.fake.script(
            marker,
            vec![
                call_tool_reply(vec![("calculate", json!({"expression": "1"}))]),
                answer_reply("went on without it"),
            ],
        );
    }
    let rejected = env.submit(rejecting, "expiry-reject").await;
    let events = dedupe(env.published_events(rejected).await);
    let task = env.wait_terminal(rejected).await;
    assert_eq!(task.status, "completed");
    let decided = of_type(&events, "approval.decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["decision"], "expired");
    assert_eq!(decided[0]["data"]["by"], "agentd");
    let second = env.fake.requests_for("expiry-reject")[1]
        .system_state()
        .unwrap();
    let result = &second["last_recursion"]["tool_call_results"][0];
    assert_eq!(result["success"], false);
    assert!(
        result["error"].as_str().unwrap().contains("expired"),
        "{result}"
    );

    let failed = env.submit(failing, "expiry-fail").await;
    let events = dedupe(env.published_events(failed).await);
    let task = env.wait_terminal(failed).await;
    assert_eq!(task.status, "failed");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "task.failed");
    assert_eq!(last["data"]["reason"], "approval_expired");
    assert_eq!(of_type(&events, "approval.decided").len(), 1);
    assert_eq!(env.fake.requests_for("expiry-fail").len(), 1);
    env.stop().await;
}

#[tokio::test]
async fn the_gateway_decides_lists_and_shows_pending_approvals() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    gate(&env, agent, None, None).await;
    let marker = "approval-gateway";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![
                ("calculate", json!({"expression": "2*3"})),
                ("calculate", json!({"expression": "2*4"})),
            ]),
            answer_reply("via the gateway"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    let gateway = Gateway::start(&env, &[]).await;
    let pending = gateway.get_json("/v1/approvals?status=pending", 200).await;
    let listed: Vec<(&str, &str)> = pending["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["tool_call_id"].as_str().unwrap(),
                a["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("call_1", "calculate"), ("call_2", "calculate")]);
    assert_eq!(
        pending["approvals"][0]["arguments"],
        json!({"expression": "2*3"})
    );
    let state = gateway
        .get_json(&format!("/v1/tasks/{task_id}/state"), 200)
        .await;
    assert_eq!(state["wait_reason"], "approval");
    assert_eq!(state["pending_approvals"].as_array().unwrap().len(), 2);

    let path = |call: &str| format!("/v1/tasks/{task_id}/approvals/{call}");
    let bad = gateway
        .post_json(&path("call_1"), &json!({"decision": "edit"}), 422)
        .await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("arguments")
    );
    gateway
        .post_json(&path("call_9"), &json!({"decision": "approve"}), 404)
        .await;
    let first = gateway
        .post_json(
            &path("call_1"),
            &json!({"decision": "approve", "by": "ana"}),
            200,
        )
        .await;
    assert_eq!(first["resumed"], false);
    let twice = gateway
        .post_json(&path("call_1"), &json!({"decision": "reject"}), 409)
        .await;
    assert_eq!(twice["error"]["code"], "already_decided");
    let state = gateway
        .get_json(&format!("/v1/tasks/{task_id}/state"), 200)
        .await;
    assert_eq!(state["pending_approvals"][0]["tool_call_id"], "call_2");
    let body = json!({"decision": "reject", "reason": "enough", "by": "bo"});
    let last = gateway.post_json(&path("call_2"), &body, 200).await;
    assert_eq!(last["resumed"], true);
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let decided = gateway
        .get_json(
            &format!("/v1/approvals?status=decided&task_id={task_id}"),
            200,
        )
        .await;
    let by: Vec<&str> = decided["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["decided_by"].as_str().unwrap())
        .collect();
    assert_eq!(by, ["bo", "ana"]);
    gateway.get_json("/v1/approvals?status=maybe", 422).await;
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_decision_taken_while_no_worker_runs_completes_the_task_on_the_next_worker() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    gate(&env, agent, None, None).await;
    let marker = "approval-offline";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("calculate", json!({"expression": "5*5"}))]),
            answer_reply("25"),
        ],
    );
    let mut worker = WorkerProcess::spawn(&env.settings, &[]);
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    worker.kill();
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .envs(env_for(&env.settings))
            .output()
            .expect("agentd")
    };
    let task = task_id.to_string();
    let approved = cli(&["approve", &task, "call_1", "--by", "ops"]);
    let stdout = String::from_utf8_lossy(&approved.stdout);
    assert!(
        approved.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&approved.stderr)
    );
    assert!(stdout.contains("resumes"), "{stdout}");
    let again = cli(&["reject", &task, "call_1", "--reason", "too late"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("decided already"));
    // No worker runs: the task is pending with its message queued.
    env.wait_status(task_id, "pending").await;
    let _second = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("25"));
    let stored = env.stored_events(task_id).await;
    let decided = of_type(&stored, "approval.decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["by"], "ops");
    assert_eq!(env.fake.requests_for(marker).len(), 2);
}

/// What a person types into a decision (a reason, `by`, a result) may hold NUL, through the
/// gateway as through a control message: it is stored as U+FFFD and reaches the model so,
/// instead of a database error answered as "broker unavailable" (or a control message put
/// back forever).
#[tokio::test]
async fn a_decision_holding_nul_is_stored_and_reaches_the_model() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    gate(&env, agent, None, None).await;
    let marker = "approval-nul";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![
                ("calculate", json!({"expression": "1+1"})),
                ("calculate", json!({"expression": "2+2"})),
            ]),
            answer_reply("decided"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_status(task_id, "waiting").await;
    let gateway = Gateway::start(&env, &[]).await;
    let body = json!({"decision": "reject", "reason": "no\u{0}pe", "by": "b\u{0}o"});
    let path = format!("/v1/tasks/{task_id}/approvals/call_1");
    gateway.post_json(&path, &body, 200).await;
    send_approval(
        &env,
        Approval {
            task_id,
            tool_call_id: "call_2".into(),
            decision: DecisionKind::Respond,
            arguments: None,
            reason: None,
            result: Some(json!({"v\u{0}": "x\u{0}"})),
            by: Some("c\u{0}".into()),
        },
    )
    .await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let rows: Vec<(Option<String>, Option<String>, Option<Value>)> = sqlx::query_as(
        "SELECT reason, decided_by, result FROM approvals WHERE task_id = $1 \
         ORDER BY tool_call_id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("approvals");
    assert_eq!(rows[0].0.as_deref(), Some("no\u{FFFD}pe"));
    assert_eq!(rows[0].1.as_deref(), Some("b\u{FFFD}o"));
    assert_eq!(rows[1].1.as_deref(), Some("c\u{FFFD}"));
    assert_eq!(rows[1].2, Some(json!({"v\u{FFFD}": "x\u{FFFD}"})));
    let second = env.fake.requests_for(marker)[1].system_state().unwrap();
    let results = &second["last_recursion"]["tool_call_results"];
    let rejected = results[0]["error"].as_str().expect("the rejection");
    assert!(rejected.contains("no\u{FFFD}pe"), "{rejected}");
    assert_eq!(results[1]["result"], json!({"v\u{FFFD}": "x\u{FFFD}"}));
    gateway.stop().await;
    env.stop().await;
}
