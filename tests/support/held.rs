//! Tool calls held for a person with an unknown outcome (CONTRACT v3 §14), for the tests of
//! the faces that resolve them (the page's four buttons, `agentd resolve`). Produced the
//! only way the product produces them: `count` tasks of an agent with `on_unknown = hold`
//! each start the side-effecting `charge` of the test MCP server (which appends each
//! idempotency key it executes to a ledger file); the worker binary running them is killed
//! (SIGKILL) while every call runs; a second worker finds each call cut short and holds its
//! task (`waiting`, reason `unknown_outcome`). See tests/features/unknown_outcomes.rs for
//! the feature itself.

use std::path::PathBuf;

use agentd::scripted_model::ScriptedModel;
use uuid::Uuid;

use super::harness::{self, TestEnv};
use super::process::{self, WorkerProcess};
use super::wait::{self, Says, TASK_ENDS_WITHIN};
use super::words;

/// The id of each held call (the first call of the task's first reply).
pub const HELD_CALL: &str = "call_0";

/// How long `charge` sleeps before it records its effect: long enough that every task's
/// call has started before the first worker is killed, short enough for a `retry`.
const CHARGE_SLEEPS_MS: u64 = 5_000;

/// Held tasks with the worker that holds them and what they run against.
pub struct HeldCalls {
    pub env: TestEnv,
    /// The held tasks, each waiting with its call [`HELD_CALL`] unknown.
    pub tasks: Vec<Uuid>,
    /// The ledger file of the MCP server: one line per executed charge (its key).
    pub ledger: PathBuf,
    /// The second worker (the binary), which resumes the tasks once resolved.
    pub worker: WorkerProcess,
    /// The word-script model both workers ask (kept alive).
    pub llm: ScriptedModel,
}

impl HeldCalls {
    /// How often the charge with `task_id`'s key was executed.
    pub fn charges(&self, task_id: Uuid) -> usize {
        let key = format!("{task_id}:{HELD_CALL}");
        std::fs::read_to_string(&self.ledger)
            .unwrap_or_default()
            .lines()
            .filter(|line| *line == key)
            .count()
    }
}

async fn started_calls(env: &TestEnv, tasks: &[Uuid]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM tool_calls WHERE task_id = ANY($1) AND tool_call_id = $2 \
         AND state = 'started'",
    )
    .bind(tasks)
    .bind(HELD_CALL)
    .fetch_one(&env.pool)
    .await
    .expect("tool_calls")
}

async fn held_count(env: &TestEnv, tasks: &[Uuid]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE task_id = ANY($1) AND status = 'waiting' \
         AND wait_reason = 'unknown_outcome'",
    )
    .bind(tasks)
    .fetch_one(&env.pool)
    .await
    .expect("tasks")
}

/// `count` tasks, each held with its `charge` call unknown.
pub async fn held_calls(count: usize) -> HeldCalls {
    let llm = words::start().await;
    let base_url = llm.base_url();
    let env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.lease_secs = 1.5;
        s.worker.tool_timeout_ms = 30_000;
    })
    .await;
    let dir = harness::scratch_dir("held");
    let ledger: PathBuf = dir.join("executed.txt");
    let config = dir.join("tools.toml");
    let toml = format!(
        "[tools]\ncall_timeout_ms = 30000\n[[tools.mcp]]\nname = \"t\"\ncommand = \"{}\"\n\
         env = {{ AGENTD_TEST_MCP_LEDGER = \"{}\" }}\n",
        harness::test_mcp_server_bin(),
        ledger.display()
    );
    std::fs::write(&config, toml).expect("config file");
    let agent = env.agent(None, Some(&["t__charge", "calculate"])).await;
    sqlx::query("UPDATE agents SET on_unknown = 'hold' WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("on_unknown");
    let mut tasks = Vec::with_capacity(count);
    for n in 0..count {
        let input = format!(
            r#"charge number {n} steps=1 tool=t__charge args={{"amount":5,"sleep_ms":{CHARGE_SLEEPS_MS}}}"#
        );
        tasks.push(env.submit(agent, &input).await);
    }
    let mut first = WorkerProcess::spawn_with_config(&env.settings, Some(&config), &[]);
    let what = Says(|| format!("{count} charges started: {}", first.log()));
    let want = i64::try_from(count).expect("count");
    wait::until_true(what, TASK_ENDS_WITHIN, || async {
        started_calls(&env, &tasks).await == want
    })
    .await;
    let killed_servers = first.tool_servers();
    assert!(
        !killed_servers.is_empty(),
        "the worker runs its tool server"
    );
    first.kill();
    let worker = WorkerProcess::spawn_with_config(&env.settings, Some(&config), &[]);
    let what = Says(|| format!("{count} tasks held: {}", worker.log()));
    wait::until_true(what, TASK_ENDS_WITHIN, || async {
        held_count(&env, &tasks).await == want
    })
    .await;
    // Whatever the killed worker's charges did, they have done once its server is gone.
    process::wait_gone(&killed_servers).await;
    HeldCalls {
        env,
        tasks,
        ledger,
        worker,
        llm,
    }
}
