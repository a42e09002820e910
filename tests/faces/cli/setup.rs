//! Mistakes in setting agentd up: a busy port for `agentd dev`, a database that does not
//! exist, a binary run outside the checkout, misspelled configuration keys, and broker
//! connections that must close without an error.

use std::path::Path;
use std::process::Stdio;

use uuid::Uuid;

use super::{agentd, agentd_in, stderr, stdout};
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use agentd::scripted_model::answer_reply;

#[tokio::test]
async fn dev_on_a_busy_port_fails_at_once_naming_the_port() {
    let env = TestEnv::without_worker(|_| {}).await;
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = busy.local_addr().expect("address").to_string();
    let port = addr.rsplit(':').next().unwrap_or_default().to_owned();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let extra = [("AGENTD__GATEWAY__BIND", addr.as_str())];
    let output = agentd_in(root, &env.settings, &["dev", "--latency-ms", "0"], &extra).await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(&format!("port {port} is in use")),
        "{}",
        stderr(&output)
    );
    drop(busy);
    env.stop().await;
}

#[tokio::test]
async fn only_migrate_creates_a_missing_database() {
    let env = TestEnv::without_worker(|_| {}).await;
    let mut settings = env.settings.clone();
    let name = format!(
        "agentd_test_missing_{}",
        &Uuid::new_v4().simple().to_string()[..12]
    );
    settings.database.url = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let exists = || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
        )
        .bind(&name)
        .fetch_one(&env.pool)
        .await
        .expect("pg_database")
    };
    for args in [
        vec!["agent", "list"],
        vec!["trace", &Uuid::now_v7().to_string()],
    ] {
        let output = agentd(&settings, &args).await;
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        let err = stderr(&output);
        assert!(
            err.contains("does not exist") && err.contains("agentd migrate"),
            "{err}"
        );
        assert!(!exists().await, "{args:?} created the database");
    }
    let output = agentd(&settings, &["migrate"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(exists().await);
    let drop = format!("DROP DATABASE \"{name}\" WITH (FORCE)");
    sqlx::query(&drop).execute(&env.pool).await.expect("drop");
    env.stop().await;
}

#[tokio::test]
async fn the_binary_runs_outside_the_checkout_with_its_built_in_defaults_and_prompt() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    env.fake
        .script("installed", vec![answer_reply("from anywhere")]);
    let elsewhere = crate::support::harness::scratch_dir("cli-elsewhere");
    let output = agentd_in(&elsewhere, &env.settings, &["agent", "list"], &[]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains(&agent.to_string()));
    // A worker started there reads the built-in prompt and runs a task.
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .current_dir(&elsewhere)
        .envs(env_for(&env.settings))
        .arg("worker")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("worker");
    let task_id = env.submit(agent, "installed").await;
    let row = env.wait_terminal(task_id).await;
    assert_eq!(row.answer.as_deref(), Some("from anywhere"));
    let prompt = &env.fake.requests_for("installed")[0].body["messages"][1]["content"];
    assert!(
        prompt.as_str().is_some_and(|p| p.contains("\"task_id\"")),
        "{prompt}"
    );
    let _ = worker.kill().await;
    env.stop().await;
}

#[tokio::test]
async fn misspelled_configuration_keys_are_refused_with_the_nearest_known_key() {
    let env = TestEnv::without_worker(|_| {}).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let extra = [("AGENTD__WORKER__CONCURENCY", "4")];
    let output = agentd_in(root, &env.settings, &["agent", "list"], &extra).await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("worker.concurency") && err.contains("AGENTD__WORKER__CONCURENCY"),
        "{err}"
    );
    assert!(err.contains("did you mean worker.concurrency?"), "{err}");
    let file = crate::support::harness::scratch_dir("cli-config").join("typo.toml");
    std::fs::write(
        &file,
        "[worker]\nconcurency = 4\n\n[gatway]\nbind = \"x\"\n",
    )
    .expect("write");
    let file = file.display().to_string();
    let output = agentd(&env.settings, &["--config", &file, "agent", "list"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("did you mean worker.concurrency?"), "{err}");
    assert!(err.contains("gatway: did you mean gateway?"), "{err}");
    env.stop().await;
}

#[tokio::test]
async fn commands_that_touch_the_broker_log_no_error() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await.to_string();
    let unknown = Uuid::now_v7().to_string();
    let commands: [&[&str]; 3] = [
        &["replay", "--status", "failed"],
        &["submit", "--agent", &agent, "queued"],
        &["cancel", &unknown],
    ];
    for args in commands {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = agentd_in(root, &env.settings, args, &[("RUST_LOG", "info")]).await;
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(
            !stderr(&output).contains("ERROR"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    env.stop().await;
}
