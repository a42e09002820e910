//! Unknown outcomes held for a person (CONTRACT v3 §14) with the real worker binary, a real
//! MCP server whose side-effecting `charge` writes each idempotency key it executes to a
//! file, RabbitMQ and PostgreSQL: a worker is killed (SIGKILL) while `charge` runs for an
//! agent with `on_unknown = hold`; another worker finds the call cut short and holds the
//! task (`waiting`, reason `unknown_outcome`, `tool.unknown`); a `resolve succeeded`
//! control message resumes it at once, the model gets the given result, and the tool never
//! runs twice; a second resolution changes nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;
use crate::support::held::{HeldCalls, held_calls};
use crate::support::process::WorkerProcess;
use crate::support::wait::{self, NEXT_STEP_WITHIN, Says};
use agentd::amqp::control::send_control;
use agentd::contract::ControlMessage;
use agentd::contract::control::Resolve;
use agentd::core::unknown::{Resolution, ResolveOutcome};
use agentd::lifecycle::resolutions::{Outcome, resolve, resolve_verified};
use agentd::lifecycle::unheld::Sink;
use agentd::scripted_model::ScriptedModel;
use serde_json::{Value, json};
use uuid::Uuid;

/// A resolve resumes its task at once: as soon as its control message arrives, the same
/// bound as a cancel.
const RESUMED_WITHIN: Duration = wait::CANCEL_WITHIN;

async fn state_of(env: &TestEnv, task_id: Uuid) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, wait_reason FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("task row")
}

async fn call_state(env: &TestEnv, task_id: Uuid) -> Option<(String, Option<bool>, Option<Value>)> {
    sqlx::query_as(
        "SELECT state, success, result FROM tool_calls WHERE task_id = $1 \
         AND tool_call_id = 'call_0'",
    )
    .bind(task_id)
    .fetch_optional(&env.pool)
    .await
    .expect("tool_calls")
}

/// A task of an agent with `on_unknown = hold` whose `charge` call was cut short by a
/// SIGKILL, held by a second worker (`support::held`): the environment, the task, the ledger
/// file, the second worker and the LLM (kept alive).
async fn held_task() -> (TestEnv, Uuid, PathBuf, WorkerProcess, ScriptedModel) {
    let HeldCalls {
        env,
        tasks,
        ledger,
        worker: second,
        llm,
    } = held_calls(1).await;
    let task_id = tasks[0];
    assert_eq!(
        state_of(&env, task_id).await,
        ("waiting".to_owned(), Some("unknown_outcome".to_owned())),
        "{}",
        second.log()
    );
    let (state, success, _) = call_state(&env, task_id).await.expect("row");
    assert_eq!((state.as_str(), success), ("unknown", None));
    let key = format!("{task_id}:call_0");
    let events = env.stored_events(task_id).await;
    let unknown: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.unknown")
        .collect();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0]["data"]["idempotency_key"], key.as_str());
    assert_eq!(unknown[0]["data"]["name"], "t__charge");
    let waiting = events
        .iter()
        .rev()
        .find(|e| e["type"] == "task.waiting")
        .expect("waiting");
    assert_eq!(waiting["data"]["reason"], "unknown_outcome");
    let held = agentd::store::operator_actions::held(&env.pool, Some(task_id), 10)
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "listed as waiting for a person");

    (env, task_id, ledger, second, llm)
}

#[tokio::test]
async fn a_held_call_resolved_succeeded_resumes_at_once_and_never_runs_twice() {
    let (env, task_id, ledger, second, _llm) = held_task().await;
    let key = format!("{task_id}:call_0");
    let before = std::fs::read_to_string(&ledger).unwrap_or_default();
    let resolved_at = Instant::now();
    let message = ControlMessage::Resolve(Resolve {
        task_id,
        tool_call_id: "call_0".into(),
        outcome: ResolveOutcome::Succeeded,
        result: Some(json!({"charged": 5, "receipt": "r-1"})),
        error: None,
        reason: "the payment provider shows the charge".into(),
        by: Some("ann".into()),
    });
    send_control(&env.publisher, &env.settings.amqp, &message)
        .await
        .expect("resolve");
    let what = Says(|| format!("resumed: {}", second.log()));
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        state_of(&env, task_id).await.0 != "waiting"
    })
    .await;
    let resumed_in = resolved_at.elapsed();
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{}", second.log());
    assert!(
        resumed_in < RESUMED_WITHIN,
        "resumed {resumed_in:?} after the resolve"
    );
    let (state, success, result) = call_state(&env, task_id).await.expect("row");
    assert_eq!((state.as_str(), success), ("succeeded", Some(true)));
    assert_eq!(result, Some(json!({"charged": 5, "receipt": "r-1"})));
    let after = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert_eq!(before, after, "the resolve did not run the tool");
    let runs = after.lines().filter(|line| *line == key).count();
    assert!(runs <= 1, "charged {runs} times with one key");

    let events = env.stored_events(task_id).await;
    let resolved: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.resolved")
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["outcome"], "succeeded");
    assert_eq!(resolved[0]["data"]["by"], "ann");
    let resumed = events
        .iter()
        .rev()
        .find(|e| e["type"] == "task.resumed")
        .expect("resumed");
    assert_eq!(resumed["data"]["reason"], "resolved");
    let actions: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT action, reason, by FROM operator_actions WHERE task_id = $1")
            .bind(task_id)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        actions,
        [(
            "succeeded".to_owned(),
            "the payment provider shows the charge".to_owned(),
            Some("ann".to_owned())
        )]
    );

    // The first resolution wins.
    let sink = Sink {
        pool: &env.pool,
        publisher: &env.publisher,
        exchange: &env.settings.amqp.events_exchange,
    };
    let late = Resolution {
        outcome: ResolveOutcome::Retry,
        result: None,
        error: None,
        reason: "late\0click".into(),
        by: None,
    };
    let outcome = resolve(
        sink,
        &env.settings.amqp.tasks_queue,
        task_id,
        "call_0",
        &late,
    )
    .await
    .unwrap();
    assert_eq!(outcome, Outcome::AlreadyResolved("succeeded".into()));
    drop(second);
    env.stop().await;
}

#[tokio::test]
async fn a_held_call_resolved_retry_runs_again_under_the_same_key() {
    let (env, task_id, ledger, second, _llm) = held_task().await;
    let key = format!("{task_id}:call_0");
    let before = std::fs::read_to_string(&ledger).unwrap_or_default();
    let sink = Sink {
        pool: &env.pool,
        publisher: &env.publisher,
        exchange: &env.settings.amqp.events_exchange,
    };
    let retry = Resolution {
        outcome: ResolveOutcome::Retry,
        result: None,
        error: None,
        reason: "the provider has no record of it".into(),
        by: Some("bob".into()),
    };
    let outcome = resolve_verified(
        sink,
        &env.settings.amqp.tasks_queue,
        task_id,
        "call_0",
        &retry,
        Some("ops-key"),
    )
    .await
    .unwrap();
    assert!(matches!(outcome, Outcome::Recorded { resumed: true, .. }));
    // Who resolved as agentd verified it (CONTRACT v3 §15), beside the free-text `by`.
    let (by, verified_by): (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT by, verified_by FROM operator_actions WHERE task_id = $1 AND tool_call_id = 'call_0'",
    )
    .bind(task_id)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(by.as_deref(), Some("bob"));
    assert_eq!(verified_by.as_deref(), Some("ops-key"));
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{}", second.log());
    let (state, success, _) = call_state(&env, task_id).await.expect("row");
    assert_eq!((state.as_str(), success), ("succeeded", Some(true)));
    let after = std::fs::read_to_string(&ledger).unwrap_or_default();
    let ran = |text: &str| text.lines().filter(|line| *line == key).count();
    assert_eq!(
        ran(&after),
        ran(&before) + 1,
        "the retry ran once more, same key"
    );
    env.stop().await;
}
