//! The AsyncAPI document from the outside: `agentd asyncapi` prints the committed
//! docs/asyncapi.json without any configuration or service, `--check` fails on a stale copy,
//! and the harness's event check (support/schema.rs, run on every event the integration
//! tests observe) really rejects events that break the document.

use std::path::Path;
use std::process::Command;

use crate::support::schema::{assert_valid_event, event_problems};
use agentd::contract::events::TaskCompleted;
use agentd::contract::{Event, EventData};
use serde_json::{Value, json};
use uuid::Uuid;

fn committed() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/asyncapi.json");
    std::fs::read_to_string(path).expect("docs/asyncapi.json")
}

/// `agentd ARGS` run in an empty directory (no config/default.toml to find).
fn agentd(args: &[&str]) -> std::process::Output {
    let dir = crate::support::harness::scratch_dir("asyncapi");
    let output = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(args)
        .current_dir(&dir)
        .env("AGENTD__AMQP__URL", "amqp://nobody@127.0.0.1:1/%2f")
        .env(
            "AGENTD__DATABASE__URL",
            "postgres://nobody@127.0.0.1:1/none",
        )
        .output()
        .expect("agentd runs");
    let _ = std::fs::remove_dir_all(dir);
    output
}

#[test]
fn agentd_asyncapi_prints_the_committed_document_and_checks_copies() {
    let printed = agentd(&["asyncapi"]);
    assert!(printed.status.success(), "{printed:?}");
    assert!(
        String::from_utf8_lossy(&printed.stdout) == committed(),
        "`agentd asyncapi` differs from docs/asyncapi.json: \
         regenerate it with `cargo run -- asyncapi > docs/asyncapi.json`"
    );

    let current = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/asyncapi.json");
    let check = agentd(&["asyncapi", "--check", &current.display().to_string()]);
    assert!(check.status.success(), "{check:?}");

    let stale = std::env::temp_dir().join(format!("asyncapi-{}.json", Uuid::now_v7()));
    std::fs::write(&stale, committed().replace("task.completed", "task.done")).expect("write");
    let check = agentd(&["asyncapi", "--check", &stale.display().to_string()]);
    let _ = std::fs::remove_file(&stale);
    assert!(!check.status.success(), "{check:?}");
    let message = String::from_utf8_lossy(&check.stderr);
    assert!(
        message.contains("is not the current AsyncAPI document")
            && message.contains("cargo run -- asyncapi >"),
        "{message}"
    );
}

fn completed() -> Value {
    let event = Event {
        event_id: Uuid::now_v7(),
        task_id: Uuid::now_v7(),
        agent_id: Some(Uuid::now_v7()),
        seq: 4,
        trace_id: Some(Uuid::now_v7()),
        iteration: Some(2),
        ts: chrono::Utc::now(),
        body: EventData::TaskCompleted(TaskCompleted {
            answer: "4".into(),
            iterations: 2,
        }),
    };
    serde_json::to_value(event).expect("event JSON")
}

#[test]
fn the_harness_check_rejects_events_that_break_the_document() {
    let good = completed();
    assert_eq!(event_problems(&good), None);
    assert_valid_event(&good);

    // What the problem must mention, and how the event is broken.
    type Edit = (&'static str, fn(&mut Value));
    let edits: [Edit; 6] = [
        ("answer", |e| {
            drop(e["data"].as_object_mut().map(|d| d.remove("answer")))
        }),
        ("iterations", |e| e["data"]["iterations"] = json!("two")),
        ("seq", |e| e["seq"] = json!(4.5)),
        ("task_id", |e| e["task_id"] = json!("task-1")),
        ("no message", |e| e["type"] = json!("task.exploded")),
        ("no string", |e| {
            drop(e.as_object_mut().map(|e| e.remove("type")))
        }),
    ];
    for (expected, edit) in edits {
        let mut bad = good.clone();
        edit(&mut bad);
        let problems = event_problems(&bad).unwrap_or_default();
        assert!(problems.contains(expected), "{expected}: {problems:?}");
    }
    let mut bad = good.clone();
    bad["data"] = json!({"iterations": 2});
    let panicked = std::panic::catch_unwind(|| assert_valid_event(&bad));
    assert!(
        panicked.is_err(),
        "task.completed without answer was accepted"
    );
}
