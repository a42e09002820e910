//! `agentd resolve` end to end (CONTRACT v3 §14): the real binary against a call held with
//! an unknown outcome (see `support::held`). Its mistakes first: an unknown task, an unknown
//! tool_call_id, a decision that is none of the four, a task id that is no UUID and a result
//! that is no JSON each get a clear message and a non-zero exit, and write nothing (no
//! operator action, no `tool.resolved`, the task still held). Then the resolution: the task
//! resumes and completes with the given result, the tool never runs again,
//! `operator_actions` records it with `verified_by` (the OS user), and a second resolution
//! is refused.

use uuid::Uuid;

use super::{agentd, stderr, stdout};
use crate::support::harness::TestEnv;
use crate::support::held::{HELD_CALL, held_calls};
use serde_json::{Value, json};

/// Operator actions and `tool.resolved` events of `task_id`, and its status.
async fn written(env: &TestEnv, task_id: Uuid) -> (i64, usize, String) {
    let actions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM operator_actions WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("operator_actions");
    let resolved = (env.stored_events(task_id).await.iter())
        .filter(|e| e["type"] == "tool.resolved")
        .count();
    let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("task");
    (actions, resolved, status)
}

#[tokio::test]
async fn agentd_resolve_resumes_a_held_call_and_refuses_its_mistakes() {
    let held = held_calls(1).await;
    let (env, task_id) = (&held.env, held.tasks[0]);
    let task = task_id.to_string();
    let unknown_task = Uuid::now_v7().to_string();
    let charged_before = held.charges(task_id);
    let reason = ["--reason", "seen at the payment provider"];
    // (arguments, exit code, what stderr says)
    let mistakes: [(Vec<&str>, i32, &str); 5] = [
        (
            vec![&unknown_task, HELD_CALL, "--outcome", "skip"],
            1,
            "no held call call_0 of task",
        ),
        (
            vec![&task, "call_9", "--outcome", "skip"],
            1,
            "no held call call_9 of task",
        ),
        (
            vec![&task, HELD_CALL, "--outcome", "maybe"],
            2,
            "invalid value 'maybe' for '--outcome",
        ),
        (
            vec!["not-a-task", HELD_CALL, "--outcome", "skip"],
            2,
            "invalid value 'not-a-task'",
        ),
        (
            vec![&task, HELD_CALL, "--outcome", "succeeded", "--result", "{"],
            1,
            "--result is not JSON",
        ),
    ];
    for (args, code, says) in mistakes {
        let mut command = vec!["resolve"];
        command.extend(args);
        command.extend(reason);
        let output = agentd(&env.settings, &command).await;
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(code), "{command:?}: {err}");
        assert!(err.contains(says), "{command:?}: {err}");
        assert!(!err.contains("panicked"), "{command:?}: {err}");
        assert_eq!(
            written(env, task_id).await,
            (0, 0, "waiting".to_owned()),
            "{command:?} wrote nothing"
        );
    }

    let output = agentd(
        &env.settings,
        &[
            "resolve",
            &task,
            HELD_CALL,
            "--outcome",
            "succeeded",
            "--result",
            r#"{"charged": 5, "receipt": "r-cli"}"#,
            "--by",
            "ann",
            reason[0],
            reason[1],
        ],
    )
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&format!(
            "succeeded recorded for call_0; task {task} resumes"
        )),
        "{}",
        stdout(&output)
    );
    let ended = env.wait_terminal(task_id).await;
    assert_eq!(ended.status, "completed", "{}", held.worker.log());
    let (state, result): (String, Option<Value>) = sqlx::query_as(
        "SELECT state, result FROM tool_calls WHERE task_id = $1 AND tool_call_id = $2",
    )
    .bind(task_id)
    .bind(HELD_CALL)
    .fetch_one(&env.pool)
    .await
    .expect("tool_calls");
    assert_eq!(state, "succeeded");
    assert_eq!(result, Some(json!({"charged": 5, "receipt": "r-cli"})));
    assert_eq!(
        held.charges(task_id),
        charged_before,
        "the tool did not run"
    );
    let actions: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT action, reason, by, verified_by FROM operator_actions WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("operator_actions");
    assert_eq!(actions.len(), 1, "{actions:?}");
    let (action, why, by, verified_by) = &actions[0];
    assert_eq!((action.as_str(), why.as_str()), ("succeeded", reason[1]));
    assert_eq!(by.as_deref(), Some("ann"));
    let os_user = agentd::cli::approvals::os_user();
    assert!(verified_by.is_some(), "verified by the OS user");
    assert_eq!(verified_by, &os_user);
    let events = env.stored_events(task_id).await;
    let resolved: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.resolved")
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["by"], "ann");

    // The first resolution wins: a second one says so and changes nothing.
    let again = agentd(
        &env.settings,
        &[
            "resolve",
            &task,
            HELD_CALL,
            "--outcome",
            "retry",
            reason[0],
            reason[1],
        ],
    )
    .await;
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("was resolved already (succeeded)"),
        "{}",
        stderr(&again)
    );
    assert_eq!(written(env, task_id).await, (1, 1, "completed".to_owned()));
    drop(held.worker);
    held.env.stop().await;
}
