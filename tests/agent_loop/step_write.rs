//! The one-statement step write against the real database: a step lands whole (recursion,
//! tool calls in call order, LLM attempts, events, progress) when the lease is the writer's,
//! and not at all when it is not; the task's end clears checkpoint and lease; a new task is
//! recorded and taken in one statement only when its agent exists and its row is new.

mod unicode;

use crate::support::harness::TestEnv;
use agentd::core::machine::RecursionRecord;
use agentd::core::state::RecursionStatus;
use agentd::core::types::ToolCallResult;
use agentd::store::step::{self, EventRow, Finish, Progress, StepWrite, Totals};
use agentd::store::tasks::{self, NewTask};
use agentd::store::trace::LlmCallRow;
use chrono::Utc;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

fn tool_call(id: &str, result: &str) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: id.into(),
        name: "calculate".into(),
        arguments: json!({"expression": "1+1"}),
        success: true,
        result: Some(json!(result)),
        error: None,
        memo: None,
        duration_ms: 3,
    }
}

fn step_with(task_id: Uuid, owner: Uuid, iteration: u32, progress: Progress) -> StepWrite {
    let trace_id = Uuid::now_v7();
    let record = RecursionRecord {
        trace_id,
        iteration,
        step_id: Some("1".into()),
        action_type: Some("CALL_TOOL".into()),
        observe: "o".into(),
        thought: "t".into(),
        abstract_: "a".into(),
        output: json!({"action": {"type": "CALL_TOOL"}}),
        status: RecursionStatus::Done,
        error_log: None,
        tool_call_results: vec![
            tool_call("call_b", "first"),
            tool_call("call_a", &"x".repeat(500)),
        ],
        started_at: Utc::now(),
        finished_at: Utc::now(),
    };
    StepWrite {
        task_id,
        owner,
        progress,
        records: vec![record],
        llm_rows: vec![LlmCallRow {
            task_id,
            trace_id,
            iteration,
            attempt: 1,
            status: "200".into(),
            latency_ms: 7,
            prompt_tokens: Some(10),
            completion_tokens: None,
            error: None,
            model: "m".into(),
            cost_usd: Some(0.25),
            queued_ms: None,
            started_at: chrono::Utc::now(),
            served_from: None,
            record: None,
        }],
        max_result_chars: 100,
        tool_meta: Vec::new(),
        started: Vec::new(),
        confirmed_seq: 0,
        totals: Totals {
            prompt_tokens: 10 * u64::from(iteration),
            completion_tokens: 0,
            cost_usd: Some(0.25 * f64::from(iteration)),
            tool_calls: 0,
        },
    }
}

async fn count(pool: &PgPool, table: &str, task_id: Uuid) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE task_id = $1"))
        .bind(task_id)
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn agent(pool: &PgPool) -> Uuid {
    let agent_id = Uuid::now_v7();
    sqlx::query("INSERT INTO agents (agent_id, name, model) VALUES ($1, 'a', 'm')")
        .bind(agent_id)
        .execute(pool)
        .await
        .expect("agent");
    agent_id
}

fn new_task(task_id: Uuid, agent_id: Uuid) -> NewTask<'static> {
    NewTask {
        task_id,
        agent_id: Some(agent_id),
        conversation_id: None,
        input: Some("hi"),
        constraints: &[],
        stream: false,
        reply: None,
        received_at: None,
        tenant_id: None,
        priority: Default::default(),
        rerun: None,
    }
}

#[tokio::test]
async fn a_step_lands_whole_under_the_lease_and_not_at_all_without_it() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let (owner, intruder) = (Uuid::now_v7(), Uuid::now_v7());
    let (agent_id, task_id) = (agent(pool).await, Uuid::now_v7());
    let intake = tasks::take_new(
        pool,
        &new_task(task_id, agent_id),
        agent_id,
        owner,
        30.0,
        None,
    )
    .await
    .expect("take_new")
    .expect("the agent exists");
    assert!(intake.inserted, "a new task is recorded and taken at once");
    assert_eq!(intake.agent.agent_id, agent_id);

    let event_ids = [Uuid::now_v7(), Uuid::now_v7()];
    let events = [
        EventRow {
            seq: 1,
            event_id: event_ids[0],
            event_type: "task.started",
            json: r#"{"type":"task.started"}"#,
        },
        EventRow {
            seq: 2,
            event_id: event_ids[1],
            event_type: "recursion.completed",
            json: r#"{"type":"recursion.completed"}"#,
        },
    ];
    let checkpoint = || Progress::Checkpoint {
        iterations: 1,
        plan: r#"[{"step_id":"1"}]"#.into(),
        checkpoint: r#"{"iteration":1}"#.into(),
    };

    // Another worker's id: nothing is written.
    let foreign = step_with(task_id, intruder, 1, checkpoint());
    assert!(!step::write(pool, &foreign, &events).await.expect("write"));
    for table in ["recursions", "tool_calls", "llm_calls", "events"] {
        assert_eq!(
            count(pool, table, task_id).await,
            0,
            "{table} after a fenced write"
        );
    }

    // The holder: every row, tool calls in call order, long results cut.
    let ours = step_with(task_id, owner, 1, checkpoint());
    assert!(step::write(pool, &ours, &events).await.expect("write"));
    let calls: Vec<(String, String)> = sqlx::query_as(
        "SELECT tool_call_id, result #>> '{}' FROM tool_calls WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
    .expect("tool calls");
    assert_eq!(calls[0], ("call_b".into(), "first".into()));
    assert_eq!(calls[1].0, "call_a");
    assert!(
        calls[1].1.len() < 500,
        "stored cut: {} chars",
        calls[1].1.len()
    );
    let (iterations, plan, checkpoint_json): (i32, serde_json::Value, serde_json::Value) =
        sqlx::query_as("SELECT iterations, plan, checkpoint::jsonb FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(pool)
            .await
            .expect("task");
    assert_eq!(iterations, 1);
    assert_eq!(plan, json!([{"step_id": "1"}]));
    assert_eq!(checkpoint_json, json!({"iteration": 1}));
    // The task's spending and the attempt's model and cost.
    let spent: (i64, Option<f64>, String, Option<f64>) = sqlx::query_as(
        "SELECT t.prompt_tokens, t.cost_usd, l.model, l.cost_usd \
         FROM tasks t JOIN llm_calls l USING (task_id) WHERE t.task_id = $1",
    )
    .bind(task_id)
    .fetch_one(pool)
    .await
    .expect("spending");
    assert_eq!(spent, (10, Some(0.25), "m".into(), Some(0.25)));
    let stored: Vec<(i64, Uuid, String)> = sqlx::query_as(
        "SELECT seq, event_id, payload->>'type' FROM events WHERE task_id = $1 ORDER BY seq",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
    .expect("events");
    assert_eq!(
        stored,
        vec![
            (1, event_ids[0], "task.started".into()),
            (2, event_ids[1], "recursion.completed".into())
        ]
    );
    assert_eq!(count(pool, "llm_calls", task_id).await, 1);

    // The end: terminal fields set, checkpoint and lease cleared; later writes are fenced.
    let end = Progress::Finish(Finish {
        status: tasks::status::COMPLETED,
        iterations: 2,
        plan: "[]".into(),
        answer: Some("42".into()),
        error: None,
        fail_reason: None,
    });
    assert!(
        step::write(pool, &step_with(task_id, owner, 2, end), &[])
            .await
            .expect("end")
    );
    let row: (String, Option<String>, bool, bool, bool) = sqlx::query_as(
        "SELECT status, answer, checkpoint IS NULL, lease_owner IS NULL, finished_at IS NOT NULL \
         FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_one(pool)
    .await
    .expect("ended task");
    assert_eq!(
        row,
        ("completed".into(), Some("42".into()), true, true, true)
    );
    let late = step_with(task_id, owner, 3, Progress::Touch);
    assert!(!step::write(pool, &late, &[]).await.expect("late write"));
    assert_eq!(count(pool, "recursions", task_id).await, 2);
}

#[tokio::test]
async fn take_new_leaves_known_tasks_and_unknown_agents_alone() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let (agent_id, owner) = (agent(pool).await, Uuid::now_v7());

    // Unknown agent: no row, nothing taken.
    let orphan = Uuid::now_v7();
    let unknown = Uuid::now_v7();
    let none = tasks::take_new(pool, &new_task(orphan, unknown), unknown, owner, 30.0, None)
        .await
        .expect("take_new");
    assert!(none.is_none());
    assert_eq!(count(pool, "tasks", orphan).await, 0);

    // A row recorded by a producer first: found, left pending for `claim`.
    let known = Uuid::now_v7();
    assert!(
        tasks::insert_pending(pool, &new_task(known, agent_id))
            .await
            .expect("pending")
    );
    let intake = tasks::take_new(
        pool,
        &new_task(known, agent_id),
        agent_id,
        owner,
        30.0,
        None,
    )
    .await
    .expect("take_new")
    .expect("agent");
    assert!(!intake.inserted);
    let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE task_id = $1")
        .bind(known)
        .fetch_one(pool)
        .await
        .expect("status");
    assert_eq!(status, "pending");
}

#[tokio::test]
async fn steps_of_many_tasks_share_one_statement_and_each_is_fenced_alone() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let (owner, intruder) = (Uuid::now_v7(), Uuid::now_v7());
    let agent_id = agent(pool).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let task_id = Uuid::now_v7();
        tasks::take_new(
            pool,
            &new_task(task_id, agent_id),
            agent_id,
            owner,
            30.0,
            None,
        )
        .await
        .expect("take_new")
        .expect("agent");
        ids.push(task_id);
    }
    let checkpoint = || Progress::Checkpoint {
        iterations: 1,
        plan: "[]".into(),
        checkpoint: "{}".into(),
    };
    // The middle step is written by someone who does not hold its task.
    let writes = [
        step_with(ids[0], owner, 1, checkpoint()),
        step_with(ids[1], intruder, 1, checkpoint()),
        step_with(ids[2], owner, 1, checkpoint()),
    ];
    let event = |seq: i64| EventRow {
        seq,
        event_id: Uuid::now_v7(),
        event_type: "task.started",
        json: r#"{"type":"task.started"}"#,
    };
    let events = [[event(1)], [event(1)], [event(1)]];
    let steps: Vec<step::Step<'_>> = writes
        .iter()
        .zip(&events)
        .map(|(write, events)| step::Step { write, events })
        .collect();
    let written = step::write_many(pool, &steps).await.expect("write_many");
    assert!(written.contains(&ids[0]) && written.contains(&ids[2]));
    assert!(!written.contains(&ids[1]), "the fenced step is refused");
    for (task_id, rows) in [(ids[0], 1), (ids[1], 0), (ids[2], 1)] {
        for table in ["recursions", "llm_calls", "events"] {
            assert_eq!(count(pool, table, task_id).await, rows, "{table}");
        }
        assert_eq!(count(pool, "tool_calls", task_id).await, rows * 2);
    }
    let event_seq: i64 = sqlx::query_scalar("SELECT event_seq FROM tasks WHERE task_id = $1")
        .bind(ids[2])
        .fetch_one(pool)
        .await
        .expect("event_seq");
    assert_eq!(event_seq, 1, "each task's own highest seq");
}
