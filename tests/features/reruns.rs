//! Reruns (CONTRACT v3 §13) with the real worker and binary, the scripted model over real
//! HTTP, a real MCP server, RabbitMQ and PostgreSQL: a recorded rerun completes with the
//! source's answer and actions while the model gets no request at all; a rerun on a
//! version with other instructions ends `rerun_diverged` at recursion 1 with both keys; a
//! side-effecting tool never runs again in a recorded rerun (its recorded result is used
//! without asking for the approval its source needed, and a call the source did not make
//! is refused); and a rerun message that names an
//! unknown source, another tenant's source or a bad mode ends `rejected` with its reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::approvals::{decide_now, decision};
use crate::budgets_and_steering::control;
use crate::support::gateway::Gateway;
use crate::support::harness::{self, TestEnv};
use crate::support::process::env_for;
use crate::support::wait;
use agentd::contract::ControlMessage;
use agentd::contract::control::{Pause, Resume};
use agentd::core::approval::DecisionKind;
use agentd::scripted_model::{answer_reply, call_tool_reply, plan_reply};
use agentd::store::versions::{self, Draft};
use serde_json::{Value, json};
use uuid::Uuid;

fn agentd(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&env.settings))
        .output()
        .expect("agentd")
}

/// `agentd rerun ARGS...`: the new task's id.
fn rerun(env: &TestEnv, args: &[&str]) -> Uuid {
    let output = agentd(env, &[&["rerun"], args].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("the rerun's task id")
}

/// Per recursion: the request key, the tokens and where the answer came from.
async fn llm_calls(
    env: &TestEnv,
    task_id: Uuid,
) -> Vec<(i32, Option<String>, Option<i64>, Option<String>)> {
    sqlx::query_as(
        "SELECT iteration, request_key, prompt_tokens, served_from FROM llm_calls \
         WHERE task_id = $1 ORDER BY iteration, attempt",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("llm_calls")
}

/// The task's tool calls in order: name, arguments, success, result, error.
async fn tool_calls(
    env: &TestEnv,
    task_id: Uuid,
) -> Vec<(String, Value, bool, Option<Value>, Option<String>)> {
    sqlx::query_as(
        "SELECT name, arguments, success, result, error FROM tool_calls \
         WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("tool_calls")
}

async fn rerun_of(env: &TestEnv, task_id: Uuid) -> (Option<Uuid>, Option<String>, Option<String>) {
    sqlx::query_as("SELECT rerun_of, rerun_llm, rerun_tools FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("task row")
}

fn event<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == kind)
        .map(|e| &e["data"])
        .unwrap_or_else(|| panic!("no {kind} in {events:#?}"))
}

#[tokio::test]
async fn a_recorded_rerun_answers_from_the_record_and_the_model_gets_no_request() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "rerun-recorded";
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute 6*7"), ("2", "answer")]),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("6*7 = 42"),
        ],
    );
    let source = env.submit(agent, &format!("{marker}: what is 6*7?")).await;
    let done = env.wait_terminal(source).await;
    assert_eq!(done.status, "completed");
    let asked = env.fake.requests_for(marker).len();
    assert_eq!(asked, 3);

    // The provider is as good as down: the model holds every request it gets, so a rerun
    // that asked it would not end.
    env.fake.hold();
    let task_id = rerun(&env, &[&source.to_string()]);
    let again = env.wait_terminal(task_id).await;
    env.fake.release();
    assert_eq!(again.status, "completed", "{:?}", again.error);
    assert_eq!(again.answer, done.answer);
    assert_eq!(again.iterations, done.iterations);
    // Not one request more reached the model.
    assert_eq!(env.fake.requests_for(marker).len(), asked);
    assert_eq!(
        rerun_of(&env, task_id).await,
        (
            Some(source),
            Some("recorded".into()),
            Some("recorded".into())
        )
    );
    // Its own attempts are rows, served from the record, with the source's keys and tokens.
    let (theirs, ours) = (
        llm_calls(&env, source).await,
        llm_calls(&env, task_id).await,
    );
    assert_eq!(ours.len(), theirs.len());
    for (mine, source_call) in ours.iter().zip(&theirs) {
        assert_eq!(
            (mine.0, &mine.1, mine.2),
            (source_call.0, &source_call.1, source_call.2)
        );
        assert_eq!(mine.3.as_deref(), Some("recorded"));
        assert_eq!(source_call.3, None);
    }
    // The same actions: the tool ran (calculate is read-only, the recorded result is used).
    let (theirs, ours) = (
        tool_calls(&env, source).await,
        tool_calls(&env, task_id).await,
    );
    assert_eq!(ours.len(), 1);
    assert_eq!(
        (&ours[0].0, &ours[0].1, &ours[0].3),
        (&theirs[0].0, &theirs[0].1, &theirs[0].3)
    );
    let events = env.stored_events(task_id).await;
    assert_eq!(event(&events, "task.started")["rerun_of"], json!(source));
    env.stop().await;
}

#[tokio::test]
async fn a_rerun_on_changed_instructions_diverges_at_recursion_one_with_both_keys() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "rerun-diverge";
    env.fake.script(marker, vec![answer_reply("hello")]);
    let source = env.submit(agent, &format!("{marker}: say hello")).await;
    assert_eq!(env.wait_terminal(source).await.status, "completed");
    let asked = env.fake.requests_for(marker).len();
    let draft = Draft {
        instructions: Some("You are terse. Never greet.".into()),
        ..Draft::default()
    };
    let version = versions::publish(&env.pool, agent, &draft)
        .await
        .expect("publish");

    let task_id = rerun(
        &env,
        &[&source.to_string(), "--agent-version", &version.to_string()],
    );
    let ended = env.wait_terminal(task_id).await;
    assert_eq!(ended.status, "failed");
    assert_eq!(ended.fail_reason.as_deref(), Some("rerun_diverged"));
    let expected: Option<String> = llm_calls(&env, source).await[0].1.clone();
    let error: Value = serde_json::from_str(ended.error.as_deref().unwrap_or("")).expect("JSON");
    assert_eq!(error["iteration"], 1);
    assert_eq!(error["expected_key"].as_str(), expected.as_deref());
    let got = error["got_key"].as_str().expect("got_key");
    assert_eq!(got.len(), 64);
    assert_ne!(Some(got), expected.as_deref());
    let events = env.stored_events(task_id).await;
    let failed = event(&events, "task.failed");
    assert_eq!(failed["reason"], "rerun_diverged");
    assert_eq!(
        (&failed["iteration"], &failed["got_key"]),
        (&json!(1), &json!(got))
    );
    assert_eq!(failed["expected_key"].as_str(), expected.as_deref());
    // It ran on the named version, and asked the model nothing.
    assert_eq!(
        event(&events, "task.started")["agent_version"],
        json!(version)
    );
    assert_eq!(env.fake.requests_for(marker).len(), asked);
    env.stop().await;
}

/// The lines the test MCP server's side-effecting tools wrote, one per run.
fn executed(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_side_effecting_tool_never_runs_again_in_a_recorded_rerun() {
    let ledger: PathBuf = harness::scratch_dir("rerun-tools").join("executed.txt");
    let server = harness::test_mcp_server("t", &[("AGENTD_TEST_MCP_LEDGER", &ledger)]);
    let env = TestEnv::start_with(|s| s.tools.mcp = vec![server]).await;
    let agent = env.agent(None, Some(&["t__charge"])).await;
    // The charge needs a person's approval (CONTRACT §7).
    sqlx::query("UPDATE agents SET approval_tools = ARRAY['t__charge'] WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("approval_tools");
    let marker = "rerun-charge";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("t__charge", json!({"amount": 5}))]),
            answer_reply("charged"),
        ],
    );
    let source = env.submit(agent, &format!("{marker}: charge 5")).await;
    env.wait_status(source, "waiting").await;
    let call: String = sqlx::query_scalar("SELECT tool_call_id FROM approvals WHERE task_id = $1")
        .bind(source)
        .fetch_one(&env.pool)
        .await
        .expect("the approval request");
    let approve = decision(DecisionKind::Approve, "ops");
    decide_now(&env, source, &call, &approve).await;
    assert_eq!(env.wait_terminal(source).await.status, "completed");
    assert_eq!(executed(&ledger).len(), 1, "the source charged once");
    let charged = tool_calls(&env, source).await;

    // Recorded model, recorded tools: the same call gets the source's result, not a run,
    // and waits for nobody's approval.
    let task_id = rerun(&env, &[&source.to_string()]);
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let asked: i64 = sqlx::query_scalar("SELECT count(*) FROM approvals WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("approvals");
    assert_eq!(asked, 0);
    assert_eq!(executed(&ledger).len(), 1, "the rerun charged again");
    let served = tool_calls(&env, task_id).await;
    assert_eq!(served.len(), 1);
    assert!(served[0].2, "{served:?}");
    assert_eq!(served[0].3, charged[0].3);

    // A live model that asks for another charge: refused, the model told why.
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("t__charge", json!({"amount": 7}))]),
            answer_reply("could not charge"),
        ],
    );
    let task_id = rerun(&env, &[&source.to_string(), "--llm", "live"]);
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    assert_eq!(
        executed(&ledger).len(),
        1,
        "a side effect ran in a recorded-tools rerun"
    );
    let refused = tool_calls(&env, task_id).await;
    assert!(!refused[0].2);
    let error = refused[0].4.clone().unwrap_or_default();
    assert!(error.contains("tools = live"), "{error}");
    env.stop().await;
}

/// The test MCP server's `sleep` runs this long in the rerun: the window in which the test
/// pauses the rerun, after seeing its `tool.started` (a pause then takes effect before the
/// next LLM call).
const SLEEP_MS: u64 = 1500;

#[tokio::test]
async fn a_paused_rerun_resumes_from_its_row_still_answered_from_the_record() {
    let server = harness::test_mcp_server("t", &[]);
    let env = TestEnv::start_with(|s| s.tools.mcp = vec![server]).await;
    let agent = env.agent(None, Some(&["t__sleep"])).await;
    let marker = "rerun-paused";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("t__sleep", json!({"ms": SLEEP_MS}))]),
            answer_reply("slept"),
        ],
    );
    let source = env.submit(agent, &format!("{marker}: sleep")).await;
    assert_eq!(env.wait_terminal(source).await.status, "completed");
    let asked = env.fake.requests_for(marker).len();

    // Tools live (the sleep runs), the model recorded; paused while the tool sleeps.
    let task_id = rerun(&env, &[&source.to_string(), "--tools", "live"]);
    wait::until_true(
        "the rerun's tool starts",
        wait::NEXT_STEP_WITHIN,
        || async {
            let events = env.stored_events(task_id).await;
            events.iter().any(|e| e["type"] == "tool.started")
        },
    )
    .await;
    control(&env, ControlMessage::Pause(Pause { task_id })).await;
    env.wait_status(task_id, "waiting").await;
    // Resumed by a message rebuilt from the row, which carries no `rerun`: the row does.
    let resume = Resume {
        task_id,
        budget: None,
    };
    control(&env, ControlMessage::Resume(resume)).await;
    let ended = env.wait_terminal(task_id).await;
    assert_eq!(
        (ended.status.as_str(), ended.answer.as_deref()),
        ("completed", Some("slept"))
    );
    let events = env.stored_events(task_id).await;
    assert_eq!(event(&events, "task.waiting")["reason"], "paused");
    assert_eq!(event(&events, "task.resumed")["reason"], "resumed");
    assert_eq!(
        env.fake.requests_for(marker).len(),
        asked,
        "the resumed rerun asked the model"
    );
    let served: Vec<Option<String>> = llm_calls(&env, task_id)
        .await
        .into_iter()
        .map(|c| c.3)
        .collect();
    assert_eq!(
        served,
        [Some("recorded".to_owned()), Some("recorded".to_owned())]
    );
    env.stop().await;
}

#[tokio::test]
async fn a_rerun_of_an_unknown_or_foreign_source_or_with_a_bad_mode_is_rejected() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "rerun-intake";
    env.fake.script(marker, vec![answer_reply("done")]);
    let source = env.submit(agent, &format!("{marker}: go")).await;
    assert_eq!(env.wait_terminal(source).await.status, "completed");

    let unknown = Uuid::now_v7();
    for (rerun, tenant, reason) in [
        (
            json!({"source_task_id": unknown}),
            None,
            "is not a known task",
        ),
        (
            json!({"source_task_id": source}),
            Some("another-tenant"),
            "is not a task of tenant",
        ),
        (
            json!({"source_task_id": source, "llm": "replayed"}),
            None,
            "rerun.llm must be",
        ),
        (
            json!({"source_task_id": "not-a-uuid"}),
            None,
            "rerun.source_task_id is not a valid UUID",
        ),
    ] {
        let task_id = Uuid::now_v7();
        let mut body = json!({"task_id": task_id, "rerun": rerun});
        if let Some(tenant) = tenant {
            body["tenant_id"] = json!(tenant);
        }
        env.publish_raw(body.to_string().as_bytes()).await;
        let ended = env.wait_terminal(task_id).await;
        assert_eq!(ended.status, "rejected", "{body}");
        let error = ended.error.unwrap_or_default();
        assert!(error.contains(reason), "{reason}: {error}");
    }
    // The command refuses an unknown task at once, publishing nothing.
    let output = agentd(&env, &["rerun", &unknown.to_string()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("no task {unknown}")), "{stderr}");
    let output = agentd(
        &env,
        &["rerun", &source.to_string(), "--tools", "sometimes"],
    );
    assert!(!output.status.success());

    // The gateway route: 404 for an unknown task, 422 for a bad mode, 202 for a rerun.
    let gateway = Gateway::start(&env, &[]).await;
    let path = format!("/v1/tasks/{source}/rerun");
    gateway
        .post_json(&format!("/v1/tasks/{unknown}/rerun"), &json!({}), 404)
        .await;
    gateway
        .post_json(&path, &json!({"llm": "replayed"}), 422)
        .await;
    let accepted = gateway
        .post_json(&path, &json!({"tools": "live"}), 202)
        .await;
    let task_id: Uuid = accepted["task_id"]
        .as_str()
        .unwrap_or("")
        .parse()
        .expect("task_id");
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    assert_eq!(
        rerun_of(&env, task_id).await,
        (Some(source), Some("recorded".into()), Some("live".into()))
    );
    gateway.stop().await;
    env.stop().await;
}

/// Reruns in the measurement below: enough for a rate, few enough for a debug build.
const MEASURED_RERUNS: usize = 200;

/// A figure, not a timed test: how long `MEASURED_RERUNS` recorded reruns of one
/// three-recursion task take from publish to their last end with the test settings
/// (`cargo test --test features reruns::measure -- --ignored --nocapture`).
#[tokio::test]
#[ignore = "a measurement; run on demand"]
async fn measure_recorded_reruns() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "rerun-measure";
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute 6*7"), ("2", "answer")]),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("6*7 = 42"),
        ],
    );
    let source = env.submit(agent, &format!("{marker}: what is 6*7?")).await;
    assert_eq!(env.wait_terminal(source).await.status, "completed");
    let asked = env.fake.requests_for(marker).len();
    let started = std::time::Instant::now();
    let mut ids = Vec::with_capacity(MEASURED_RERUNS);
    for _ in 0..MEASURED_RERUNS {
        let task_id = Uuid::now_v7();
        let body = json!({"task_id": task_id, "rerun": {"source_task_id": source}});
        env.publish_raw(body.to_string().as_bytes()).await;
        ids.push(task_id);
    }
    for task_id in &ids {
        assert_eq!(env.wait_terminal(*task_id).await.status, "completed");
    }
    let elapsed = started.elapsed();
    assert_eq!(env.fake.requests_for(marker).len(), asked);
    println!(
        "{MEASURED_RERUNS} recorded reruns of a 3-recursion task: {:.2} s ({:.0} per second, worker.concurrency {})",
        elapsed.as_secs_f64(),
        MEASURED_RERUNS as f64 / elapsed.as_secs_f64(),
        env.settings.worker.concurrency
    );
    env.stop().await;
}
