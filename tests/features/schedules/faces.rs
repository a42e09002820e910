//! `/v1/schedules` and `agentd schedule`: what people get for a good request and for each
//! mistake (a 400 naming the field, a 404 for an unknown agent or schedule; the CLI's exit
//! code 2 for a wrong flag, 1 for an unknown id), answers as the OpenAPI document says,
//! pause and resume moving the next fire, a trigger's task, and a delete that keeps the
//! fires and tasks.

use std::path::Path;
use std::process::Output;

use crate::support::gateway::{Gateway, expect_json};
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use agentd::core::schedule::fire_task_id;
use chrono::{DateTime, Utc};
use jsonschema::{Draft, Registry};
use serde_json::{Value, json};
use uuid::Uuid;

use super::tasks;

const DOC: &str = "urn:agentd:openapi";

/// Panics unless `value` validates against `#/components/schemas/{schema}` of `doc`.
pub(crate) fn assert_documented(doc: &Value, schema: &str, value: &Value) {
    let registry = Registry::new()
        .add(DOC, Draft::Draft202012.create_resource(doc.clone()))
        .and_then(|registry| registry.prepare())
        .expect("a registry holding the document");
    let validator = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_registry(&registry)
        .build(&json!({"$ref": format!("{DOC}#/components/schemas/{schema}")}))
        .expect("a validator");
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|error| format!("at {}: {error}", error.instance_path()))
        .collect();
    assert!(problems.is_empty(), "{schema}: {problems:#?}\n{value:#}");
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|at| at.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

async fn send(request: reqwest::RequestBuilder, status: u16) -> Value {
    expect_json(request.send().await, status).await
}

#[tokio::test]
async fn the_gateway_creates_changes_triggers_and_deletes_schedules() {
    let env = TestEnv::without_worker(|_| {}).await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let doc = gateway.get_json("/openapi.json", 200).await;
    let body = json!({
        "agent_id": agent, "name": "nightly", "cron": "30 2 * * *",
        "timezone": "Europe/Berlin", "input": "the nightly report",
        "task_template": {"constraints": ["be brief"], "budget": {"max_tokens": 5000}},
        "max_fires_per_day": 3
    });
    let created = gateway.post_json("/v1/schedules", &body, 201).await;
    assert_documented(&doc, "ScheduleView", &created);
    let id: Uuid = created["schedule_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(created["overlap"], "skip");
    assert_eq!(created["catch_up"], "latest");
    assert_eq!(created["catch_up_window_secs"], 3600);
    let next = time(&created["next_fire_at"]);
    assert!(next > Utc::now(), "{created:#}");
    // 02:30 in Berlin is 00:30 or 01:30 UTC.
    assert!(matches!(
        next.format("%H:%M").to_string().as_str(),
        "00:30" | "01:30"
    ));

    let path = format!("/v1/schedules/{id}");
    let listed = gateway.get_json("/v1/schedules", 200).await;
    assert_documented(&doc, "ScheduleList", &listed);
    assert_eq!(listed["schedules"][0]["schedule_id"], json!(id));
    let one = gateway.get_json(&path, 200).await;
    assert_eq!(one["name"], "nightly");

    // Pause: no next fire. Resume: the next fire after now again.
    let patch = |body: Value| gateway.client.patch(gateway.url(&path)).json(&body);
    let paused = send(patch(json!({"paused": true})), 200).await;
    assert_eq!(
        (paused["paused"].clone(), paused["next_fire_at"].clone()),
        (json!(true), Value::Null)
    );
    let resumed = send(patch(json!({"paused": false})), 200).await;
    assert_eq!(time(&resumed["next_fire_at"]), next);
    // A new timing starts from its first fire after now; other fields stay.
    let changed = send(patch(json!({"every": "1h", "name": null})), 200).await;
    assert_eq!(changed["cron"], Value::Null);
    assert_eq!(changed["every_secs"], 3600);
    assert_eq!(changed["name"], Value::Null);
    assert_eq!(changed["input"], "the nightly report");
    assert!(time(&changed["next_fire_at"]) <= Utc::now() + chrono::TimeDelta::hours(1));

    // A trigger makes the task now, with the schedule's template.
    let triggered = gateway
        .post_json(&format!("{path}/trigger"), &json!({}), 202)
        .await;
    assert_documented(&doc, "Triggered", &triggered);
    let task_id: Uuid = triggered["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(task_id, fire_task_id(id, time(&triggered["fire_at"])));
    let task = gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await;
    assert_eq!(task["task"]["schedule_id"], json!(id));
    assert_eq!(task["task"]["input"], "the nightly report");
    let (budget, constraints): (Value, Value) =
        sqlx::query_as("SELECT budget, constraints FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(budget["max_tokens"], 5000);
    assert_eq!(constraints, json!(["be brief"]));
    let fires = gateway.get_json(&format!("{path}/fires"), 200).await;
    assert_documented(&doc, "FireList", &fires);
    assert_eq!(fires["fires"][0]["decision"], "triggered");
    assert_eq!(fires["fires"][0]["task_status"], "pending");

    // Delete: gone, but its fires and its task stay.
    send(gateway.client.delete(gateway.url(&path)), 204).await;
    let gone = gateway.get_json(&path, 404).await;
    assert_eq!(gone["error"]["code"], "schedule_not_found");
    send(gateway.client.delete(gateway.url(&path)), 404).await;
    let kept = gateway.get_json(&format!("{path}/fires"), 200).await;
    assert_eq!(kept["fires"].as_array().map(Vec::len), Some(1));
    assert_eq!(tasks(&env, id).await.len(), 1);
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn each_wrong_field_is_a_400_naming_it() {
    let env = TestEnv::without_worker(|_| {}).await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let base = json!({"agent_id": agent, "input": "x", "every": "1m"});
    let with = |extra: Value| {
        let mut body = base.clone();
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    for (extra, field) in [
        (
            json!({"every": null, "cron": "61 * * * *"}),
            "cron: cron minute field",
        ),
        (
            json!({"every": null, "cron": "* * *"}),
            "cron: a cron expression has 5 fields",
        ),
        (
            json!({"every": null, "cron": "0 0 30 2 *"}),
            "cron: cron expression \"0 0 30 2 *\" never fires",
        ),
        (json!({"cron": "* * * * *"}), "cron: a schedule has either"),
        (json!({"every": null}), "cron: a schedule needs"),
        (json!({"every": "5x"}), "every: interval \"5x\""),
        (
            json!({"every": null, "every_secs": 0}),
            "every_secs: interval of 0 s",
        ),
        (
            json!({"timezone": "Mars/Olympus"}),
            "timezone: unknown time zone",
        ),
        (
            json!({"timezone": "europe/berlin"}),
            "did you mean Europe/Berlin?",
        ),
        (
            json!({"timezone": "Europe/Berlin"}),
            "timezone: an interval has no time zone",
        ),
        (json!({"overlap": "queue"}), "overlap: unknown overlap"),
        (json!({"catch_up": "some"}), "catch_up: unknown catch-up"),
        (json!({"catch_up_window_secs": -1}), "catch_up_window_secs:"),
        (json!({"max_fires_per_day": 0}), "max_fires_per_day:"),
        (json!({"input": "  "}), "input: must not be blank"),
        (json!({"name": ""}), "name: must be 1 to 200"),
        (
            json!({"task_template": {"colour": "red"}}),
            "task_template: unknown field",
        ),
        (
            json!({"task_template": {"budget": {"max_cost_usd": 1}}}),
            "task_template.budget",
        ),
    ] {
        let refused = gateway
            .post_json("/v1/schedules", &with(extra.clone()), 400)
            .await;
        assert_eq!(refused["error"]["code"], "invalid_schedule", "{extra}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{extra}: {message}");
    }
    let unknown = with(json!({"agent_id": Uuid::now_v7()}));
    let refused = gateway.post_json("/v1/schedules", &unknown, 404).await;
    assert_eq!(refused["error"]["code"], "agent_not_found");
    gateway
        .post_json("/v1/schedules", &with(json!({"colour": 1})), 422)
        .await;
    let missing = format!("/v1/schedules/{}", Uuid::now_v7());
    gateway.get_json(&missing, 404).await;
    gateway
        .post_json(&format!("{missing}/trigger"), &json!({}), 404)
        .await;
    gateway.get_json(&format!("{missing}/fires"), 404).await;
    let patch = gateway
        .client
        .patch(gateway.url(&missing))
        .json(&json!({"paused": true}));
    send(patch, 404).await;
    // A PATCH is checked like a creation, and a wrong one changes nothing.
    let created = gateway.post_json("/v1/schedules", &base, 201).await;
    let path = format!("/v1/schedules/{}", created["schedule_id"].as_str().unwrap());
    let patch = gateway
        .client
        .patch(gateway.url(&path))
        .json(&json!({"overlap": "never"}));
    let refused = send(patch, 400).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("overlap:")
    );
    assert_eq!(gateway.get_json(&path, 200).await["overlap"], "skip");
    gateway.stop().await;
    env.stop().await;
}

async fn agentd(env: &TestEnv, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .envs(env_for(&env.settings))
        .args(args)
        .kill_on_drop(true);
    tokio::time::timeout(super::WAIT * 3, command.output())
        .await
        .expect("the command ends")
        .expect("agentd runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn the_cli_creates_lists_and_refuses_what_is_wrong() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await.to_string();
    let create = ["schedule", "create", "--agent", &agent, "--input", "hello"];
    for (flag, value, problem) in [
        (
            "--cron",
            "61 * * * *",
            "cron minute field \"61\": 61 is out of range",
        ),
        ("--every", "5x", "interval \"5x\": unknown unit"),
    ] {
        let output = agentd(&env, &[&create[..], &[flag, value]].concat()).await;
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        let err = text(&output.stderr);
        assert!(err.contains(flag) && err.contains(problem), "{err}");
    }
    let tz = agentd(
        &env,
        &[&create[..], &["--cron", "0 9 * * *", "--tz", "Berlin"]].concat(),
    )
    .await;
    assert_eq!(tz.status.code(), Some(2));
    assert!(text(&tz.stderr).contains("--tz"), "{}", text(&tz.stderr));
    // A time zone is the cron expression's: an interval has none.
    let interval = [&create[..], &["--every", "1h", "--tz", "Europe/Berlin"]].concat();
    let tz = agentd(&env, &interval).await;
    assert_eq!(tz.status.code(), Some(2));
    let err = text(&tz.stderr);
    assert!(
        err.contains("timezone: an interval has no time zone"),
        "{err}"
    );
    let nobody = Uuid::now_v7().to_string();
    let unknown = [
        "schedule", "create", "--agent", &nobody, "--input", "x", "--every", "1m",
    ];
    let output = agentd(&env, &unknown).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains(&format!("no agent {nobody}")));

    let made = [
        &create[..],
        &[
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--name",
            "nightly",
        ],
    ]
    .concat();
    let output = agentd(&env, &made).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let id = text(&output.stdout).trim().to_owned();
    let schedule_id: Uuid = id.parse().expect("the schedule_id alone on stdout");
    let list = agentd(&env, &["schedule", "list"]).await;
    let listed = text(&list.stdout);
    assert!(
        listed.contains(&id) && listed.contains("Europe/Berlin") && listed.contains("nightly"),
        "{listed}"
    );
    let paused = agentd(&env, &["schedule", "pause", &id]).await;
    assert!(paused.status.success());
    let row = agentd::store::schedules::get(&env.pool, schedule_id)
        .await
        .unwrap()
        .unwrap();
    assert!(row.paused && row.next_fire_at.is_none());
    agentd(&env, &["schedule", "resume", &id]).await;
    let triggered = agentd(&env, &["schedule", "trigger", &id]).await;
    assert!(triggered.status.success(), "{}", text(&triggered.stderr));
    let task_id: Uuid = text(&triggered.stdout).trim().parse().expect("the task_id");
    let fires = text(&agentd(&env, &["schedule", "fires", &id]).await.stdout);
    assert!(
        fires.contains("triggered") && fires.contains(&task_id.to_string()),
        "{fires}"
    );
    let shown = text(&agentd(&env, &["schedule", "show", &id]).await.stdout);
    assert!(
        shown.contains("next fire") && shown.contains("triggered"),
        "{shown}"
    );
    let deleted = agentd(&env, &["schedule", "delete", &id]).await;
    assert!(deleted.status.success());
    for args in [
        ["schedule", "delete", &id],
        ["schedule", "trigger", &id],
        ["schedule", "show", &id],
    ] {
        let output = agentd(&env, &args).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            text(&output.stderr).contains(&format!("no schedule {id}")),
            "{args:?}"
        );
    }
    env.stop().await;
}
