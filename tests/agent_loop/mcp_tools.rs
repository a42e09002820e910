//! MCP tool sources against a real MCP server process (tests/mcp_server, built by cargo as
//! `agentd-test-mcp-server`): tools offered as `<server>__<tool>` with their schemas, calls
//! through the real worker and the fake LLM recorded in tool_calls and shown to the next
//! recursion, grants by name only, call timeouts, a killed server giving a clear error and
//! coming back, the HTTP transport, tool effects from annotations and configuration, the
//! idempotency key in the request's `_meta`, and `agentd tools`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::harness::{self, TestEnv};
use crate::support::process::alive;
use crate::support::wait::{self, NEXT_STEP_WITHIN};
use agentd::config::{McpServerSettings, ToolsSettings};
use agentd::core::types::{ToolCallRequest, ToolEffect};
use agentd::ports::ToolCallContext;
use agentd::scripted_model::{answer_reply, call_tool_reply};
use agentd::tools::ToolRegistry;
use serde_json::{Value, json};
use uuid::Uuid;

const PID_ENV: &str = "AGENTD_TEST_MCP_PID_FILE";
const GATE_ENV: &str = "AGENTD_TEST_MCP_GATE";
const LEDGER_ENV: &str = "AGENTD_TEST_MCP_LEDGER";

/// A call to a server that is down fails at once, without waiting for a connection or the
/// call timeout: a whole task of one such call ends within this.
const DOWN_CALL_WITHIN: Duration = Duration::from_secs(5);

/// `(name, success, result, error)` of a task's tool calls, in order.
async fn tool_rows(
    env: &TestEnv,
    task_id: Uuid,
) -> Vec<(String, bool, Option<Value>, Option<String>)> {
    sqlx::query_as(
        "SELECT name, success, result, error FROM tool_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("tool_calls")
}

/// Runs a task whose first recursion calls `calls`, then answers; returns its tool rows.
async fn run_calls(
    env: &TestEnv,
    agent: Uuid,
    marker: &str,
    calls: Vec<(&str, Value)>,
) -> Vec<(String, bool, Option<Value>, Option<String>)> {
    env.fake
        .script(marker, vec![call_tool_reply(calls), answer_reply("done")]);
    let task_id = env.submit(agent, marker).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{marker}: {:?}", task.error);
    tool_rows(env, task_id).await
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Waits until `condition` holds (a process started or stopped).
async fn wait_for(what: &str, condition: impl Fn() -> bool) {
    wait::until_true(what, NEXT_STEP_WITHIN, || {
        let holds = condition();
        async move { holds }
    })
    .await;
}

#[tokio::test]
async fn mcp_tools_run_through_the_worker_and_survive_a_crash() {
    let dir = harness::scratch_dir("mcp");
    let (pid_file, gate) = (dir.join("pid"), dir.join("gate"));
    let server = harness::test_mcp_server("testsrv", &[(PID_ENV, &pid_file), (GATE_ENV, &gate)]);
    let env = TestEnv::start_with(|s| {
        s.tools.mcp = vec![server];
        s.tools.call_timeout_ms = 1_000;
        s.tools.restart_initial_delay_ms = 100;
        s.tools.restart_max_delay_ms = 300;
    })
    .await;
    let agent = env.agent(None, Some(&GRANTED)).await;
    calls_are_recorded_and_fed_back(&env, agent).await;
    null_grant_gets_builtins_only(&env).await;
    crash_gives_a_clear_error_then_recovers(&env, agent, &pid_file, &gate).await;

    let pid = read_pid(&pid_file).expect("pid");
    env.stop().await;
    wait_for("the MCP server to stop with the worker", || !alive(pid)).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// What the agent of the main test may call.
const GRANTED: [&str; 4] = [
    "calculate",
    "testsrv__add",
    "testsrv__fail",
    "testsrv__sleep",
];

/// add succeeds, fail reports its error, sleep times out; the next recursion sees all three;
/// only the granted tools are offered, with the server's schema and description.
async fn calls_are_recorded_and_fed_back(env: &TestEnv, agent: Uuid) {
    let rows = run_calls(
        env,
        agent,
        "mcp-calls",
        vec![
            ("testsrv__add", json!({"a": 2, "b": 3})),
            ("testsrv__fail", json!({"message": "boom"})),
            ("testsrv__sleep", json!({"ms": 5000})),
        ],
    )
    .await;
    assert_eq!(
        rows[0],
        ("testsrv__add".into(), true, Some(json!("5")), None)
    );
    assert_eq!((rows[1].1, rows[1].3.as_deref()), (false, Some("boom")));
    let timeout = rows[2].3.clone().unwrap_or_default();
    assert!(
        timeout.contains("did not answer 'sleep' within 1000 ms"),
        "{timeout}"
    );

    let requests = env.fake.requests_for("mcp-calls");
    assert_eq!(
        requests[0].tool_names(),
        GRANTED,
        "granted tools only, in order"
    );
    let add = requests[0].body["tools"]
        .as_array()
        .and_then(|tools| {
            tools
                .iter()
                .find(|t| t["function"]["name"] == "testsrv__add")
        })
        .cloned()
        .unwrap_or_default();
    let schema = &add["function"]["parameters"];
    assert_eq!(schema["properties"]["a"]["type"], "number", "{add:#}");
    assert_eq!(
        add["function"]["description"],
        "Add two numbers and return the sum"
    );
    let next = requests[1].system_state().expect("state");
    let results = &next["last_recursion"]["tool_call_results"];
    assert_eq!(results[0]["name"], "testsrv__add");
    assert_eq!(results[0]["result"], json!("5"));
    assert_eq!(results[2]["success"], false);
}

async fn null_grant_gets_builtins_only(env: &TestEnv) {
    let agent = env.agent(None, None).await;
    let rows = run_calls(
        env,
        agent,
        "mcp-null",
        vec![("testsrv__echo", json!({"text": "hi"}))],
    )
    .await;
    assert_eq!(
        rows[0].3.as_deref(),
        Some("tool 'testsrv__echo' is not granted to this agent")
    );
    let offered = env.fake.requests_for("mcp-null")[0].tool_names();
    assert_eq!(offered, ["calculate", "take_memo", "current_time"]);
}

async fn crash_gives_a_clear_error_then_recovers(
    env: &TestEnv,
    agent: Uuid,
    pid_file: &Path,
    gate: &Path,
) {
    let first = read_pid(pid_file).expect("the server wrote its pid");
    std::fs::write(gate, b"closed").expect("gate");
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    wait_for("the killed server to be gone", || !alive(first)).await;
    let add = || vec![("testsrv__add", json!({"a": 1, "b": 1}))];
    // The worker learns of the crash from its supervisor, or from the broken pipe of the
    // next call ("could not be reached"); once it knows, a call is refused as unavailable.
    // Every call fails at once with a clear error.
    let deadline = tokio::time::Instant::now() + NEXT_STEP_WITHIN;
    for attempt in 0.. {
        let started = std::time::Instant::now();
        let down = run_calls(env, agent, &format!("mcp-down-{attempt}"), add()).await;
        let error = down[0].3.clone().unwrap_or_default();
        assert!(!down[0].1);
        assert!(
            started.elapsed() < DOWN_CALL_WITHIN,
            "no hanging while down"
        );
        if error.contains("MCP server 'testsrv' is unavailable") {
            break;
        }
        assert!(
            error.contains("MCP server 'testsrv' could not be reached"),
            "a clear error: {error}"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reported unavailable"
        );
    }

    std::fs::remove_file(gate).expect("open the gate");
    wait_for("the server to be restarted", || {
        read_pid(pid_file).is_some_and(|pid| pid != first && alive(pid))
    })
    .await;
    // Restarted is not yet connected: calls fail until the supervisor has the session.
    let deadline = tokio::time::Instant::now() + NEXT_STEP_WITHIN;
    for attempt in 0.. {
        let rows = run_calls(env, agent, &format!("mcp-back-{attempt}"), add()).await;
        if rows[0].1 {
            assert_eq!(rows[0].2, Some(json!("2")));
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restarted MCP server never answered"
        );
        tokio::time::sleep(wait::POLL).await;
    }
}

fn http_server(name: &str, url: String) -> McpServerSettings {
    McpServerSettings {
        name: name.to_owned(),
        command: None,
        args: Vec::new(),
        env: Default::default(),
        url: Some(url),
        bearer_token: None,
        call_timeout_ms: Some(5_000),
        effect: None,
        effects: Default::default(),
    }
}

/// Starts the test server on `addr` (streamable HTTP) and waits until it listens.
async fn start_http_server(addr: &str) -> tokio::process::Child {
    let child = tokio::process::Command::new(harness::test_mcp_server_bin())
        .args(["--http", addr])
        .kill_on_drop(true)
        .spawn()
        .expect("start the HTTP MCP server");
    wait::until_true("the HTTP MCP server listens", NEXT_STEP_WITHIN, || async {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
    child
}

fn echo_request(text: &str) -> ToolCallRequest {
    ToolCallRequest {
        id: "call_1".into(),
        name: "web__echo".into(),
        arguments: json!({ "text": text }).to_string(),
    }
}

#[tokio::test]
async fn streamable_http_servers_work_and_reconnect() {
    let addr = harness::free_local_addr();
    let mut child = start_http_server(&addr).await;
    let settings = ToolsSettings {
        mcp: vec![http_server("web", format!("http://{addr}/mcp"))],
        restart_initial_delay_ms: 100,
        restart_max_delay_ms: 300,
        ..ToolsSettings::default()
    };
    let registry = ToolRegistry::from_settings(&settings)
        .await
        .expect("registry");
    let catalog = registry.catalog();
    let echo = catalog
        .iter()
        .find(|t| t.spec.name == "web__echo")
        .expect("web__echo");
    assert_eq!(
        (echo.source.as_str(), echo.granted_by_default),
        ("mcp:web", false)
    );
    let grants = vec!["web__echo".to_owned()];
    let result = registry
        .call(
            Some(&grants),
            &echo_request("over http"),
            Default::default(),
        )
        .await;
    assert_eq!(
        (result.success, result.result),
        (true, Some(json!("over http")))
    );

    let _ = child.kill().await;
    let down = registry
        .call(Some(&grants), &echo_request("lost"), Default::default())
        .await;
    let error = down.error.unwrap_or_default();
    assert!(error.contains("MCP server 'web'"), "{error}");
    let mut child = start_http_server(&addr).await;
    wait::until_true(
        "the HTTP MCP server reconnected",
        NEXT_STEP_WITHIN,
        || async {
            let back = registry
                .call(Some(&grants), &echo_request("back"), Default::default())
                .await;
            back.success
        },
    )
    .await;
    registry.shutdown().await;
    let _ = child.kill().await;
}

#[tokio::test]
async fn an_unreachable_server_fails_the_start() {
    let mut ghost = ToolsSettings {
        mcp: vec![harness::test_mcp_server("ghost", &[])],
        restart_initial_delay_ms: 20,
        ..ToolsSettings::default()
    };
    ghost.mcp[0].command = Some("/nonexistent/agentd-mcp-server".to_owned());
    let error = ToolRegistry::from_settings(&ghost)
        .await
        .expect_err("start fails");
    assert!(
        format!("{error:#}").contains("MCP server 'ghost'"),
        "{error:#}"
    );
}

/// `t`: effects from the annotations, two tools overridden (by own and by namespaced name)
/// and one override naming no tool (a warning only); `u`: a server-wide effect with one
/// tool overridden.
fn effect_servers(ledger: &Path) -> Vec<McpServerSettings> {
    use ToolEffect::*;
    let mut t = harness::test_mcp_server("t", &[(LEDGER_ENV, ledger)]);
    t.effects = BTreeMap::from([
        ("echo".to_owned(), ReadOnly),
        ("t__add".to_owned(), Idempotent),
        ("no_such_tool".to_owned(), ReadOnly),
    ]);
    let mut u = harness::test_mcp_server("u", &[]);
    u.effect = Some(Idempotent);
    u.effects = BTreeMap::from([("lookup".to_owned(), SideEffect)]);
    vec![t, u]
}

fn charge(arguments: Value, id: &str) -> ToolCallRequest {
    ToolCallRequest {
        id: id.into(),
        name: "t__charge".into(),
        arguments: arguments.to_string(),
    }
}

#[tokio::test]
async fn effects_and_idempotency_keys_reach_mcp_tools() {
    use ToolEffect::*;
    let dir = harness::scratch_dir("mcp-effects");
    let ledger = dir.join("ledger");
    let settings = ToolsSettings {
        mcp: effect_servers(&ledger),
        ..ToolsSettings::default()
    };
    let registry = ToolRegistry::from_settings(&settings)
        .await
        .expect("an unknown `effects` key does not fail the start");
    let expected = [
        ("t__charge", SideEffect),
        ("t__upsert", Idempotent),
        ("t__lookup", ReadOnly),
        ("t__env", ReadOnly),
        ("t__sleep", SideEffect),
        ("t__echo", ReadOnly),
        ("t__add", Idempotent),
        ("u__charge", Idempotent),
        ("u__echo", Idempotent),
        ("u__lookup", SideEffect),
    ];
    let catalog = registry.catalog();
    for (name, effect) in expected {
        assert_eq!(registry.effect_of(name), effect, "{name}");
        let listed = catalog
            .iter()
            .find(|t| t.spec.name == name)
            .map(|t| t.effect);
        assert_eq!(listed, Some(effect), "{name} in the catalog");
    }

    let grants = vec!["t__charge".to_owned(), "t__upsert".to_owned()];
    let keyed = ToolCallContext {
        idempotency_key: Some("task-1:call_1"),
    };
    let charged = registry
        .call(
            Some(&grants),
            &charge(json!({"amount": 12.5}), "call_1"),
            keyed,
        )
        .await;
    assert_eq!(charged.result, Some(json!("charged 12.5")), "{charged:?}");
    let slow = charge(json!({"amount": 1, "sleep_ms": 20}), "call_x");
    let unkeyed = registry
        .call(Some(&grants), &slow, Default::default())
        .await;
    assert!(unkeyed.success, "{unkeyed:?}");
    let upsert = ToolCallRequest {
        id: "call_2".into(),
        name: "t__upsert".into(),
        arguments: json!({"name": "a", "value": "b"}).to_string(),
    };
    let keyed = ToolCallContext {
        idempotency_key: Some("task-1:call_2"),
    };
    assert!(registry.call(Some(&grants), &upsert, keyed).await.success);
    registry.shutdown().await;
    let lines = std::fs::read_to_string(&ledger).expect("the ledger");
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        ["task-1:call_1", "none", "upsert task-1:call_2"]
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn agentd_tools_lists_builtin_and_mcp_tools() {
    let dir = harness::scratch_dir("mcp-cli");
    let pid_file = dir.join("pid");
    let config = dir.join("tools.toml");
    let toml = format!(
        "[[tools.mcp]]\nname = \"testsrv\"\ncommand = \"{}\"\nenv = {{ {PID_ENV} = \"{}\" }}\n\
         effects = {{ echo = \"read_only\" }}\n",
        harness::test_mcp_server_bin(),
        pid_file.display()
    );
    std::fs::write(&config, toml).expect("config file");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .arg("--config")
        .arg(&config)
        .arg("tools")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .await
        .expect("run agentd tools");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .to_owned()
    };
    let columns = |name: &str| {
        let line = line(&format!("{name} "));
        line.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        columns("calculate"),
        "calculate built-in read_only",
        "{stdout}"
    );
    for (tool, effect) in [
        ("testsrv__echo", "read_only"),
        ("testsrv__add", "side_effect"),
        ("testsrv__sleep", "side_effect"),
        ("testsrv__fail", "side_effect"),
        ("testsrv__charge", "side_effect"),
        ("testsrv__upsert", "idempotent"),
        ("testsrv__lookup", "read_only"),
        ("testsrv__env", "read_only"),
    ] {
        let expected = format!("{tool} mcp:testsrv {effect}");
        assert_eq!(columns(tool), expected, "{stdout}");
    }
    let pid = read_pid(&pid_file).expect("the env table reached the server as written");
    wait_for("the listed server to be stopped", || !alive(pid)).await;
    let _ = std::fs::remove_dir_all(dir);
}
