//! Mistakes about tasks: a closed pipe, steering a task that does not exist or has ended,
//! `submit --wait` (no worker, a task that ran, `--timeout`), `watch --task`, approvals.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use super::{agentd, ended_task, queued, stderr, stdout, wait_for_worker};
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use agentd::scripted_model::{answer_reply, call_tool_reply};

#[tokio::test]
async fn a_reader_that_closes_the_pipe_early_ends_the_command_quietly() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let task_id = ended_task(&env, agent, "completed").await;
    for args in [vec!["agent", "list"], vec!["trace", &task_id.to_string()]] {
        let settings = env.settings.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let shown = args.join(" ");
        let output = tokio::task::spawn_blocking(move || {
            let mut child = Command::new(env!("CARGO_BIN_EXE_agentd"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .envs(env_for(&settings))
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            // The reader goes away before the command prints (it first connects), as
            // `| head` does once it has its lines.
            drop(child.stdout.take());
            child.wait_with_output().expect("wait")
        })
        .await
        .expect("join");
        let err = stderr(&output);
        assert!(
            output.status.success() && !err.contains("panicked") && !err.contains("Broken pipe"),
            "{:?} exit {:?}: {err}",
            shown,
            output.status
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn steering_a_task_that_does_not_exist_or_has_ended_is_refused() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let ended = ended_task(&env, agent, "completed").await.to_string();
    let unknown = Uuid::now_v7().to_string();
    let commands: [&[&str]; 3] = [&["inject"], &["pause"], &["resume"]];
    for command in commands {
        for (task, says) in [
            (&unknown, "no task"),
            (&ended, "has already ended (completed)"),
        ] {
            let mut args = command.to_vec();
            args.push(task);
            if command == ["inject"] {
                args.push("some guidance");
            }
            let output = agentd(&env.settings, &args).await;
            assert_eq!(
                output.status.code(),
                Some(1),
                "{args:?}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains(says),
                "{args:?}: {}",
                stderr(&output)
            );
            assert!(
                !stdout(&output).contains("sent"),
                "{args:?}: {}",
                stdout(&output)
            );
        }
    }
    // A cancel may precede its task's message (CONTRACT §2): recorded, and said so.
    let output = agentd(&env.settings, &["cancel", &unknown]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("no task"), "{}", stderr(&output));
    let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE task_id = $1::uuid")
        .bind(&unknown)
        .fetch_one(&env.pool)
        .await
        .expect("the recorded cancel");
    assert_eq!(status, "cancelled");
    let output = agentd(&env.settings, &["cancel", &ended]).await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("already ended"),
        "{}",
        stderr(&output)
    );
    env.stop().await;
}

#[tokio::test]
async fn submit_wait_without_a_worker_says_so_and_publishes_nothing() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await.to_string();
    let output = agentd(
        &env.settings,
        &["submit", "--agent", &agent, "--wait", "hello"],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let expected = format!(
        "no worker is consuming {} on vhost /",
        env.settings.amqp.tasks_queue
    );
    assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
    let queued = queued(&env).await;
    assert_eq!(queued, 0, "nothing published");
    env.stop().await;
}

#[tokio::test]
async fn submit_to_an_agent_that_does_not_exist_is_refused_and_publishes_nothing() {
    let env = TestEnv::without_worker(|_| {}).await;
    let typo = Uuid::now_v7().to_string();
    for args in [
        &["submit", "--agent", &typo, "hello"][..],
        &["submit", "--agent", &typo, "--wait", "hello"][..],
    ] {
        let output = agentd(&env.settings, args).await;
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let expected = format!("no agent {typo}");
        assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
    }
    assert_eq!(queued(&env).await, 0, "nothing published");
    env.stop().await;
}

#[tokio::test]
async fn submit_wait_of_a_task_that_ran_prints_its_stored_outcome() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    env.fake
        .script("ran-once", vec![answer_reply("answered once")]);
    let task_id = env.submit(agent, "ran-once").await;
    env.wait_terminal(task_id).await;
    let (agent, task) = (agent.to_string(), task_id.to_string());
    let args = [
        "submit",
        "--agent",
        &agent,
        "--task-id",
        &task,
        "--wait",
        "ran-once",
    ];
    let output = agentd(&env.settings, &args).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), format!("{task_id}\nanswered once\n"));
    assert!(
        stderr(&output).contains("ended already"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        env.fake.requests_for("ran-once").len(),
        1,
        "the LLM asked once"
    );
    env.stop().await;
}

/// How late the answer comes in the `--timeout` test: `submit --wait --timeout 1s` must
/// give up well before (start-up included).
const SLOW_ANSWER: Duration = Duration::from_secs(4);

#[tokio::test]
async fn submit_wait_gives_up_at_its_timeout() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await.to_string();
    let slow = answer_reply("too late").with_delay(SLOW_ANSWER);
    env.fake.script("slow-answer", vec![slow]);
    wait_for_worker(&env).await;
    let args = [
        "submit",
        "--agent",
        &agent,
        "--wait",
        "--timeout",
        "1s",
        "slow-answer",
    ];
    let started = std::time::Instant::now();
    let output = agentd(&env.settings, &args).await;
    assert_eq!(output.status.code(), Some(124), "{}", stderr(&output));
    // `--timeout 1s` ends the wait long before the answer would come.
    assert!(started.elapsed() < SLOW_ANSWER, "{:?}", started.elapsed());
    assert!(stderr(&output).contains("--timeout"), "{}", stderr(&output));
    env.stop().await;
}

#[tokio::test]
async fn watch_task_shows_stored_events_then_live_ones_and_stops_at_the_end() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let plan = call_tool_reply(vec![("calculate", json!({"expression": "2+2"}))]);
    let pause = Duration::from_millis(1500);
    env.fake.script(
        "watched",
        vec![plan.with_delay(pause), answer_reply("4").with_delay(pause)],
    );
    let task_id = env.submit(agent, "watched").await;
    env.wait_status(task_id, "running").await;
    // Started while the task runs: the events so far come from the table, the rest live.
    let output = agentd(&env.settings, &["watch", "--task", &task_id.to_string()]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let stored = env.stored_events(task_id).await;
    let lines: Vec<String> = stdout(&output).lines().map(str::to_owned).collect();
    let shown: Vec<String> = lines
        .iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let expected: Vec<String> = stored
        .iter()
        .map(|event| format!("#{} {}", event["seq"], event["type"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        shown,
        expected,
        "every event once, in order:\n{}",
        stdout(&output)
    );
    assert_eq!(
        expected.last().map(String::as_str),
        Some(&*format!("#{} task.completed", stored.len()))
    );
    // An ended task: its stored events, and the command ends at once.
    let again = agentd(&env.settings, &["watch", "--task", &task_id.to_string()]).await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(stdout(&again), stdout(&output));
    env.stop().await;
}

#[tokio::test]
async fn trace_and_approvals_show_pending_calls_with_the_commands_to_decide_them() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    sqlx::query("UPDATE agents SET approval_tools = ARRAY['calculate'] WHERE agent_id = $1")
        .bind(agent)
        .execute(&env.pool)
        .await
        .expect("gate calculate");
    let call = call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]);
    env.fake.script("gated", vec![call, answer_reply("42")]);
    let task_id = env.submit(agent, "gated").await;
    env.wait_status(task_id, "waiting").await;
    let task = task_id.to_string();
    let approve = format!("agentd approve {task} call_1");
    let reject = format!("agentd reject {task} call_1 --reason TEXT");
    let trace = agentd(&env.settings, &["trace", &task]).await;
    assert!(trace.status.success(), "{}", stderr(&trace));
    let text = stdout(&trace);
    assert!(
        text.contains("call call_1 · calculate(") && text.contains("6*7"),
        "{text}"
    );
    assert!(text.contains(&approve) && text.contains(&reject), "{text}");
    for args in [vec!["approvals"], vec!["approvals", "--task", &task]] {
        let listed = agentd(&env.settings, &args).await;
        assert!(listed.status.success(), "{}", stderr(&listed));
        let text = stdout(&listed);
        assert!(
            text.contains(&format!("task {task}")) && text.contains(&approve),
            "{text}"
        );
        assert!(text.contains("expires"), "{text}");
    }
    let unknown = agentd(
        &env.settings,
        &["approvals", "--task", &Uuid::now_v7().to_string()],
    )
    .await;
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    env.stop().await;
}
