//! Evaluation runs (CONTRACT v3 §13) with the real binary, worker, scripted model, RabbitMQ
//! and PostgreSQL: `agentd eval run` reruns the selected ended tasks of an agent and
//! `agentd eval report --min-pass` gates on the outcome (0 when every recorded rerun
//! passed without asking the model, 1 when a new version changed an answer, 2 while the run
//! still runs); publishing a run again
//! reruns nothing twice (the rerun ids are UUIDv5 of run and source); a `--where` that
//! PostgreSQL refuses, that writes, or that selects nothing exits 1 and creates nothing, and
//! one that closes its parenthesis still selects only the agent's tasks; a cancelled run
//! sends nothing more and fails any gate. `routes` holds the
//! gateway's `/v1/evals`; `unicode` what any text does on its way to the tables.

mod routes;
mod unicode;

use std::process::{Command, Output};

use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use crate::support::wait;
use agentd::core::eval::rerun_task_id;
use agentd::scripted_model::{answer_reply, call_tool_reply};
use agentd::store::versions::{self, Draft};
use serde_json::json;
use uuid::Uuid;

/// How long a run of a few reruns may take to be filled and completed: the reruns' own
/// time (`wait::TASK_ENDS_WITHIN` is one task's) plus the sweep's period.
const RUN_COMPLETES_WITHIN: std::time::Duration = wait::TASK_ENDS_WITHIN;

pub(crate) fn agentd(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&env.settings))
        .output()
        .expect("agentd")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `agentd eval run ...`: the run's id (the command must succeed).
fn eval_run(env: &TestEnv, agent: Uuid, extra: &[&str]) -> Uuid {
    let agent = agent.to_string();
    let mut args = vec!["eval", "run", "--agent", agent.as_str(), "--rate", "200/s"];
    args.extend_from_slice(extra);
    let output = agentd(env, &args);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    Uuid::parse_str(stdout.trim()).unwrap_or_else(|_| panic!("a run id: {stdout:?}"))
}

/// Waits until the run is completed (filled by a worker's sweep).
pub(crate) async fn wait_completed(env: &TestEnv, run: Uuid) {
    wait::until_true(
        format!("evaluation run {run} completed"),
        RUN_COMPLETES_WITHIN,
        || async {
            let status: Option<String> =
                sqlx::query_scalar("SELECT status FROM eval_runs WHERE eval_run_id = $1")
                    .bind(run)
                    .fetch_optional(&env.pool)
                    .await
                    .expect("run status");
            status.as_deref() == Some("completed")
        },
    )
    .await;
}

/// (source, rerun, status, passed, answer_equal, actions_equal, first divergence) per item.
type ItemFacts = (
    Uuid,
    Uuid,
    String,
    Option<bool>,
    Option<bool>,
    Option<bool>,
    Option<i32>,
);

async fn items(env: &TestEnv, run: Uuid) -> Vec<ItemFacts> {
    sqlx::query_as(
        "SELECT source_task_id, rerun_task_id, status, passed, answer_equal, actions_equal, \
                first_divergence_iteration FROM eval_items WHERE eval_run_id = $1 \
         ORDER BY source_task_id",
    )
    .bind(run)
    .fetch_all(&env.pool)
    .await
    .expect("items")
}

async fn count(env: &TestEnv, query: &str) -> i64 {
    sqlx::query_scalar(query)
        .fetch_one(&env.pool)
        .await
        .expect("count")
}

/// Runs a task to its end and checks it completed.
async fn completed(env: &TestEnv, agent: Uuid, input: &str) -> Uuid {
    let task_id = env.submit(agent, input).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    task_id
}

#[tokio::test]
async fn an_eval_of_recorded_tasks_passes_and_the_gate_exits_0() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let markers = ["evalpass-a", "evalpass-b", "evalpass-c"];
    for marker in markers {
        // The source's replies only: with `--llm recorded` the reruns never ask the model.
        let replies = vec![
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply(&format!("{marker}: 42")),
        ];
        env.fake.script(marker, replies);
    }
    let mut sources = Vec::new();
    for marker in markers {
        sources.push(completed(&env, agent, marker).await);
    }
    // Another task of the agent that the condition leaves out.
    env.fake.script("evalskip", vec![answer_reply("skipped")]);
    let skipped = completed(&env, agent, "evalskip").await;

    let requests_before = env.fake.requests().len();
    assert_eq!(
        requests_before,
        2 * markers.len() + 1,
        "the sources' requests are recorded"
    );
    let condition = "input LIKE 'evalpass-%'";
    let run = eval_run(
        &env,
        agent,
        &["--where", condition, "--llm", "recorded", "--name", "ci"],
    );
    wait_completed(&env, run).await;

    let report = agentd(
        &env,
        &["eval", "report", &run.to_string(), "--min-pass", "1.0"],
    );
    let (stdout, stderr) = text(&report);
    assert_eq!(report.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("3 of 3 item(s) ended, 3 passed"),
        "{stdout}"
    );
    let items = items(&env, run).await;
    assert_eq!(items.len(), 3);
    sources.sort();
    for ((source, rerun, status, passed, answer, actions, diverged), expected) in
        items.iter().zip(&sources)
    {
        assert_eq!(source, expected);
        assert_ne!(*source, skipped);
        assert_eq!(*rerun, rerun_task_id(run, *source), "UUIDv5(run, source)");
        assert_eq!(
            (status.as_str(), *passed, *answer, *actions, *diverged),
            ("completed", Some(true), Some(true), Some(true), None)
        );
        assert!(stdout.contains(&rerun.to_string()), "one line per item");
    }
    let reruns = count(
        &env,
        "SELECT count(*) FROM tasks t JOIN eval_items i ON i.rerun_task_id = t.task_id \
         WHERE t.status = 'completed' AND t.rerun_of = i.source_task_id \
           AND t.rerun_llm = 'recorded' AND t.rerun_tools = 'recorded'",
    )
    .await;
    assert_eq!(
        reruns, 3,
        "each item's rerun is a recorded rerun of its source"
    );
    assert_eq!(
        env.fake.requests().len(),
        requests_before,
        "no request for a rerun"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_changed_version_reports_the_changed_answer_and_the_gate_exits_1() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    // Version 2 answers "evalver-2" differently; everything else the same.
    env.fake.handle("evalver-", |request| {
        let input = request.user_input();
        let changed = request.body["model"] == "model-v2" && input.contains("evalver-2");
        answer_reply(if changed {
            "a new answer"
        } else {
            "the answer"
        })
    });
    let mut sources = Vec::new();
    for marker in ["evalver-1", "evalver-2", "evalver-3"] {
        sources.push((marker, completed(&env, agent, marker).await));
    }
    let draft = Draft {
        model: Some("model-v2".into()),
        ..Draft::default()
    };
    let version = versions::publish(&env.pool, agent, &draft)
        .await
        .expect("publish");
    assert_eq!(version, 2);

    let run = eval_run(&env, agent, &["--version", "2", "--where", "true"]);
    wait_completed(&env, run).await;
    let gate = agentd(
        &env,
        &["eval", "report", &run.to_string(), "--min-pass", "1.0"],
    );
    let (stdout, stderr) = text(&gate);
    assert_eq!(gate.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("3 of 3 item(s) ended, 2 passed"),
        "{stdout}"
    );
    let lenient = agentd(
        &env,
        &["eval", "report", &run.to_string(), "--min-pass", "0.6"],
    );
    assert_eq!(lenient.status.code(), Some(0), "{:?}", text(&lenient));
    let no_gate = agentd(&env, &["eval", "report", &run.to_string()]);
    assert_eq!(no_gate.status.code(), Some(0), "{:?}", text(&no_gate));

    let changed = sources[1].1;
    for (source, rerun, status, passed, answer, actions, diverged) in items(&env, run).await {
        assert_eq!(status, "completed");
        assert_eq!(actions, Some(true), "one answer recursion each");
        if source == changed {
            assert_eq!(
                (passed, answer, diverged),
                (Some(false), Some(false), Some(1))
            );
        } else {
            assert_eq!((passed, answer, diverged), (Some(true), Some(true), None));
        }
        let ran_on: Option<i32> =
            sqlx::query_scalar("SELECT agent_version FROM tasks WHERE task_id = $1")
                .bind(rerun)
                .fetch_one(&env.pool)
                .await
                .expect("rerun row");
        assert_eq!(
            ran_on,
            Some(2),
            "the rerun ran on the version under evaluation"
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn publishing_a_run_again_reruns_nothing_twice() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "evalonce";
    env.fake
        .script(marker, vec![answer_reply("once"), answer_reply("once")]);
    // A third reply that only a second rerun would take.
    env.fake.script(marker, vec![answer_reply("twice")]);
    let source = completed(&env, agent, marker).await;

    // The model holds its replies: the run is still running, and the gate says so (2).
    env.fake.hold();
    let run = eval_run(&env, agent, &["--where", "true"]);
    let running = agentd(
        &env,
        &["eval", "report", &run.to_string(), "--min-pass", "1.0"],
    );
    assert_eq!(running.status.code(), Some(2), "{:?}", text(&running));
    // Published again while the rerun runs, then again after a worker took it.
    for _ in 0..2 {
        let again = agentd(
            &env,
            &["eval", "resume", &run.to_string(), "--rate", "100/s"],
        );
        let (stdout, stderr) = text(&again);
        assert!(again.status.success(), "{stdout}\n{stderr}");
        assert!(stderr.contains("published 1 rerun(s) again"), "{stderr}");
    }
    let rerun = rerun_task_id(run, source);
    env.wait_status(rerun, "running").await;
    env.fake.release();
    wait_completed(&env, run).await;
    let ended = agentd(&env, &["eval", "resume", &run.to_string()]);
    assert!(
        text(&ended).1.contains("published 0 rerun(s) again"),
        "{:?}",
        text(&ended)
    );

    assert_eq!(
        env.wait_terminal(rerun).await.answer.as_deref(),
        Some("once")
    );
    assert_eq!(
        env.fake.requests_for(marker).len(),
        2,
        "the source's and one rerun's"
    );
    assert_eq!(env.fake.remaining(marker), 1, "nobody took the third reply");
    let rows = count(&env, "SELECT count(*) FROM tasks WHERE input = 'evalonce'").await;
    assert_eq!(rows, 2);
    env.stop().await;
}

#[tokio::test]
async fn a_cancelled_run_sends_nothing_more_and_fails_the_gate() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "evalcancel";
    env.fake
        .script(marker, (0..3).map(|_| answer_reply("source")).collect());
    let mut sources = Vec::new();
    for _ in 0..3 {
        sources.push(completed(&env, agent, marker).await);
    }
    // The reruns ask the model, which holds its replies: a rerun sent stays in flight. One
    // rerun message every 5 s: the run is cancelled after the first.
    env.fake.hold();
    let agent_arg = agent.to_string();
    let publishing = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["eval", "run", "--agent", &agent_arg, "--where", "true"])
        .args(["--llm", "live", "--rate", "12/m"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&env.settings))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("agentd eval run");
    let published = "SELECT count(*) FROM eval_items i JOIN eval_runs r USING (eval_run_id) \
                     WHERE r.agent_id = $1 AND i.status = 'published'";
    wait::until_true(
        "the first rerun published",
        wait::NEXT_STEP_WITHIN,
        || async {
            let n: i64 = sqlx::query_scalar(published)
                .bind(agent)
                .fetch_one(&env.pool)
                .await
                .expect("published items");
            n == 1
        },
    )
    .await;
    let run: Uuid = sqlx::query_scalar("SELECT eval_run_id FROM eval_runs WHERE agent_id = $1")
        .bind(agent)
        .fetch_one(&env.pool)
        .await
        .expect("the run");
    let run_arg = run.to_string();

    let cancel = agentd(&env, &["eval", "cancel", &run_arg]);
    let (stdout, stderr) = text(&cancel);
    assert!(cancel.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("2 rerun(s) not sent, 1 in flight cancelled"),
        "{stdout}"
    );
    // The publisher stops at its next message instead of sending it.
    let output = tokio::task::spawn_blocking(move || publishing.wait_with_output())
        .await
        .expect("join")
        .expect("agentd eval run ends");
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("published 1 rerun(s); the run was cancelled"),
        "{stderr}"
    );

    // One item was sent; its rerun is the one task of the three ids, and it is cancelled.
    // The two never sent have no task at all.
    let sent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM eval_items WHERE eval_run_id = $1 AND published_at IS NOT NULL",
    )
    .bind(run)
    .fetch_one(&env.pool)
    .await
    .expect("count");
    assert_eq!(sent, 1);
    let reruns: Vec<Uuid> = items(&env, run).await.iter().map(|f| f.1).collect();
    let known: Vec<Uuid> = sqlx::query_scalar("SELECT task_id FROM tasks WHERE task_id = ANY($1)")
        .bind(&reruns)
        .fetch_all(&env.pool)
        .await
        .expect("reruns recorded");
    assert_eq!(known.len(), 1, "only the rerun sent is a task: {known:?}");
    assert_eq!(env.wait_terminal(known[0]).await.status, "cancelled");

    // The report fills the cancelled rerun's item; any gate fails, no gate is 0.
    let gate = agentd(&env, &["eval", "report", &run_arg, "--min-pass", "0"]);
    assert_eq!(gate.status.code(), Some(1), "{:?}", text(&gate));
    let report = agentd(&env, &["eval", "report", &run_arg]);
    assert_eq!(report.status.code(), Some(0), "{:?}", text(&report));
    let facts = items(&env, run).await;
    assert!(
        facts
            .iter()
            .all(|f| f.2 == "cancelled" && f.3 != Some(true)),
        "{facts:?}"
    );
    let status: String = sqlx::query_scalar("SELECT status FROM eval_runs WHERE eval_run_id = $1")
        .bind(run)
        .fetch_one(&env.pool)
        .await
        .expect("status");
    assert_eq!(
        status, "cancelled",
        "the sweep does not complete a cancelled run"
    );

    // Again, resumed, or unknown: exit 1 with the reason, nothing sent.
    for (args, says) in [
        (
            vec!["eval", "cancel", run_arg.as_str()],
            "cancelled already",
        ),
        (vec!["eval", "resume", run_arg.as_str()], "was cancelled"),
    ] {
        let output = agentd(&env, &args);
        assert_eq!(output.status.code(), Some(1), "{:?}", text(&output));
        assert!(text(&output).1.contains(says), "{:?}", text(&output));
    }
    let unknown = Uuid::now_v7().to_string();
    let output = agentd(&env, &["eval", "cancel", &unknown]);
    assert_eq!(output.status.code(), Some(1), "{:?}", text(&output));
    assert!(
        text(&output).1.contains("no evaluation run"),
        "{:?}",
        text(&output)
    );
    // The three sources asked the model; the one rerun sent may have, before its cancel.
    let asked = env.fake.requests_for(marker).len();
    assert!((3..=4).contains(&asked), "{asked} requests");
    env.fake.release();
    env.stop().await;
}

#[tokio::test]
async fn a_bad_where_exits_1_and_creates_nothing() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let other = env.agent(None, None).await;
    env.fake.script("evalwhere", vec![answer_reply("fine")]);
    env.fake.script("evalother", vec![answer_reply("fine")]);
    let own = completed(&env, agent, "evalwhere").await;
    let foreign = completed(&env, other, "evalother").await;
    let tasks_before = count(&env, "SELECT count(*) FROM tasks").await;
    let agent_arg = agent.to_string();
    for (condition, says) in [
        ("no_such_column = 1", "no_such_column"),
        ("status = 'completed' AND", "syntax error"),
        ("true; DELETE FROM tasks", "PostgreSQL refused"),
        ("nextval('tasks_recorded_seq') > 0", "read-only transaction"),
        ("false", "no ended task"),
        ("   ", "empty"),
    ] {
        let output = agentd(
            &env,
            &["eval", "run", "--agent", &agent_arg, "--where", condition],
        );
        let (stdout, stderr) = text(&output);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{condition}: {stdout}\n{stderr}"
        );
        assert!(stderr.contains(says), "{condition}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stdout.is_empty(), "no run id: {stdout}");
    }
    let unknown = Uuid::now_v7().to_string();
    let output = agentd(
        &env,
        &["eval", "run", "--agent", &unknown, "--where", "true"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output).1.contains("no agent"), "{:?}", text(&output));
    let output = agentd(&env, &["eval", "report", &unknown]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output).1.contains("no evaluation run"),
        "{:?}",
        text(&output)
    );
    assert_eq!(count(&env, "SELECT count(*) FROM eval_runs").await, 0);
    assert_eq!(count(&env, "SELECT count(*) FROM eval_items").await, 0);
    assert_eq!(
        count(&env, "SELECT count(*) FROM tasks").await,
        tasks_before
    );

    // A condition that closes its parenthesis still selects the agent's tasks only.
    env.fake.script("evalwhere", vec![answer_reply("fine")]);
    let run = eval_run(&env, agent, &["--where", "false) OR (true"]);
    let selected: Vec<Uuid> =
        sqlx::query_scalar("SELECT source_task_id FROM eval_items WHERE eval_run_id = $1")
            .bind(run)
            .fetch_all(&env.pool)
            .await
            .expect("items");
    assert_eq!(selected, vec![own]);
    assert!(!selected.contains(&foreign));
    wait_completed(&env, run).await;
    env.stop().await;
}

/// The figure (not a timed test): an evaluation run of 1,000 tasks, from `agentd
/// eval run` to the run `completed`, with the reruns' model replies from the record.
/// `cargo test --release --test features evals::a_thousand -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a benchmark: 1,000 sources and 1,000 reruns"]
async fn a_thousand_task_eval_run() {
    const TASKS: usize = 1000;
    /// Generous: the sources run first, through the same worker.
    const SOURCES_WITHIN: std::time::Duration = std::time::Duration::from_secs(600);
    let env = TestEnv::start_with(|settings| settings.worker.concurrency = 32).await;
    let agent = env.agent(None, None).await;
    env.fake
        .otherwise(|request| answer_reply(&format!("echo {}", request.user_input())));
    let started = std::time::Instant::now();
    for n in 0..TASKS {
        env.submit(agent, &format!("evalbench-{n}")).await;
    }
    wait::until_true("the sources ended", SOURCES_WITHIN, || async {
        count(
            &env,
            "SELECT count(*) FROM tasks WHERE status = 'completed'",
        )
        .await
            == TASKS as i64
    })
    .await;
    println!("{TASKS} sources: {:.1} s", started.elapsed().as_secs_f64());
    let llm = std::env::var("AGENTD_EVAL_BENCH_LLM").unwrap_or_else(|_| "recorded".into());
    let started = std::time::Instant::now();
    let agent_arg = agent.to_string();
    let output = agentd(
        &env,
        &[
            "eval", "run", "--agent", &agent_arg, "--where", "true", "--limit", "1000", "--rate",
            "100000/s", "--llm", &llm,
        ],
    );
    assert!(output.status.success(), "{:?}", text(&output));
    let run = Uuid::parse_str(text(&output).0.trim()).expect("run id");
    let published = started.elapsed();
    // What `agentd eval report` does first: fill what ended, then read the run's status.
    wait::until_true("the run completed", SOURCES_WITHIN, || async {
        agentd::store::evals::settle::settle(&env.pool, Some(run))
            .await
            .expect("settle");
        let run = agentd::store::evals::get(&env.pool, run)
            .await
            .expect("run");
        run.is_some_and(|run| run.status == "completed")
    })
    .await;
    let passed = count(&env, "SELECT count(*) FROM eval_items WHERE passed").await;
    println!(
        "eval run of {TASKS} tasks (llm {llm}): published in {:.1} s, completed in {:.1} s, {passed} passed",
        published.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(passed, TASKS as i64);
    env.stop().await;
}
