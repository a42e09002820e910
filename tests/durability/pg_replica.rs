//! A read replica for readers (issue 29 item 2, `database.read_url`): a real PostgreSQL
//! streaming replica of the machine's server, started beside it by
//! `scripts/pg-replica.sh` (own data directory under target/tmp, a free port of its own
//! or `AGENTD_REPLICA_PORT`), stopped by a Drop guard whatever the outcome.
//!
//! With the replica's WAL replay paused, a row changed on the primary only shows which
//! server a reader read: the gateway's task read, task list and agent history, `agentd
//! trace`, `agentd tasks` and `agentd replay`'s selection all show the replica's version.
//! Read-your-writes: a task submitted through the gateway while replay is paused is found
//! at once (by id, in the list, its event stream), and `agentd trace` in another process
//! finds it too; a replay made while the replica lags is not made twice. After replay
//! resumes the reads return to the replica; once it is stopped, readers read from the
//! primary (without waiting for it after the first read) and the worker never noticed;
//! started again, a probe finds it and reads return to it. It prints one JSON line of
//! figures.
//!
//! It needs root (or the postgres OS user) and PostgreSQL's binaries; without them it is
//! skipped with the reason, except under `CI=true`, where it fails.
//!
//! ```sh
//! cargo test --test durability pg_replica -- --nocapture
//! ```

mod replica;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use agentd::config::Settings;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use crate::support::wait::{self, COMMAND_WITHIN};
use agentd::scripted_model::answer_reply;
use replica::{Replica, caught_up, set_paused};

/// Once the replica is known lost, a read goes to the primary without waiting for it:
/// one query on the local server, well under this.
const READ_WITHOUT_REPLICA_WITHIN: Duration = Duration::from_millis(500);

/// What the primary holds for the first task once the test has changed it there.
const CHANGED: &str = "changed on the primary only";

/// Runs `agentd ARGS` from the checkout with the test's settings, `read_url` included.
async fn agentd(settings: &Settings, args: &[&str]) -> Output {
    let read_url = settings.database.read_url.clone().unwrap_or_default();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(settings))
        .env("AGENTD__DATABASE__READ_URL", read_url)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(COMMAND_WITHIN, command.output())
        .await
        .unwrap_or_else(|_| panic!("agentd {args:?} did not end within {COMMAND_WITHIN:?}"))
        .expect("agentd runs")
}

/// `agentd ARGS`, which must succeed: its stdout.
async fn agentd_ok(settings: &Settings, args: &[&str]) -> String {
    let output = agentd(settings, args).await;
    assert!(
        output.status.success(),
        "agentd {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The input of `task_id` in a `GET /v1/tasks` answer, if listed.
fn listed_input(list: &Value, task_id: Uuid) -> Option<String> {
    list["tasks"]
        .as_array()?
        .iter()
        .find(|task| task["task_id"] == json!(task_id))
        .and_then(|task| task["input"].as_str().map(str::to_owned))
}

/// The input `GET /v1/tasks/{id}` answers.
async fn read_input(gateway: &Gateway, task_id: Uuid) -> Value {
    gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await["task"]["input"].clone()
}

async fn set_input(pool: &PgPool, task_id: Uuid, input: &str) {
    sqlx::query("UPDATE tasks SET input = $2 WHERE task_id = $1")
        .bind(task_id)
        .bind(input)
        .execute(pool)
        .await
        .expect("update on the primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_read_the_replica_see_their_own_writes_and_survive_its_loss() {
    if let Some(reason) = replica::missing_prerequisite() {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{reason}");
        eprintln!("pg_replica skipped: {reason}");
        return;
    }
    let began = Instant::now();
    let replica = tokio::task::spawn_blocking(Replica::start)
        .await
        .expect("the replica starts");
    let replica_start = began.elapsed();
    let env =
        TestEnv::start_with(|s| s.database.read_url = Some(replica.url_for(&s.database.url))).await;
    let admin = replica.admin().await;
    let schema_replayed = caught_up(&env.pool, &admin).await;
    let read_url = env.settings.database.read_url.clone().unwrap_or_default();
    let on_replica = PgPool::connect(&read_url)
        .await
        .expect("the test database on the replica");
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&on_replica)
        .await
        .expect("pg_is_in_recovery");
    assert!(in_recovery, "read_url names a standby");
    let agent = env.agent(None, None).await;
    env.fake
        .script("first question", vec![answer_reply("first answer")]);
    let gateway = Gateway::start(&env, &[]).await;
    let first = gateway.submit(agent, "first question").await;
    env.wait_terminal(first).await;
    caught_up(&env.pool, &admin).await;

    // 1. Reads go to the replica: replay paused, a change made on the primary is not seen.
    set_paused(&admin, true).await;
    set_input(&env.pool, first, CHANGED).await;
    assert_eq!(read_input(&gateway, first).await, "first question");
    let list = gateway.get_json("/v1/tasks?limit=50", 200).await;
    assert_eq!(
        listed_input(&list, first).as_deref(),
        Some("first question")
    );
    let history = gateway
        .get_json(&format!("/v1/agents/{agent}/tasks"), 200)
        .await;
    assert_eq!(
        listed_input(&history, first).as_deref(),
        Some("first question")
    );
    let trace = agentd_ok(&env.settings, &["trace", &first.to_string()]).await;
    assert!(trace.contains("input     first question"), "{trace}");
    let tasks = agentd_ok(&env.settings, &["tasks", "--json"]).await;
    assert!(
        tasks.contains("first question") && !tasks.contains(CHANGED),
        "{tasks}"
    );

    // 2. Read-your-writes while the replica lags: a task submitted now is found at once.
    env.fake
        .script("second question", vec![answer_reply("second answer")]);
    let second = gateway.submit(agent, "second question").await;
    let missing: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE task_id = $1")
        .bind(second)
        .fetch_one(&on_replica)
        .await
        .expect("the replica's tasks");
    assert_eq!(missing, 0, "the paused replica does not have the new task");
    let detail = gateway.get_json(&format!("/v1/tasks/{second}"), 200).await;
    assert_eq!(detail["task"]["input"], "second question");
    let list = gateway.get_json("/v1/tasks?limit=50", 200).await;
    assert_eq!(
        listed_input(&list, second).as_deref(),
        Some("second question")
    );
    // This gateway wrote past the replica, so its reads now go to the primary.
    assert_eq!(read_input(&gateway, first).await, CHANGED);
    let mut events = gateway.events(second, None).await;
    let mut seqs = Vec::new();
    while let Some(event) = tokio::time::timeout(wait::TASK_ENDS_WITHIN, events.next())
        .await
        .expect("the event stream moves")
    {
        seqs.push(event.seq());
        if event.is_terminal() {
            assert_eq!(event.event.as_deref(), Some("task.completed"));
            break;
        }
    }
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "gapless");
    env.wait_terminal(second).await;
    // Another process, which wrote nothing: a task the replica lacks comes from the primary.
    let trace = agentd_ok(&env.settings, &["trace", &second.to_string()]).await;
    assert!(trace.contains("second answer"), "{trace}");

    // 3. Replay selects on the replica (which has the first task ended but not the second)
    //    and checks on the primary before it creates anything.
    let dry = agentd_ok(
        &env.settings,
        &["replay", "--status", "completed", "--dry-run"],
    )
    .await;
    assert!(dry.contains(&first.to_string()), "{dry}");
    assert!(!dry.contains(&second.to_string()), "{dry}");
    env.fake
        .script("first question", vec![answer_reply("first answer again")]);
    let replay = ["replay", "--status", "completed", "--rate", "50/s"];
    let replayed = agentd_ok(&env.settings, &replay).await;
    assert!(replayed.contains(&format!("{first} -> ")), "{replayed}");
    let again = agentd_ok(&env.settings, &replay).await;
    assert!(
        !again.contains(&format!("{first} -> ")),
        "replayed twice: {again}"
    );
    let replays: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE forked_from_task_id = $1 AND forked_from_iteration = 0",
    )
    .bind(first)
    .fetch_one(&env.pool)
    .await
    .expect("replays");
    assert_eq!(replays, 1);

    // 4. Replay resumed and caught up: reads are the replica's again.
    set_paused(&admin, false).await;
    let lag_replayed = caught_up(&env.pool, &admin).await;
    set_paused(&admin, true).await;
    set_input(&env.pool, first, "changed twice").await;
    assert_eq!(
        read_input(&gateway, first).await,
        CHANGED,
        "from the replica"
    );
    set_paused(&admin, false).await;

    // 5. The replica goes away: readers read from the primary; the worker never used it.
    on_replica.close().await;
    admin.close().await;
    replica.stop();
    let cut = Instant::now();
    assert_eq!(read_input(&gateway, first).await, "changed twice");
    let first_read_after_loss = cut.elapsed();
    let cut = Instant::now();
    assert_eq!(read_input(&gateway, first).await, "changed twice");
    let next_read_after_loss = cut.elapsed();
    assert!(
        next_read_after_loss < READ_WITHOUT_REPLICA_WITHIN,
        "reads after the loss wait for no replica: {next_read_after_loss:?}"
    );
    let list = gateway.get_json("/v1/tasks?limit=50", 200).await;
    assert!(listed_input(&list, second).is_some());
    let trace = agentd_ok(&env.settings, &["trace", &first.to_string()]).await;
    assert!(trace.contains("changed twice"), "{trace}");
    agentd_ok(&env.settings, &["tasks"]).await;
    env.fake
        .script("third question", vec![answer_reply("third answer")]);
    let third = gateway.submit(agent, "third question").await;
    assert_eq!(env.wait_terminal(third).await.status, "completed");

    // 6. The replica comes back (a new base backup, the same port): a probe finds it and
    //    reads return to it.
    let back = Instant::now();
    replica.start_again();
    let admin = replica.admin().await;
    caught_up(&env.pool, &admin).await;
    set_paused(&admin, true).await;
    set_input(&env.pool, first, "changed three times").await;
    // The gateway probes a lost replica now and then: reads return at its next probe.
    wait::until_true(
        "reads returned to the replica",
        wait::NEXT_STEP_WITHIN,
        || async { read_input(&gateway, first).await == "changed twice" },
    )
    .await;
    let reads_back = back.elapsed();
    set_paused(&admin, false).await;
    admin.close().await;

    println!(
        "{}",
        json!({
            "replica_start_s": replica_start.as_secs_f64(),
            "schema_replayed_ms": schema_replayed.as_millis(),
            "lag_replayed_after_resume_ms": lag_replayed.as_millis(),
            "first_read_after_replica_loss_ms": first_read_after_loss.as_millis(),
            "next_read_after_replica_loss_ms": next_read_after_loss.as_millis(),
            "replica_restarted_to_reads_back_s": reads_back.as_secs_f64(),
            "whole_test_s": began.elapsed().as_secs_f64(),
        })
    );
    gateway.stop().await;
    env.stop().await;
}

/// Without the replica script: a read_url that is not a URL is refused with its name, and
/// one where nothing listens makes readers read from the primary.
#[tokio::test]
async fn a_wrong_read_url_is_refused_and_an_unreachable_one_falls_back() {
    let mut env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let task_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, answer, finished_at) \
         VALUES ($1, $2, 'stored before', 'completed', 'the stored answer', now())",
    )
    .bind(task_id)
    .bind(agent)
    .execute(&env.pool)
    .await
    .expect("an ended task");

    env.settings.database.read_url = Some("not a url".to_owned());
    let output = agentd(&env.settings, &["trace", &task_id.to_string()]).await;
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("database.read_url"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A closed port: connection refused at once.
    env.settings.database.read_url = Some("postgres://postgres@127.0.0.1:1/agentd".to_owned());
    let trace = agentd_ok(&env.settings, &["trace", &task_id.to_string()]).await;
    assert!(trace.contains("the stored answer"), "{trace}");
    let tasks = agentd_ok(&env.settings, &["tasks", "--json"]).await;
    assert!(tasks.contains(&task_id.to_string()), "{tasks}");
    let gateway = Gateway::start_with(env.settings.clone(), &[]).await;
    for _ in 0..3 {
        assert_eq!(read_input(&gateway, task_id).await, "stored before");
    }
    let list = gateway.get_json("/v1/tasks", 200).await;
    assert!(listed_input(&list, task_id).is_some());
    let overview = (gateway.get_json(&format!("/v1/agents/{agent}/overview"), 200)).await;
    assert_eq!(overview["tasks"], 1);
    let events = gateway.get(&format!("/v1/tasks/{task_id}/events")).send();
    let events = events.await.expect("the event stream answers");
    assert_eq!(events.status(), 204, "an ended task without events");
    let unknown = gateway.get(&format!("/v1/tasks/{}/events", Uuid::now_v7()));
    assert_eq!(unknown.send().await.expect("answers").status(), 404);
    gateway.stop().await;
    env.stop().await;
}
