//! `agentd replay` (CONTRACT §10) with the real binary, worker, fake LLM, RabbitMQ and
//! PostgreSQL: it selects ended tasks by status, fail reason and age, `--dry-run` creates
//! nothing, each replay is a new task pointing at its original (`forked_from_task_id`,
//! `forked_from_iteration = 0`) that runs like any task, the rate bounds how fast they are
//! enqueued, and a task replayed once is skipped next time unless `--again`.

use std::process::{Command, Output};
use std::time::Instant;

use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use agentd::scripted_model::{ModelReply, answer_reply};
use uuid::Uuid;

fn agentd(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&env.settings))
        .output()
        .expect("agentd")
}

fn lines(output: &Output) -> Vec<String> {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// (task_id, forked_from_task_id, forked_from_iteration) of the replays, oldest first.
async fn replays(env: &TestEnv) -> Vec<(Uuid, Uuid, i32)> {
    sqlx::query_as(
        "SELECT task_id, forked_from_task_id, forked_from_iteration FROM tasks \
         WHERE forked_from_task_id IS NOT NULL ORDER BY created_at, task_id",
    )
    .fetch_all(&env.pool)
    .await
    .expect("replays")
}

#[tokio::test]
async fn failed_tasks_are_replayed_as_new_tasks_at_a_bounded_rate() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    // Three tasks fail with llm_error (a 400 is not retried), one completes; each replay
    // then gets an answer.
    let failing = ["replay-a", "replay-b", "replay-c"];
    for marker in failing {
        env.fake.script(
            marker,
            vec![
                ModelReply::status(400, "bad request"),
                answer_reply(&format!("{marker} answered")),
            ],
        );
    }
    env.fake.script("replay-ok", vec![answer_reply("fine")]);
    let mut originals = Vec::new();
    for marker in failing {
        let task_id = env.submit(agent, marker).await;
        assert_eq!(env.wait_terminal(task_id).await.status, "failed");
        originals.push(task_id);
    }
    let completed = env.submit(agent, "replay-ok").await;
    assert_eq!(env.wait_terminal(completed).await.status, "completed");

    // A reason or an age that matches nothing selects nothing.
    let none = agentd(
        &env,
        &[
            "replay",
            "--status",
            "failed",
            "--reason",
            "budget",
            "--dry-run",
        ],
    );
    assert!(lines(&none).is_empty());
    // The dry run names the failed tasks and creates nothing.
    let dry = agentd(
        &env,
        &[
            "replay",
            "--status",
            "failed",
            "--reason",
            "llm_error",
            "--since",
            "1h",
            "--dry-run",
        ],
    );
    let named: Vec<Uuid> = lines(&dry).iter().map(|l| l.parse().unwrap()).collect();
    assert_eq!(named, originals);
    assert!(replays(&env).await.is_empty());

    let started = Instant::now();
    let run = agentd(&env, &["replay", "--status", "failed", "--rate", "4/s"]);
    let took = started.elapsed();
    let printed = lines(&run);
    assert_eq!(printed.len(), 3, "{printed:?}");
    // Three at 4 per second: the third goes out half a second after the first.
    assert!(took.as_millis() >= 450, "replayed 3 in {took:?} at 4/s");
    let made = replays(&env).await;
    assert_eq!(made.len(), 3);
    for ((replay, original, iteration), expected) in made.iter().zip(&originals) {
        assert_eq!(original, expected);
        assert_eq!(*iteration, 0);
        assert!(
            printed.contains(&format!("{original} -> {replay}")),
            "{printed:?}"
        );
        let task = env.wait_terminal(*replay).await;
        assert_eq!(task.status, "completed");
        assert_eq!(task.agent_id, Some(agent));
        assert_eq!(task.forked_from_task_id, Some(*original));
        let input = env.wait_terminal(*original).await.input;
        assert_eq!(task.input, input);
    }
    // Replayed once: skipped next time, unless --again.
    let twice = agentd(&env, &["replay", "--status", "failed", "--dry-run"]);
    let again_named = lines(&twice);
    assert!(again_named.is_empty(), "{again_named:?}");
    let again = agentd(
        &env,
        &["replay", "--status", "failed", "--again", "--dry-run"],
    );
    assert_eq!(lines(&again).len(), 3);
    // Bad arguments are refused with a reason.
    let bad = agentd(&env, &["replay", "--status", "running"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--status"));
    let bad = agentd(&env, &["replay", "--status", "failed", "--rate", "fast"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--rate"));
    env.stop().await;
}
