//! Nothing lost, nothing twice: the real `agentd worker` binary as a child process, killed,
//! signalled, raced and cut off from its broker, against the local RabbitMQ and PostgreSQL.
//! Each test names the invariant it checks.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::harness::{self, TestEnv};
use crate::support::process::WorkerProcess;
use crate::support::wait::{self, NEXT_STEP_WITHIN, Says, TASK_ENDS_WITHIN, WORKER_STOPS_WITHIN};
use crate::support::words::{self, ByInput};
use agentd::scripted_model::ScriptedModel;
use serde_json::Value;
use uuid::Uuid;

/// Settings shared by these tests: a short lease so a dead worker's tasks come back fast.
async fn env(llm: &ScriptedModel) -> TestEnv {
    env_with_lease(llm, 2.0).await
}

async fn env_with_lease(llm: &ScriptedModel, lease_secs: f64) -> TestEnv {
    let base_url = llm.base_url();
    TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.concurrency = 8;
        s.worker.lease_secs = lease_secs;
        s.worker.shutdown_grace_secs = 1;
        s.worker.max_deliveries = 3;
    })
    .await
}

async fn count(env: &TestEnv, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&env.pool)
        .await
        .expect(sql)
}

/// Waits until `sql` counts at least `at_least` rows; fails with `worker`'s log.
async fn wait_count(
    env: &TestEnv,
    sql: &str,
    at_least: i64,
    within: Duration,
    worker: &WorkerProcess,
) {
    let what = Says(|| format!("{sql} >= {at_least}; the worker's log:\n{}", worker.log()));
    wait::until_true(what, within, || async { count(env, sql).await >= at_least }).await;
}

/// The task ended by a death notice ends within this once a worker runs: the deaths queue
/// is read at once, the task failed in one statement.
const DEATH_HANDLED_WITHIN: Duration = Duration::from_secs(15);

/// How long this test's database refuses connections: longer than the worker's pool
/// waits for one, so the worker does see the outage.
const OUTAGE: Duration = Duration::from_secs(3);

/// Invariant of every finished task: completed once, recursions 1..=n each written once,
/// events numbered 1..m without a gap, one task.started, one terminal event and it is last.
async fn assert_exactly_once(env: &TestEnv, task_id: Uuid, recursions: i32) {
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{task_id}: {:?}", task.error);
    let iterations: Vec<i32> = sqlx::query_scalar(
        "SELECT iteration FROM recursions WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        iterations,
        (1..=recursions).collect::<Vec<_>>(),
        "{task_id}"
    );
    let events = env.stored_events(task_id).await;
    for (index, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"],
            Value::from(index + 1),
            "{task_id}: gap at {index}"
        );
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    let terminal = ["task.completed", "task.failed", "task.cancelled"];
    assert_eq!(
        kinds.iter().filter(|k| terminal.contains(k)).count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"task.completed"));
    assert_eq!(
        kinds.iter().filter(|k| **k == "task.started").count(),
        1,
        "{kinds:?}"
    );
}

async fn submit_all(env: &TestEnv, agent: Uuid, inputs: &[String]) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for input in inputs {
        ids.push(env.submit(agent, input).await);
    }
    ids
}

/// Waits until no statement of another session runs on the test's database: a statement
/// the killed worker sent before it died is then committed or gone for good.
async fn wait_for_idle_database(env: &TestEnv) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
               AND pid <> pg_backend_pid() AND state <> 'idle'";
    wait::until_true("no statement runs", NEXT_STEP_WITHIN, || async {
        count(env, sql).await == 0
    })
    .await;
}

/// The highest committed recursion of every task.
async fn committed_iterations(env: &TestEnv) -> std::collections::HashMap<Uuid, i32> {
    sqlx::query_as::<_, (Uuid, i32)>(
        "SELECT task_id, max(iteration) FROM recursions GROUP BY task_id",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test]
async fn sigkill_mid_run_then_restart_loses_nothing_and_repeats_nothing() {
    let llm = words::start().await;
    let env = env(&llm).await;
    let agent = env.agent(None, None).await;
    let inputs: Vec<String> = (0..24)
        .map(|i| format!("kill-{i} steps=5 delay_ms=40"))
        .collect();
    let ids = submit_all(&env, agent, &inputs).await;
    let mut first = WorkerProcess::spawn(&env.settings, &[]);
    let recursions = "SELECT count(*) FROM recursions";
    wait_count(&env, recursions, 40, TASK_ENDS_WITHIN, &first).await;
    first.kill();
    wait_for_idle_database(&env).await;
    let committed = committed_iterations(&env).await;
    let unfinished = count(&env, "SELECT count(*) FROM tasks WHERE status = 'running'").await;
    assert!(unfinished > 0, "the kill must catch tasks mid-run");
    let second = WorkerProcess::spawn(&env.settings, &[]);
    for (task_id, input) in ids.iter().zip(&inputs) {
        assert_exactly_once(&env, *task_id, 6).await;
        // A recursion committed before the kill is never asked again. At most two are asked
        // twice: the one whose commit was in flight beside the next LLM call, and that call.
        let asked = llm.iterations_for(input);
        let done_before_kill = committed.get(task_id).copied().unwrap_or(0);
        for iteration in 1..=6u32 {
            let times = asked.iter().filter(|i| **i == iteration).count();
            let limit = match i32::try_from(iteration).unwrap() <= done_before_kill {
                true => 1,
                false => 2,
            };
            assert!(
                (1..=limit).contains(&times),
                "{input}: recursion {iteration} asked {times} times \
                 ({done_before_kill} committed before the kill): {asked:?}"
            );
        }
        assert!(asked.len() <= 8, "{input}: {asked:?}");
    }
    let resumed = count(
        &env,
        "SELECT count(*) FROM events WHERE type = 'task.resumed'",
    )
    .await;
    assert!(
        resumed > 0,
        "some tasks were resumed from a checkpoint: {}",
        second.log()
    );
    drop(second);
    env.stop().await;
}

#[tokio::test]
async fn sigterm_drains_and_leaves_unfinished_tasks_resumable() {
    let llm = words::start().await;
    let env = env(&llm).await;
    let agent = env.agent(None, None).await;
    let inputs: Vec<String> = (0..4)
        .map(|i| format!("term-{i} steps=2 delay_ms=1500"))
        .collect();
    let ids = submit_all(&env, agent, &inputs).await;
    let mut worker = WorkerProcess::spawn(&env.settings, &[]);
    let running = "SELECT count(*) FROM tasks WHERE status = 'running'";
    wait_count(&env, running, 4, NEXT_STEP_WITHIN, &worker).await;
    worker.terminate();
    let Some(status) = worker.wait(WORKER_STOPS_WITHIN).await else {
        panic!("no exit after SIGTERM:\n{}", worker.log());
    };
    assert!(
        status.success(),
        "exit 0 after SIGTERM: {status:?}\n{}",
        worker.log()
    );
    assert_no_error_logged(&worker.log(), "after a drain");
    let failed = count(
        &env,
        "SELECT count(*) FROM tasks WHERE status IN ('failed', 'cancelled')",
    )
    .await;
    assert_eq!(failed, 0, "SIGTERM never fails or cancels a task");
    let held = count(
        &env,
        "SELECT count(*) FROM tasks WHERE lease_owner IS NOT NULL AND status = 'running'",
    )
    .await;
    assert_eq!(held, 0, "unfinished tasks are released, not held");
    let _next = WorkerProcess::spawn(&env.settings, &[]);
    for task_id in ids {
        assert_exactly_once(&env, task_id, 3).await;
    }
    env.stop().await;
}

/// A clean stop logs no error: the consumers and the publisher close their channels before
/// the connection (lapin logs a connection error when a channel is still closing).
fn assert_no_error_logged(log: &str, when: &str) {
    assert!(
        !log.lines().any(|line| line.contains("ERROR")),
        "{when}: a clean stop logs no error:\n{log}"
    );
}

/// A worker stopped while idle closes its channels before its connection: lapin
/// logged "Connection error … invalid channel state: Closing" on every such stop when the
/// channels were only dropped.
#[tokio::test]
async fn an_idle_worker_stops_cleanly_without_an_error() {
    let llm = words::start().await;
    let env = env(&llm).await;
    for round in 0..2 {
        let mut worker = WorkerProcess::spawn(&env.settings, &[]);
        // Stopped once every consumer is on: the tasks, deaths and pending control queues
        // each have this worker's (its own control queue is subscribed beside them).
        let names = &env.settings.amqp;
        let queues = [
            &names.tasks_queue,
            &names.deaths_queue,
            &names.control_pending_queue,
        ];
        let what = Says(|| format!("every consumer on:\n{}", worker.log()));
        wait::until_true(what, wait::WORKER_READY_WITHIN, || async {
            for queue in queues {
                if env.queue_state(queue).await.1 == 0 {
                    return false;
                }
            }
            true
        })
        .await;
        worker.terminate();
        let Some(status) = worker.wait(WORKER_STOPS_WITHIN).await else {
            panic!("no exit after SIGTERM:\n{}", worker.log());
        };
        let log = worker.log();
        assert!(status.success(), "round {round}: exit 0: {status:?}\n{log}");
        assert_no_error_logged(&log, &format!("round {round}"));
    }
    env.stop().await;
}

#[tokio::test]
async fn a_redelivered_message_waits_for_its_live_holder() {
    let llm = words::start().await;
    // A lease long enough that a loaded machine never lets it lapse while its holder lives.
    let env = env_with_lease(&llm, 15.0).await;
    let agent = env.agent(None, None).await;
    let _a = WorkerProcess::spawn(&env.settings, &[]);
    let _b = WorkerProcess::spawn(&env.settings, &[]);
    let input = "race steps=3 delay_ms=300";
    let task_id = Uuid::now_v7();
    let body =
        serde_json::json!({"task_id": task_id, "agent_id": agent, "input": input}).to_string();
    env.publish_raw(body.as_bytes()).await;
    wait::until_true("the task started", NEXT_STEP_WITHIN, || async {
        count(&env, "SELECT count(*) FROM recursions").await >= 1
    })
    .await;
    // The same message again while the first holder runs it, as a redelivery after a
    // connection blip would bring it: it must neither run twice nor be dropped early.
    env.publish_raw(body.as_bytes()).await;
    assert_exactly_once(&env, task_id, 4).await;
    let attempts: Vec<(i32, i32, String)> = sqlx::query_as(
        "SELECT iteration, attempt, status FROM llm_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        llm.calls_for(input),
        4,
        "the LLM ran each recursion once: {attempts:?}\n{}\n{}",
        _a.log(),
        _b.log()
    );
    // The copy that waited for its live holder is acknowledged once the task has ended: no
    // message is left in the queue, ready or held.
    let queue = &env.settings.amqp.tasks_queue;
    wait::until_true("both deliveries were settled", NEXT_STEP_WITHIN, || async {
        crate::support::observe::broker_messages(queue) == Some(0)
    })
    .await;
    env.stop().await;
}

/// The broker's connection pids of the connections opened by process `pid`.
fn connections_of(pid: u32) -> Vec<String> {
    let output = Command::new("rabbitmqctl")
        .args(["-q", "list_connections", "pid", "client_properties"])
        .output()
        .expect("rabbitmqctl");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains(&format!("{{\"connection_name\",\"agentd-{pid}\"}}")))
        .filter_map(|line| line.split('\t').next().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_dropped_broker_connection_is_survived() {
    let llm = words::start().await;
    let env = env(&llm).await;
    let agent = env.agent(None, None).await;
    let inputs: Vec<String> = (0..6)
        .map(|i| format!("drop-{i} steps=4 delay_ms=150"))
        .collect();
    let ids = submit_all(&env, agent, &inputs).await;
    let worker = WorkerProcess::spawn(&env.settings, &[]);
    let recursions = "SELECT count(*) FROM recursions";
    wait_count(&env, recursions, 3, NEXT_STEP_WITHIN, &worker).await;
    let names = connections_of(worker.pid());
    assert!(!names.is_empty(), "the worker's connection is listed");
    for name in names {
        let status = Command::new("rabbitmqctl")
            .args(["-q", "close_connection", &name, "test: connection drop"])
            .status()
            .expect("rabbitmqctl close_connection");
        assert!(status.success());
    }
    for task_id in ids {
        assert_exactly_once(&env, task_id, 5).await;
    }
    let log = worker.log();
    assert!(
        log.contains("reconnect") || log.contains("unavailable"),
        "{log}"
    );
    env.stop().await;
}

#[tokio::test]
async fn the_api_key_appears_nowhere() {
    const KEY: &str = "sk-agentd-test-SECRET-4242";
    let llm = words::start().await;
    let env = env(&llm).await;
    let agent = env.agent(None, None).await;
    let ok = env.submit(agent, "secret-ok steps=1").await;
    let denied = env.submit(agent, "secret-denied status=401").await;
    // A tool process (a stdio MCP server) reports its whole environment back.
    let tool_agent = env.agent(None, Some(&["t__env"])).await;
    let tool_task = env
        .submit(tool_agent, "secret-tool steps=1 tool=t__env")
        .await;
    let dir = harness::scratch_dir("secret-tool");
    let config = tool_server_config(&dir);
    let worker = WorkerProcess::spawn_with_config(
        &env.settings,
        Some(&config),
        &[("AGENTD__LLM__API_KEY", KEY), ("RUST_LOG", "debug")],
    );
    assert_exactly_once(&env, ok, 2).await;
    assert_exactly_once(&env, tool_task, 2).await;
    let failed = env.wait_terminal(denied).await;
    assert_eq!(failed.fail_reason.as_deref(), Some("llm_error"));
    assert!(
        llm.authorizations()
            .iter()
            .all(|auth| auth.as_deref() == Some(&format!("Bearer {KEY}")))
    );
    assert_tool_env_is_clean(&env, tool_task).await;
    let dump: String = sqlx::query_scalar(
        "SELECT concat_ws(' ', (SELECT string_agg(t::text, ' ') FROM tasks t), \
                (SELECT string_agg(r::text, ' ') FROM recursions r), \
                (SELECT string_agg(l::text, ' ') FROM llm_calls l), \
                (SELECT string_agg(p::text, ' ') FROM llm_request_parts p), \
                (SELECT string_agg(c::text, ' ') FROM tool_calls c), \
                (SELECT string_agg(e::text, ' ') FROM events e))",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(dump.contains("scripted 401"), "the dump covers the failure");
    assert!(
        dump.contains(TOOL_ENV_VALUE),
        "the dump covers the tool's env"
    );
    assert!(!dump.contains(KEY), "the key is in the tables");
    let log = worker.log();
    assert!(
        log.contains("scripted 401"),
        "the log covers the failure: {log}"
    );
    assert!(!log.contains(KEY), "the key is in the log");
    drop(worker);
    env.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The variable the tool server's `env` table sets, and its value.
const TOOL_ENV: (&str, &str) = ("AGENTD_TEST_TOOL_SETTING", TOOL_ENV_VALUE);
const TOOL_ENV_VALUE: &str = "configured-for-the-tool";

/// A config file with the test MCP server as `t` (stdio), its `env` table setting [`TOOL_ENV`].
fn tool_server_config(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("tools.toml");
    let toml = format!(
        "[[tools.mcp]]\nname = \"t\"\ncommand = \"{}\"\nenv = {{ {} = \"{}\" }}\n",
        harness::test_mcp_server_bin(),
        TOOL_ENV.0,
        TOOL_ENV.1
    );
    std::fs::write(&path, toml).expect("config file");
    path
}

/// What `t__env` saw: the allowlisted part of the worker's environment (PATH at least) and
/// the configured entry; nothing of agentd's own configuration (AGENTD__*: the API key, the
/// database and broker URLs) and nothing else of the worker's (CARGO_*, ...).
async fn assert_tool_env_is_clean(env: &TestEnv, task_id: Uuid) {
    let result: Value =
        sqlx::query_scalar("SELECT result FROM tool_calls WHERE task_id = $1 AND success")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("the t__env call succeeded");
    let vars = result.as_object().expect("an object of variables");
    assert_eq!(
        vars.get(TOOL_ENV.0),
        Some(&Value::from(TOOL_ENV.1)),
        "{result}"
    );
    assert!(vars.contains_key("PATH"), "{result}");
    let inherited = |name: &str| {
        agentd::tools::mcp::INHERITED_ENV
            .iter()
            .any(|allowed| match allowed.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == *allowed,
            })
    };
    for name in vars.keys() {
        assert!(!name.starts_with("AGENTD__"), "{name} reached the tool");
        assert!(
            inherited(name) || name == TOOL_ENV.0,
            "{name} reached the tool"
        );
    }
}

#[tokio::test]
async fn a_message_that_keeps_killing_workers_is_dead_lettered() {
    let llm = words::start().await;
    let mut env = env(&llm).await;
    let agent = env.agent(None, None).await;
    let input = "crash-loop steps=1 delay_ms=30000";
    let task_id = env.submit(agent, input).await;
    // Each worker takes the task, asks the LLM, and dies: delivery after delivery, until the
    // broker dead-letters the message (x-delivery-limit = max_deliveries = 3).
    let mut rounds = 0;
    let dead = loop {
        if let Some(dead) = env.dead_letter_now().await {
            break dead;
        }
        rounds += 1;
        assert!(rounds <= 6, "never dead-lettered");
        let mut worker = WorkerProcess::spawn(&env.settings, &[]);
        let what = Says(|| format!("round {rounds}: an LLM call\n{}", worker.log()));
        wait::until_true(what, NEXT_STEP_WITHIN, || async {
            llm.calls_for(input) >= rounds
        })
        .await;
        worker.kill();
        // The broker sees the connection die and gives the message back: to the tasks
        // queue, or past the delivery limit to the dead-letter queue.
        let names = &env.settings.amqp;
        wait::until_true("the message given back", NEXT_STEP_WITHIN, || async {
            env.queue_state(&names.tasks_queue).await.0
                + env.queue_state(&names.dead_letter_queue).await.0
                > 0
        })
        .await;
    };
    let message: Value = serde_json::from_slice(&dead.0).unwrap();
    assert_eq!(message["task_id"], Value::from(task_id.to_string()));
    // Delivered once, then redelivered up to the limit: four deliveries, never a fifth.
    assert_eq!(rounds, 4, "bounded by the delivery limit");
    assert_eq!(llm.calls_for(input), 4);
    // The death reaches the workers too: the task ends within seconds instead of staying
    // `running` with nobody on it.
    let started = Instant::now();
    let worker = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(task_id).await;
    assert!(
        started.elapsed() < DEATH_HANDLED_WITHIN,
        "ended after {:?}",
        started.elapsed()
    );
    assert_eq!(task.status, "failed", "{}", worker.log());
    assert_eq!(task.fail_reason.as_deref(), Some("delivery_limit"));
    let streams = env.published_streams(&[task_id], TASK_ENDS_WITHIN).await;
    harness::assert_whole_stream(task_id, &streams[&task_id]);
    let last = streams[&task_id].last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "task.failed");
    assert_eq!(last["data"]["reason"], "delivery_limit");
    assert_eq!(llm.calls_for(input), 4, "the dead task never ran again");
    drop(worker);
    env.stop().await;
}

/// Runs SQL on the server's maintenance database (not the test's, which goes away).
async fn admin(sql: &str) {
    let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/postgres")
        .await
        .expect("admin connection");
    sqlx::query(sql).execute(&pool).await.expect(sql);
    pool.close().await;
}

#[tokio::test]
async fn a_database_outage_pauses_tasks_instead_of_failing_them() {
    let llm = words::start().await;
    let env = env_with_lease(&llm, 10.0).await;
    let agent = env.agent(None, None).await;
    let inputs: Vec<String> = (0..4)
        .map(|i| format!("dbdown-{i} steps=4 delay_ms=300"))
        .collect();
    let ids = submit_all(&env, agent, &inputs).await;
    let mut worker = WorkerProcess::spawn(&env.settings, &[]);
    let recursions = "SELECT count(*) FROM recursions";
    wait_count(&env, recursions, 2, NEXT_STEP_WITHIN, &worker).await;
    // This test's database goes away for OUTAGE: new connections are refused and the open
    // ones (the worker's pool included) are cut. Other tests' databases are untouched.
    let database = env
        .settings
        .database
        .url
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    admin(&format!(
        "ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS false"
    ))
    .await;
    admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
    ))
    .await;
    // The test is about an outage lasting a while: a fixed wait, not an event.
    tokio::time::sleep(OUTAGE).await;
    assert!(
        worker.wait(Duration::ZERO).await.is_none(),
        "the worker is still up"
    );
    admin(&format!(
        "ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS true"
    ))
    .await;
    let completed = "SELECT count(*) FROM tasks WHERE status = 'completed'";
    wait_count(&env, completed, 4, TASK_ENDS_WITHIN, &worker).await;
    for task_id in ids {
        assert_exactly_once(&env, task_id, 5).await;
    }
    assert!(
        worker.log().contains("database unavailable"),
        "{}",
        worker.log()
    );
    assert!(
        env.dead_letter_now().await.is_none(),
        "no delivery was spent on the outage"
    );
    env.stop().await;
}
