//! The command line answers a person's mistakes (issue 24 §4): the real `agentd` binary as a
//! child process against the local PostgreSQL and RabbitMQ (a namespace per test) and the
//! scripted fake LLM. Each mistake gets a clear message and an exit code, never a panic, a
//! hang or a silent side effect: a reader that closes the pipe early, steering a task that
//! does not exist or has ended, `submit --wait` with no worker or a task that already ran or
//! a `--timeout`, `watch --task` of stored then live events, `agentd dev` on a busy port, a
//! database that does not exist, a binary run outside the checkout, misspelled configuration
//! keys, pending approvals in `trace` and `agentd approvals`, a replay with nothing to
//! replay logging no error, and `agentd resolve` of a held call with its mistakes.

mod resolve;
mod setup;
mod tasks;

use std::path::Path;
use std::process::{Output, Stdio};

use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use crate::support::wait::{self, COMMAND_WITHIN, WORKER_READY_WITHIN};
use agentd::config::Settings;
use uuid::Uuid;

/// Runs `agentd ARGS` in `dir` with the test's settings (and `extra` variables); its output.
pub(crate) async fn agentd_in(
    dir: &Path,
    settings: &Settings,
    args: &[&str],
    extra: &[(&str, &str)],
) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .current_dir(dir)
        .envs(env_for(settings))
        .envs(extra.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(COMMAND_WITHIN, command.output())
        .await
        .unwrap_or_else(|_| panic!("agentd {args:?} did not end within {COMMAND_WITHIN:?}"))
        .expect("agentd runs")
}

/// Runs `agentd ARGS` from the checkout.
pub(crate) async fn agentd(settings: &Settings, args: &[&str]) -> Output {
    agentd_in(Path::new(env!("CARGO_MANIFEST_DIR")), settings, args, &[]).await
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Inserts an ended task with an answer (no worker needed).
pub(crate) async fn ended_task(env: &TestEnv, agent: Uuid, status: &str) -> Uuid {
    let task_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, answer, finished_at) \
         VALUES ($1, $2, 'done already', $3, 'the stored answer', now())",
    )
    .bind(task_id)
    .bind(agent)
    .bind(status)
    .execute(&env.pool)
    .await
    .expect("insert an ended task");
    task_id
}

/// Messages waiting in the test's tasks queue (a passive declare).
pub(crate) async fn queued(env: &TestEnv) -> u32 {
    use lapin::options::QueueDeclareOptions;
    let channel = env.publisher.broker().channel().await.expect("channel");
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let queue = env.settings.amqp.tasks_queue.as_str();
    let state = channel
        .queue_declare(queue.into(), passive, lapin::types::FieldTable::default())
        .await
        .expect("the tasks queue");
    let _ = channel.close(200, "checked".into()).await;
    state.message_count()
}

/// Waits until the in-process worker consumes the tasks queue (it starts in the background).
pub(crate) async fn wait_for_worker(env: &TestEnv) {
    let broker = env.publisher.broker();
    let queue = &env.settings.amqp.tasks_queue;
    let what = format!("a worker consumes {queue}");
    wait::until_true(what, WORKER_READY_WITHIN, || async {
        let consumers = agentd::amqp::topology::consumer_count(broker, queue).await;
        consumers.expect("the tasks queue") > 0
    })
    .await;
}
