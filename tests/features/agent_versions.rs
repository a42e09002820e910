//! Agents' instructions, versions and channels (CONTRACT v3 §11) with the real worker, the
//! fake LLM over HTTP, RabbitMQ and PostgreSQL: the instructions are in the system message
//! once and a version's params in every request; a task waiting for approval while a new
//! version is promoted resumes on its own version, also after its worker is killed (-9);
//! the canary takes the tasks the chooser says, and a named version or channel wins; an
//! unknown one rejects the task; the CLI and the gateway routes; Unicode with NUL stored.

use std::process::{Command, Output};

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::{WorkerProcess, env_for};
use agentd::core::versions::{Requested, choose};
use agentd::scripted_model::{answer_reply, call_tool_reply};
use agentd::store::versions::{self, Draft};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// An agent made the v1 way, in one plain INSERT (so it has exactly version 1).
async fn agent(env: &TestEnv, model: &str, instructions: Option<&str>, gated: bool) -> Uuid {
    let agent_id = Uuid::now_v7();
    let gate: Option<Vec<String>> = gated.then(|| vec!["calculate".to_owned()]);
    sqlx::query(
        "INSERT INTO agents (agent_id, name, model, instructions, approval_tools) \
         VALUES ($1, 'versioned', $2, $3, $4)",
    )
    .bind(agent_id)
    .bind(model)
    .bind(instructions)
    .bind(gate)
    .execute(&env.pool)
    .await
    .expect("insert agent");
    agent_id
}

fn draft(model: &str, instructions: &str, params: Value) -> Draft {
    Draft {
        model: Some(model.into()),
        instructions: Some(instructions.into()),
        params: params.as_object().cloned().unwrap_or_default(),
        ..Draft::default()
    }
}

async fn pinned(env: &TestEnv, task_id: Uuid) -> Option<i32> {
    sqlx::query_scalar("SELECT agent_version FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("task row")
}

async fn publish_json(env: &TestEnv, body: Value) -> Uuid {
    let task_id = Uuid::now_v7();
    let mut body = body;
    body["task_id"] = json!(task_id);
    env.publish_raw(body.to_string().as_bytes()).await;
    task_id
}

fn started_data(events: &[Value]) -> Value {
    events
        .iter()
        .find(|e| e["type"] == "task.started")
        .map(|e| e["data"].clone())
        .expect("task.started")
}

#[tokio::test]
async fn instructions_are_in_the_system_message_once_and_params_in_every_request() {
    let env = TestEnv::start().await;
    let brief = "You are Ada, a careful accountant.\nAnswer in French; sign \"Ada\" ✓.";
    let agent_id = agent(&env, "fake-model", Some("old brief"), false).await;
    let version = versions::publish(
        &env.pool,
        agent_id,
        &draft(
            "model-v2",
            brief,
            json!({"temperature": 0.25, "seed": 7, "max_tokens": 300}),
        ),
    )
    .await
    .expect("publish");
    assert_eq!(version, 2);
    versions::set_channel(&env.pool, agent_id, "stable", 2, None)
        .await
        .expect("promote");
    let marker = "instructions-once";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]),
            answer_reply("42"),
        ],
    );
    let task_id = env.submit(agent_id, marker).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.agent_version, Some(2));
    assert_eq!(
        started_data(&env.stored_events(task_id).await)["agent_version"],
        2
    );
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let messages = request.messages();
        let roles: Vec<&str> = messages.iter().map(|(role, _)| role.as_str()).collect();
        assert_eq!(roles[..2], ["user", "system"]);
        assert!(roles[2..].iter().all(|r| *r == "assistant"), "{roles:?}");
        assert_eq!(messages[0].1, marker, "the user's input verbatim");
        let system = &messages[1].1;
        assert_eq!(system.matches(brief).count(), 1, "once, verbatim");
        assert!(!system.contains("old brief"));
        let (brief_at, state_at) = (
            system.find(brief).unwrap(),
            system.rfind("\"global\"").unwrap(),
        );
        assert!(brief_at < state_at, "in front of the state snapshot");
        assert!(messages[2..].iter().all(|(_, text)| !text.contains(brief)));
        assert_eq!(request.body["model"], "model-v2");
        assert_eq!(request.body["temperature"], json!(0.25));
        assert_eq!(request.body["seed"], json!(7));
        assert_eq!(request.body["max_tokens"], json!(300));
    }
    env.stop().await;
}

/// CONTRACT §11's acceptance: a task waiting for approval while a new version is promoted
/// resumes on its own version, also when its worker was killed with SIGKILL meanwhile; a
/// task started after the promote runs on the new one.
#[tokio::test]
async fn a_task_waiting_for_approval_resumes_on_its_own_version_after_a_promote_and_a_kill() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent_id = agent(&env, "model-v1", Some("BRIEF-V1"), true).await;
    let marker = "pinned-approval";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![("calculate", json!({"expression": "5*5"}))]),
            answer_reply("25"),
        ],
    );
    let mut worker = WorkerProcess::spawn(&env.settings, &[]);
    let task_id = env.submit(agent_id, marker).await;
    env.wait_status(task_id, "waiting").await;
    assert_eq!(pinned(&env, task_id).await, Some(1));
    worker.kill();

    // Version 2 changes the model and the instructions, and drops the gate; promoted.
    let v2 = Draft {
        approval_tools: Some(Vec::new()),
        ..draft("model-v2", "BRIEF-V2", json!({"temperature": 0.9}))
    };
    assert_eq!(
        versions::publish(&env.pool, agent_id, &v2)
            .await
            .expect("publish"),
        2
    );
    versions::set_channel(&env.pool, agent_id, "stable", 2, None)
        .await
        .expect("promote");
    let mirrored: (String, Option<String>) =
        sqlx::query_as("SELECT model, instructions FROM agents WHERE agent_id = $1")
            .bind(agent_id)
            .fetch_one(&env.pool)
            .await
            .expect("agents row");
    assert_eq!(mirrored, ("model-v2".into(), Some("BRIEF-V2".into())));

    let approved = cli(
        &env,
        &["approve", &task_id.to_string(), "call_1", "--by", "ops"],
    );
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    let _second = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(task_id).await;
    assert_eq!(
        (task.status.as_str(), task.answer.as_deref()),
        ("completed", Some("25"))
    );
    assert_eq!(task.agent_version, Some(1));
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.body["model"], "model-v1");
        assert!(request.body.get("temperature").is_none());
        let system = &request.messages()[1].1;
        assert!(system.contains("BRIEF-V1") && !system.contains("BRIEF-V2"));
    }
    let stored = env.stored_events(task_id).await;
    assert!(stored.iter().any(|e| e["type"] == "task.resumed"));
    assert_eq!(started_data(&stored)["agent_version"], 1);
    assert_eq!(started_data(&stored)["model"], "model-v1");

    // A new task starts on the promoted version: ungated, model-v2.
    let fresh = "pinned-after-promote";
    env.fake.script(
        fresh,
        vec![
            call_tool_reply(vec![("calculate", json!({"expression": "1+1"}))]),
            answer_reply("2"),
        ],
    );
    let later = env.submit(agent_id, fresh).await;
    let task = env.wait_terminal(later).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.agent_version, Some(2));
    let request = &env.fake.requests_for(fresh)[0];
    assert_eq!(request.body["model"], "model-v2");
    assert!(request.messages()[1].1.contains("BRIEF-V2"));
    env.stop().await;
}

/// The canary over a real batch: every task runs on the version the pure chooser names for
/// its id (so the share is the chooser's, checked over 500 ids in `core::versions`); a named
/// version or channel wins over the weight; an unknown one rejects the task with a reason.
#[tokio::test]
async fn the_canary_takes_the_tasks_the_chooser_names_and_names_win() {
    let env = TestEnv::start().await;
    let agent_id = agent(&env, "model-v1", None, false).await;
    versions::publish(
        &env.pool,
        agent_id,
        &draft("model-v2", "canary brief", json!({})),
    )
    .await
    .expect("publish");
    versions::set_channel(&env.pool, agent_id, "canary", 2, Some(30))
        .await
        .expect("canary");
    let channels = [
        agentd::core::versions::Channel {
            name: "stable".into(),
            version: 1,
            weight: 100,
        },
        agentd::core::versions::Channel {
            name: "canary".into(),
            version: 2,
            weight: 30,
        },
    ];
    let batch = 60;
    let marker = "canary-batch";
    env.fake
        .script(marker, (0..batch).map(|_| answer_reply("ok")).collect());
    let mut ids = Vec::new();
    for _ in 0..batch {
        ids.push(env.submit(agent_id, marker).await);
    }
    let mut canary = 0;
    for task_id in &ids {
        let task = env.wait_terminal(*task_id).await;
        assert_eq!(task.status, "completed");
        let expected = choose(agent_id, *task_id, &Requested::Default, &channels, &[1, 2]);
        assert_eq!(task.agent_version, expected.ok(), "task {task_id}");
        canary += usize::from(task.agent_version == Some(2));
    }
    let v2_requests = (env.fake.requests_for(marker).iter())
        .filter(|r| r.body["model"] == "model-v2")
        .count();
    assert_eq!(v2_requests, canary);
    assert!(
        (5..=30).contains(&canary),
        "{canary} of {batch} on the canary"
    );

    // Names win over the weight.
    env.fake
        .script("named", vec![answer_reply("a"), answer_reply("b")]);
    let by_version = publish_json(
        &env,
        json!({"agent_id": agent_id, "input": "named v1", "agent_version": 1}),
    )
    .await;
    let by_channel = publish_json(
        &env,
        json!({"agent_id": agent_id, "input": "named canary", "channel": "canary"}),
    )
    .await;
    assert_eq!(env.wait_terminal(by_version).await.agent_version, Some(1));
    assert_eq!(env.wait_terminal(by_channel).await.agent_version, Some(2));

    // Unknown ones are rejected like an unknown agent, with the reason in tasks.error.
    for (field, value, reason) in [
        (
            "agent_version",
            json!(9),
            format!("agent {agent_id} has no version 9"),
        ),
        (
            "channel",
            json!("beta"),
            format!("agent {agent_id} has no channel beta"),
        ),
    ] {
        let mut body = json!({"agent_id": agent_id, "input": "unknown version"});
        body[field] = value;
        let task_id = publish_json(&env, body).await;
        let task = env.wait_terminal(task_id).await;
        assert_eq!(task.status, "rejected");
        assert_eq!(task.error.as_deref(), Some(reason.as_str()));
        let (_, header) = env.dead_letter().await.expect("dead-lettered");
        assert_eq!(header.as_deref(), Some(reason.as_str()));
    }
    // Weight 0 ends the canary: everything is stable again.
    versions::set_channel(&env.pool, agent_id, "canary", 2, Some(0))
        .await
        .expect("end canary");
    env.fake.script(
        "after-canary",
        (0..10).map(|_| answer_reply("ok")).collect(),
    );
    let mut after = Vec::new();
    for _ in 0..10 {
        after.push(env.submit(agent_id, "after-canary").await);
    }
    for task_id in after {
        assert_eq!(env.wait_terminal(task_id).await.agent_version, Some(1));
    }
    env.stop().await;
}

fn cli(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&env.settings))
        .output()
        .expect("agentd")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn refused(output: &Output, needle: &str) {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(needle), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn the_cli_publishes_promotes_canaries_rolls_back_and_diffs() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent_id = agent(&env, "model-v1", Some("Line one.\nLine two."), false).await;
    let agent = agent_id.to_string();
    let brief = agentd_scratch("brief.md", "Line one.\nLine 2, changed.\n");
    let published = cli(
        &env,
        &[
            "agent",
            "publish",
            &agent,
            "--instructions-file",
            &brief,
            "--model",
            "model-v2",
            "--param",
            "temperature=0.2",
            "--param",
            "stop=[\"END\"]",
            "--param",
            "user=ada",
            "--note",
            "french",
        ],
    );
    assert_eq!(stdout(&published).trim(), "2");
    let row = versions::get(&env.pool, agent_id, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.instructions.as_deref(),
        Some("Line one.\nLine 2, changed.\n")
    );
    assert_eq!(
        row.params.0,
        json!({"temperature": 0.2, "stop": ["END"], "user": "ada"})
    );
    assert_eq!(row.max_iteration, 30, "copied from the latest");
    // Not live until promoted.
    let model: String = sqlx::query_scalar("SELECT model FROM agents WHERE agent_id = $1")
        .bind(agent_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(model, "model-v1");
    // Fields not given are copied from the latest version (2), params merged.
    let third = cli(
        &env,
        &[
            "agent",
            "publish",
            &agent,
            "--param",
            "temperature=null",
            "--max-iteration",
            "5",
        ],
    );
    assert_eq!(stdout(&third).trim(), "3");
    let row = versions::get(&env.pool, agent_id, 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.model.as_str(), row.max_iteration), ("model-v2", 5));
    assert_eq!(row.params.0, json!({"stop": ["END"], "user": "ada"}));

    assert!(stdout(&cli(&env, &["agent", "promote", &agent, "2"])).contains("stable = version 2"));
    assert!(
        stdout(&cli(
            &env,
            &["agent", "canary", "versioned", "3", "--weight", "20"]
        ))
        .contains("20 %")
    );
    let listed = stdout(&cli(&env, &["agent", "versions", &agent]));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 4, "{listed}");
    assert!(
        lines[2].contains("stable") && lines[2].contains("french"),
        "{listed}"
    );
    assert!(lines[3].contains("canary 20 %"), "{listed}");
    let model: String = sqlx::query_scalar("SELECT model FROM agents WHERE agent_id = $1")
        .bind(agent_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(model, "model-v2", "agents mirrors stable");

    assert!(stdout(&cli(&env, &["agent", "rollback", &agent])).contains("stable = version 1"));
    let mirrored: (String, Option<String>) =
        sqlx::query_as("SELECT model, instructions FROM agents WHERE agent_id = $1")
            .bind(agent_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        mirrored,
        ("model-v1".into(), Some("Line one.\nLine two.".into()))
    );

    let diff = stdout(&cli(&env, &["agent", "diff", &agent, "1", "2"]));
    assert!(
        diff.contains("instructions:\n  - Line two.\n  + Line 2, changed."),
        "{diff}"
    );
    assert!(
        diff.contains("model: \"model-v1\" -> \"model-v2\""),
        "{diff}"
    );
    assert!(diff.contains("params: {} -> "), "{diff}");

    // Mistakes: a clear message and exit 1, never a panic.
    let typo = Uuid::now_v7().to_string();
    refused(&cli(&env, &["agent", "versions", &typo]), "no agent");
    refused(
        &cli(&env, &["agent", "versions", "nobody-by-this-name"]),
        "no agent named",
    );
    refused(
        &cli(&env, &["agent", "promote", &agent, "9"]),
        "has no version 9",
    );
    refused(
        &cli(&env, &["agent", "diff", &agent, "1", "9"]),
        "has no version 9",
    );
    refused(
        &cli(
            &env,
            &[
                "agent",
                "publish",
                &agent,
                "--instructions-file",
                "/nonexistent/brief",
            ],
        ),
        "reading /nonexistent/brief",
    );
    let fresh = agent_id_of(&env, "fresh").await;
    refused(
        &cli(&env, &["agent", "rollback", &fresh.to_string()]),
        "nothing to roll back to",
    );
    let bad_weight = cli(&env, &["agent", "canary", &agent, "2", "--weight", "101"]);
    assert_eq!(bad_weight.status.code(), Some(2));
    let mut down = env.settings.clone();
    down.database.url = "postgres://postgres@127.0.0.1:1/agentd".into();
    let offline = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["agent", "versions", &agent])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env_for(&down))
        .output()
        .expect("agentd");
    assert!(!offline.status.success());
    assert!(!String::from_utf8_lossy(&offline.stderr).contains("panicked"));
    env.stop().await;
}

fn agentd_scratch(name: &str, text: &str) -> String {
    let dir = crate::support::harness::scratch_dir("agent-versions");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write scratch file");
    path.display().to_string()
}

async fn agent_id_of(env: &TestEnv, name: &str) -> Uuid {
    let agent_id = Uuid::now_v7();
    sqlx::query("INSERT INTO agents (agent_id, name, model) VALUES ($1, $2, 'm')")
        .bind(agent_id)
        .bind(name)
        .execute(&env.pool)
        .await
        .expect("insert");
    agent_id
}

#[tokio::test]
async fn the_gateway_publishes_lists_and_moves_channels_and_tasks_name_versions() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &["t0ken"]).await;
    let agent_id = agent(&env, "model-v1", None, false).await;
    let base = format!("/v1/agents/{agent_id}");
    let published = gateway
        .post_json(
            &format!("{base}/versions"),
            &json!({"instructions": "GW brief", "params": {"top_p": 0.5}}),
            201,
        )
        .await;
    assert_eq!(published, json!({"version": 2}));
    let listed = gateway.get_json(&format!("{base}/versions"), 200).await;
    assert_eq!(listed["versions"].as_array().map(Vec::len), Some(2));
    assert_eq!(listed["versions"][1]["params"], json!({"top_p": 0.5}));
    assert_eq!(listed["channels"][0]["channel"], "stable");
    let moved = gateway
        .put_json(
            &format!("{base}/channels/stable"),
            &json!({"version": 2}),
            200,
        )
        .await;
    assert_eq!(
        (moved["version"].clone(), moved["previous_version"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(gateway.get_json(&base, 200).await["version"], 2);
    gateway
        .put_json(
            &format!("{base}/channels/stable"),
            &json!({"version": 7}),
            404,
        )
        .await;
    gateway
        .put_json(
            &format!("{base}/channels/canary"),
            &json!({"version": 1, "weight": 101}),
            422,
        )
        .await;
    gateway
        .post_json(
            &format!("{base}/versions"),
            &json!({"max_iteration": 0}),
            422,
        )
        .await;
    gateway
        .post_json(&format!("{base}/versions"), &json!({"colour": "red"}), 422)
        .await;
    let nobody = format!("/v1/agents/{}", Uuid::now_v7());
    gateway
        .post_json(&format!("{nobody}/versions"), &json!({}), 404)
        .await;
    gateway.get_json(&format!("{nobody}/versions"), 404).await;

    // POST /v1/tasks names a version; an unknown one is refused before anything is sent.
    env.fake.script("gw-named", vec![answer_reply("one")]);
    let accepted = gateway
        .post_json(
            "/v1/tasks",
            &json!({"agent_id": agent_id, "input": "gw-named", "agent_version": 1}),
            202,
        )
        .await;
    let task_id: Uuid = accepted["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.wait_terminal(task_id).await.agent_version, Some(1));
    let detail = gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await;
    assert_eq!(detail["task"]["agent_version"], 1);
    gateway
        .post_json(
            "/v1/tasks",
            &json!({"agent_id": agent_id, "input": "x", "agent_version": 5}),
            404,
        )
        .await;
    gateway
        .post_json(
            "/v1/tasks",
            &json!({"agent_id": agent_id, "input": "x", "channel": "beta"}),
            404,
        )
        .await;

    // A fork keeps the original's version although stable moved on; or runs on the one named.
    env.fake.script(
        "gw-named",
        vec![answer_reply("forked"), answer_reply("forked v2")],
    );
    let fork = gateway
        .post_json(
            &format!("/v1/tasks/{task_id}/fork"),
            &json!({"from_iteration": 1}),
            202,
        )
        .await;
    let fork_id: Uuid = fork["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.wait_terminal(fork_id).await.agent_version, Some(1));
    let fork = gateway
        .post_json(
            &format!("/v1/tasks/{task_id}/fork"),
            &json!({"from_iteration": 1, "agent_version": 2}),
            202,
        )
        .await;
    let fork_id: Uuid = fork["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.wait_terminal(fork_id).await.agent_version, Some(2));
    gateway.stop().await;
    env.stop().await;
}

/// What a person types into a version (instructions, note, params, a channel name) may
/// hold any Unicode, NUL included: it is stored (NUL as U+FFFD) and reads back so.
#[test]
fn any_unicode_in_a_version_is_stored() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let env = runtime.block_on(TestEnv::without_worker(|_| {}));
    let agent_id = runtime.block_on(agent(&env, "m", None, false));
    let text = proptest::collection::vec(
        prop_oneof![
            Just("\u{0}".to_owned()),
            Just("\\u0000".to_owned()),
            any::<char>().prop_map(String::from),
            "[a-z ]{0,6}"
        ],
        0..12,
    )
    .prop_map(|pieces| pieces.concat());
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let result = runner.run(
        &(text.clone(), text.clone(), text),
        |(instructions, note, value)| {
            runtime.block_on(async {
                // As the gateway and the CLI hand it over: made storable at the door.
                let storable = |t: &str| agentd::core::storable::owned(t.to_owned());
                let mut params = Map::new();
                params.insert(
                    storable(&value),
                    agentd::core::storable::json_owned(json!(value)),
                );
                let draft = Draft {
                    instructions: Some(storable(&instructions)),
                    note: Some(storable(&note)),
                    params,
                    ..Draft::default()
                };
                let version = versions::publish(&env.pool, agent_id, &draft)
                    .await
                    .expect("publish");
                let row = versions::get(&env.pool, agent_id, version)
                    .await
                    .unwrap()
                    .unwrap();
                prop_assert_eq!(row.instructions, Some(storable(&instructions)));
                prop_assert_eq!(row.note, Some(storable(&note)));
                let channel = format!("c{}", storable(&note).chars().take(40).collect::<String>());
                let moved =
                    versions::set_channel(&env.pool, agent_id, &channel, version, Some(0)).await;
                prop_assert!(moved.is_ok(), "{:?}", moved.err());
                Ok(())
            })
        },
    );
    runtime.block_on(env.stop());
    result.expect("every version stored");
}
