//! The exactly-once tool ledger (CONTRACT v2 §7) with the real worker binary and a real MCP
//! server whose `charge` (side effect) and `upsert` (idempotent) tools write each
//! idempotency key they execute to a file: a worker is killed while a call runs, another
//! takes the task over. A committed outcome is never run again; an idempotent call is run
//! again under the same key; a side-effecting call cut short is not run again: its state is
//! `unknown` and the model is told so.

use std::path::{Path, PathBuf};

use crate::support::harness::{self, TestEnv};
use crate::support::process::{self, WorkerProcess};
use crate::support::wait::{self, Says, TASK_ENDS_WITHIN};
use crate::support::words;
use agentd::scripted_model::ScriptedModel;
use serde_json::Value;
use uuid::Uuid;

/// A worker environment whose config file adds the test MCP server as `t`, recording
/// executed idempotency keys in `ledger`.
struct LedgerEnv {
    env: TestEnv,
    config: PathBuf,
    ledger: PathBuf,
    agent: Uuid,
}

async fn ledger_env(llm: &ScriptedModel) -> LedgerEnv {
    let base_url = llm.base_url();
    let env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.lease_secs = 1.5;
        s.worker.tool_timeout_ms = 30_000;
    })
    .await;
    let dir = harness::scratch_dir("ledger");
    let ledger = dir.join("executed.txt");
    let config = dir.join("tools.toml");
    let toml = format!(
        "[tools]\ncall_timeout_ms = 30000\n[[tools.mcp]]\nname = \"t\"\ncommand = \"{}\"\n\
         env = {{ AGENTD_TEST_MCP_LEDGER = \"{}\" }}\n",
        harness::test_mcp_server_bin(),
        ledger.display()
    );
    std::fs::write(&config, toml).expect("config file");
    let agent = env
        .agent(None, Some(&["t__charge", "t__upsert", "calculate"]))
        .await;
    LedgerEnv {
        env,
        config,
        ledger,
        agent,
    }
}

/// The lines the tool server recorded.
fn executed(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The ledger row of one call: state, effect, idempotency key, success, error.
type Row = (String, String, Option<String>, Option<bool>, Option<String>);

async fn ledger_row(env: &TestEnv, task_id: Uuid, tool_call_id: &str) -> Option<Row> {
    sqlx::query_as(
        "SELECT state, effect, idempotency_key, success, error FROM tool_calls \
         WHERE task_id = $1 AND tool_call_id = $2",
    )
    .bind(task_id)
    .bind(tool_call_id)
    .fetch_optional(&env.pool)
    .await
    .expect("ledger row")
}

/// Waits until the call's ledger row is in `state`, then kills the worker; returns the
/// tool servers it leaves behind (see [`process::wait_gone`]).
async fn kill_when(
    env: &TestEnv,
    worker: &mut WorkerProcess,
    task_id: Uuid,
    call: &str,
    state: &str,
) -> Vec<u32> {
    let what = Says(|| format!("{call} {state}: {}", worker.log()));
    wait::until_true(what, TASK_ENDS_WITHIN, || async {
        ledger_row(env, task_id, call).await.map(|r| r.0).as_deref() == Some(state)
    })
    .await;
    let servers = worker.tool_servers();
    assert!(!servers.is_empty(), "the worker runs its tool server");
    worker.kill();
    servers
}

/// Runs `input` on a first worker killed when `call` reaches `state`, then on a second
/// worker to the end; returns the task and the killed worker's tool servers.
async fn run_with_kill(le: &LedgerEnv, input: &str, call: &str, state: &str) -> (Uuid, Vec<u32>) {
    let task_id = le.env.submit(le.agent, input).await;
    let mut first = WorkerProcess::spawn_with_config(&le.env.settings, Some(&le.config), &[]);
    let servers = kill_when(&le.env, &mut first, task_id, call, state).await;
    let second = WorkerProcess::spawn_with_config(&le.env.settings, Some(&le.config), &[]);
    let task = le.env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{}", second.log());
    (task_id, servers)
}

#[tokio::test]
async fn a_side_effect_cut_short_is_not_run_again_and_the_model_is_told() {
    let llm = words::start().await;
    let le = ledger_env(&llm).await;
    let input = r#"charge steps=1 tool=t__charge args={"amount":5,"sleep_ms":2500}"#;
    let (task_id, killed_servers) = run_with_kill(&le, input, "call_0", "started").await;
    let key = format!("{task_id}:call_0");
    let (state, effect, stored_key, success, error) =
        ledger_row(&le.env, task_id, "call_0").await.expect("row");
    assert_eq!(
        (state.as_str(), effect.as_str()),
        ("unknown", "side_effect")
    );
    assert_eq!(stored_key.as_deref(), Some(key.as_str()));
    assert_eq!(success, Some(false));
    assert!(
        error
            .unwrap_or_default()
            .contains("may or may not have taken effect"),
        "the model is told"
    );
    // Whatever the killed worker's charge did, it has done once its server is gone.
    process::wait_gone(&killed_servers).await;
    let runs = executed(&le.ledger).iter().filter(|l| **l == key).count();
    assert!(runs <= 1, "charged {runs} times with one key");
    let events = le.env.stored_events(task_id).await;
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.completed")
        .collect();
    assert_eq!(completed.len(), 1, "one outcome for the call");
    assert_eq!(completed[0]["data"]["success"], false);
    le.env.stop().await;
}

#[tokio::test]
async fn an_idempotent_call_cut_short_runs_again_under_the_same_key() {
    let llm = words::start().await;
    let le = ledger_env(&llm).await;
    let input = r#"upsert steps=1 tool=t__upsert args={"name":"a","value":"b","sleep_ms":2500}"#;
    let (task_id, killed_servers) = run_with_kill(&le, input, "call_0", "started").await;
    let (state, effect, stored_key, ..) =
        ledger_row(&le.env, task_id, "call_0").await.expect("row");
    assert_eq!(
        (state.as_str(), effect.as_str()),
        ("succeeded", "idempotent")
    );
    let line = format!("upsert {task_id}:call_0");
    assert_eq!(stored_key, Some(format!("{task_id}:call_0")));
    process::wait_gone(&killed_servers).await;
    let upserts: Vec<String> = executed(&le.ledger)
        .into_iter()
        .filter(|l| l.starts_with("upsert "))
        .collect();
    assert!(!upserts.is_empty(), "the retry ran");
    assert!(upserts.iter().all(|l| *l == line), "one key: {upserts:?}");
    le.env.stop().await;
}

#[tokio::test]
async fn a_committed_outcome_is_never_run_again() {
    let llm = words::start().await;
    let le = ledger_env(&llm).await;
    // One reply, two calls: a quick charge and a slow upsert. The worker dies once the
    // charge's outcome is committed, while the upsert still runs.
    let input = r#"both steps=1 tool=t__charge args={"amount":7} tool2=t__upsert args2={"name":"x","value":"y","sleep_ms":2500}"#;
    let (task_id, _) = run_with_kill(&le, input, "call_0", "succeeded").await;
    let charge_key = format!("{task_id}:call_0");
    let charged = executed(&le.ledger)
        .iter()
        .filter(|l| **l == charge_key)
        .count();
    assert_eq!(charged, 1, "the committed charge never ran again");
    let (state, ..) = ledger_row(&le.env, task_id, "call_0").await.expect("row");
    assert_eq!(state, "succeeded");
    let (upsert_state, ..) = ledger_row(&le.env, task_id, "call_0b").await.expect("row");
    assert_eq!(upsert_state, "succeeded", "the idempotent call was retried");
    le.env.stop().await;
}
