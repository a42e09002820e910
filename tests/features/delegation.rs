//! Delegation (CONTRACT §10) with real workers, the fake LLM over HTTP, RabbitMQ and
//! PostgreSQL: an agent listing `delegates` gets the `delegate` tool; a call makes an
//! ordinary child task while the parent waits holding nothing; the child's answer is the
//! call's result, its tokens count toward the parent's budget; `root_task_id` gives the
//! tree (cancelling the parent cancels the child: `cancel.rs`); a parent whose worker dies
//! while its child runs still gets the answer.

use std::time::Duration;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::WorkerProcess;
use crate::support::wait::{self, NEXT_STEP_WITHIN};
use agentd::scripted_model::{answer_reply, call_tool_reply, reflect_reply};
use serde_json::{Value, json};
use uuid::Uuid;

/// A boss agent that may delegate to a helper agent: (boss, helper).
pub(super) async fn agents(env: &TestEnv) -> (Uuid, Uuid) {
    let boss = env.agent(None, None).await;
    let helper = env.agent(None, None).await;
    sqlx::query("UPDATE agents SET delegates = ARRAY[$2]::uuid[] WHERE agent_id = $1")
        .bind(boss)
        .bind(helper)
        .execute(&env.pool)
        .await
        .expect("delegates");
    (boss, helper)
}

pub(super) async fn child_of(env: &TestEnv, parent: Uuid) -> Uuid {
    wait::until(format!("a child of {parent}"), NEXT_STEP_WITHIN, || async {
        sqlx::query_scalar("SELECT task_id FROM tasks WHERE parent_task_id = $1")
            .bind(parent)
            .fetch_optional(&env.pool)
            .await
            .expect("child")
    })
    .await
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[tokio::test]
async fn a_parent_gets_its_childs_answer_and_pays_for_it_from_its_budget() {
    let env = TestEnv::start().await;
    let (boss, helper) = agents(&env).await;
    let stranger = Uuid::now_v7();
    env.fake.script(
        "boss-1",
        vec![
            call_tool_reply(vec![
                (
                    "delegate",
                    json!({"agent_id": helper, "input": "helper-1: add 2 and 3"}),
                ),
                (
                    "delegate",
                    json!({"agent_id": stranger, "input": "helper-x: anything"}),
                ),
            ]),
            answer_reply("boss says 5"),
        ],
    );
    env.fake
        .script("helper-1", vec![reflect_reply("2 + 3"), answer_reply("5")]);
    // 18 tokens per LLM call: the boss's first call (18) and the helper's two (36) make 54
    // of 60 before the boss's second call: a warning, no breach.
    let parent = Uuid::now_v7();
    let body = json!({"task_id": parent, "agent_id": boss, "input": "boss-1: what is 2+3?",
                      "budget": {"max_tokens": 60}});
    env.publish_raw(body.to_string().as_bytes()).await;
    let task = env.wait_terminal(parent).await;
    assert_eq!(task.status, "completed", "{:?}", task.error);
    assert_eq!(task.answer.as_deref(), Some("boss says 5"));
    let child = child_of(&env, parent).await;
    let child_row = env.wait_terminal(child).await;
    assert_eq!(child_row.status, "completed");
    assert_eq!(child_row.answer.as_deref(), Some("5"));
    assert_eq!(child_row.agent_id, Some(helper));
    assert_eq!(child_row.parent_task_id, Some(parent));
    assert_eq!(child_row.root_task_id, Some(parent));
    assert_eq!(task.root_task_id, Some(parent), "a root is its own root");
    let tree: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE root_task_id = $1")
        .bind(parent)
        .fetch_one(&env.pool)
        .await
        .expect("tree");
    assert_eq!(tree, 2, "one child: the refused call made none");
    // The boss was offered the tool, the helper not; the boss saw both results.
    let boss_requests = env.fake.requests_for("boss-1");
    assert!(
        boss_requests[0]
            .tool_names()
            .contains(&"delegate".to_owned())
    );
    assert!(
        !env.fake.requests_for("helper-1")[0]
            .tool_names()
            .contains(&"delegate".to_owned())
    );
    let state = boss_requests[1].system_state().expect("state");
    let results = &state["last_recursion"]["tool_call_results"];
    assert_eq!(results[0]["success"], true, "{results}");
    assert_eq!(results[0]["result"]["answer"], "5");
    assert_eq!(results[0]["result"]["task_id"], json!(child));
    assert_eq!(results[1]["success"], false);
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("may delegate to"),
        "{results}"
    );
    // Waiting for the child, resumed by it; the child's tokens counted in the boss's budget,
    // not in its row.
    let events = env.stored_events(parent).await;
    let waiting = of_type(&events, "task.waiting");
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0]["data"]["reason"], "child");
    assert_eq!(
        of_type(&events, "task.resumed")[0]["data"]["reason"],
        "child"
    );
    let warning = of_type(&events, "budget.warning");
    assert_eq!(warning.len(), 1, "{events:#?}");
    assert_eq!(warning[0]["data"]["used"], json!(54.0));
    let tokens: (i64, i64) = sqlx::query_as(
        "SELECT prompt_tokens + completion_tokens, \
                (SELECT prompt_tokens + completion_tokens FROM tasks WHERE task_id = $2) \
         FROM tasks WHERE task_id = $1",
    )
    .bind(parent)
    .bind(child)
    .fetch_one(&env.pool)
    .await
    .expect("tokens");
    assert_eq!(tokens, (36, 36));
    let child_budget: Value = sqlx::query_scalar("SELECT budget FROM tasks WHERE task_id = $1")
        .bind(child)
        .fetch_one(&env.pool)
        .await
        .expect("child budget");
    assert_eq!(
        child_budget["max_tokens"], 42,
        "what was left of the boss's 60"
    );
    // The gateway lists the children.
    let gateway = Gateway::start(&env, &[]).await;
    let detail = gateway.get_json(&format!("/v1/tasks/{parent}"), 200).await;
    assert_eq!(detail["children"][0]["task_id"], json!(child));
    assert_eq!(detail["children"][0]["parent_task_id"], json!(parent));
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_parent_whose_worker_dies_while_its_child_runs_still_gets_the_answer() {
    let env = TestEnv::without_worker(|s| {
        s.worker.lease_secs = 2.0;
        s.worker.shutdown_grace_secs = 1;
    })
    .await;
    let (boss, helper) = agents(&env).await;
    env.fake.script(
        "boss-3",
        vec![
            call_tool_reply(vec![(
                "delegate",
                json!({"agent_id": helper, "input": "helper-3: slowly"}),
            )]),
            answer_reply("got it"),
        ],
    );
    env.fake.script(
        "helper-3",
        vec![
            answer_reply("first try").with_delay(Duration::from_millis(1500)),
            answer_reply("done"),
        ],
    );
    let mut first = WorkerProcess::spawn(&env.settings, &[]);
    let parent = env.submit(boss, "boss-3: go").await;
    let child = child_of(&env, parent).await;
    env.wait_asked("helper-3", 1).await;
    first.kill();
    let _second = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(parent).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("got it"));
    let child_row = env.wait_terminal(child).await;
    assert_eq!(child_row.status, "completed");
    let state = env.fake.requests_for("boss-3")[1]
        .system_state()
        .expect("state");
    let answer = &state["last_recursion"]["tool_call_results"][0]["result"]["answer"];
    assert!(answer == "first try" || answer == "done", "{answer}");
    assert_eq!(*answer, json!(child_row.answer.unwrap()));
}
