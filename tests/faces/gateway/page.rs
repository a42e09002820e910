//! The live trace page in headless Chromium, driven by tests/e2e/page.test.mjs
//! (playwright-core): submit on the page, see the answer and the checked-off plan, reopen
//! the task by URL, fork it and see the fork's plan, and no scrollbar on the empty page;
//! and (tests/e2e/resolve.test.mjs) a held call of unknown outcome resolved by each of the
//! page's four buttons (Succeeded, Failed, Retry, Skip), each on its own task.
//! Fails, saying what to install, when node, Chromium or playwright-core is missing.

use std::time::Duration;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::held::{HELD_CALL, held_calls};
use agentd::scripted_model::ModelReply;
use serde_json::{Value, json};

/// The Chromium run (Node.js starting the browser, loading the page, driving it through a
/// task with pauses between the replies) ends within this.
const PAGE_TEST_WITHIN: Duration = Duration::from_secs(120);

/// A seed-002 reply with readable texts (for the screenshot).
fn reply(action: &str, output: Value, texts: [&str; 3]) -> Value {
    let [observe, thought, summary] = texts;
    json!({"trace_id": "{{trace_id}}", "observe": observe, "thought": thought,
           "action": {"action_type": action, "output": output}, "abstract": summary,
           "short_term_memory_append": ""})
}

/// Plan, calculate, answer (reporting both steps done), each after 300 ms; then the answer
/// of the fork from recursion 3.
fn script_page_task(env: &TestEnv, marker: &str) {
    let plan = json!({"plan": [
        {"step_id": "1", "description": "Compute 6*7 with the calculator", "status": "pending"},
        {"step_id": "2", "description": "Answer with the result", "status": "pending"}],
        "notes": ""});
    let plan = reply(
        "RE_PLAN",
        plan,
        [
            "The user asks for the product of 6 and 7.",
            "A calculator call is exact; plan it, then answer.",
            "Planned: calculate, then answer",
        ],
    );
    let call = reply(
        "CALL_TOOL",
        json!({}),
        [
            "Step 1 is running; no result yet.",
            "Call calculate with the expression 6*7.",
            "Calling calculate(6*7)",
        ],
    );
    let mut answer = reply(
        "ANSWER",
        json!({"answer": "6*7 = 42"}),
        [
            "calculate returned 42.",
            "The result is known; both steps are done.",
            "Answered 42",
        ],
    );
    answer["step_updates"] = json!([{"step_id": "1", "status": "done"},
                                    {"step_id": "2", "status": "done"}]);
    let pause = Duration::from_millis(300);
    env.fake.script(
        marker,
        vec![
            ModelReply::json(plan).with_delay(pause),
            ModelReply::tool_calls(call, vec![("calculate", json!({"expression": "6*7"}))])
                .with_delay(pause),
            ModelReply::json(answer.clone()).with_delay(pause),
            // The fork from recursion 3 (the page test makes it) answers again.
            ModelReply::json(answer),
        ],
    );
}

/// What the page test needs besides cargo: node, Chromium and playwright-core.
fn page_test_prerequisites(e2e: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let install = "install them with: apt-get install -y chromium (and Node.js >= 20 with \
                   npm), then npm ci --prefix tests/e2e";
    let node = std::process::Command::new("node").arg("--version").output();
    let version = match node {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => return Err(format!("`node` is not on PATH; {install}")),
    };
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0);
    if major < 20 {
        return Err(format!(
            "node {version} is too old for playwright-core; {install}"
        ));
    }
    let chromium = std::env::var_os("AGENTD_E2E_CHROMIUM")
        .map_or_else(|| "/usr/bin/chromium".into(), std::path::PathBuf::from);
    if !chromium.exists() {
        return Err(format!(
            "no Chromium at {} (set AGENTD_E2E_CHROMIUM); {install}",
            chromium.display()
        ));
    }
    if !e2e.join("node_modules/playwright-core").is_dir() {
        // The locked package comes from the npm registry, like cargo's crates.
        let installed = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(e2e)
            .status();
        if !matches!(installed, Ok(status) if status.success()) {
            return Err(format!(
                "playwright-core is not installed in {} and `npm ci` failed; {install}",
                e2e.display()
            ));
        }
    }
    Ok(chromium)
}

#[tokio::test]
async fn the_page_runs_a_task_in_headless_chromium() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let e2e = root.join("tests/e2e");
    if let Err(missing) = page_test_prerequisites(&e2e) {
        panic!("the page end-to-end test cannot run: {missing}");
    }
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &["page-token"]).await;
    let agent = env.agent(None, None).await;
    // The calculator needs a person's approval: the page test approves it by clicking.
    sqlx::query(
        "UPDATE agents SET name = 'calculator', approval_tools = ARRAY['calculate'] \
         WHERE agent_id = $1",
    )
    .bind(agent)
    .execute(&env.pool)
    .await
    .unwrap();
    let marker = "gw-page";
    script_page_task(&env, marker);
    let screenshot = root.join("target/e2e/page.png");
    let run = tokio::process::Command::new("node")
        .arg(e2e.join("page.test.mjs"))
        .arg(format!("{}/", gateway.base))
        .arg(agent.to_string())
        .arg(marker)
        .arg(&screenshot)
        .arg("page-token")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PAGE_TEST_WITHIN, run)
        .await
        .expect("the page test ends in time")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "page test failed:\n{stdout}\n{stderr}"
    );
    assert!(
        screenshot.is_file(),
        "screenshot at {}",
        screenshot.display()
    );
    gateway.stop().await;
    env.stop().await;
}

/// What each of the page's four buttons leaves in the ledger: the call's state and success,
/// and how often the charge ran under the call's key after the kill (`retry` alone runs it).
const BUTTONS: [(&str, &str, bool, usize); 4] = [
    ("succeeded", "succeeded", true, 0),
    ("failed", "failed", false, 0),
    ("retry", "succeeded", true, 1),
    ("skip", "failed", false, 0),
];

#[tokio::test]
async fn the_page_resolves_held_calls_with_each_of_its_four_buttons() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let e2e = root.join("tests/e2e");
    if let Err(missing) = page_test_prerequisites(&e2e) {
        panic!("the page end-to-end test cannot run: {missing}");
    }
    // One task per button, each with its `charge` call held (outcome unknown).
    let held = held_calls(BUTTONS.len()).await;
    let env = &held.env;
    let gateway = Gateway::start(env, &["page-token"]).await;
    let charged_before: Vec<usize> = held.tasks.iter().map(|t| held.charges(*t)).collect();
    let pairs: Vec<String> = (held.tasks.iter().zip(BUTTONS))
        .map(|(task_id, (outcome, ..))| format!("{task_id}={outcome}"))
        .collect();
    let run = tokio::process::Command::new("node")
        .arg(e2e.join("resolve.test.mjs"))
        .arg(format!("{}/", gateway.base))
        .arg("page-token")
        .args(&pairs)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PAGE_TEST_WITHIN, run)
        .await
        .expect("the page test ends in time")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "page test failed:\n{stdout}\n{stderr}\n{}",
        held.worker.log()
    );
    for (n, (task_id, (outcome, state, success, runs))) in
        held.tasks.iter().zip(BUTTONS).enumerate()
    {
        let task = env.wait_terminal(*task_id).await;
        assert_eq!(task.status, "completed", "{outcome}: {}", held.worker.log());
        // The click is recorded once, as the page's, verified by the gateway's token.
        let actions: Vec<(String, Option<String>, Option<String>, String)> = sqlx::query_as(
            "SELECT action, by, verified_by, reason FROM operator_actions \
             WHERE task_id = $1 AND tool_call_id = $2",
        )
        .bind(task_id)
        .bind(HELD_CALL)
        .fetch_all(&env.pool)
        .await
        .unwrap();
        assert_eq!(actions.len(), 1, "{outcome}: {actions:?}");
        let (action, by, verified_by, reason) = &actions[0];
        assert_eq!(action, outcome);
        assert_eq!(by.as_deref(), Some("page"));
        assert!(verified_by.is_some(), "{outcome}: verified by the token");
        assert_eq!(reason, &format!("{outcome} by the page test"));
        let events = env.stored_events(*task_id).await;
        let resolved: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "tool.resolved")
            .collect();
        assert_eq!(resolved.len(), 1, "{outcome}");
        assert_eq!(resolved[0]["data"]["outcome"], *outcome);
        let resumed = events
            .iter()
            .any(|e| e["type"] == "task.resumed" && e["data"]["reason"] == "resolved");
        assert!(resumed, "{outcome}: the task resumed on the resolution");
        let (got_state, got_success, result): (String, Option<bool>, Option<Value>) =
            sqlx::query_as(
                "SELECT state, success, result FROM tool_calls \
                 WHERE task_id = $1 AND tool_call_id = $2",
            )
            .bind(task_id)
            .bind(HELD_CALL)
            .fetch_one(&env.pool)
            .await
            .unwrap();
        assert_eq!(
            (got_state.as_str(), got_success),
            (state, Some(success)),
            "{outcome}"
        );
        if outcome == "succeeded" {
            // The result typed on the page, as JSON.
            assert_eq!(
                result,
                Some(json!({"charged": 5, "receipt": "seen-by-page"}))
            );
        }
        assert_eq!(
            held.charges(*task_id),
            charged_before[n] + runs,
            "{outcome}: charges run after the kill"
        );
    }
    gateway.stop().await;
    drop(held.worker);
    held.env.stop().await;
}
