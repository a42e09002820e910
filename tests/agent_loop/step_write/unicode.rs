//! Outside text through the step write against the real database: arbitrary Unicode in a
//! model's reply, its tool calls and a tool's results, fed through the real machine, is
//! always stored, and what is stored (recursion, tool calls, checkpoint, plan, event)
//! equals what the machine holds. A step PostgreSQL refuses says what it could not store;
//! one holding a NUL that slipped past the entry points is stored once made storable.

use std::collections::BTreeSet;

use agentd::core::inbound;
use agentd::core::limits::Limits;
use agentd::core::machine::{DomainEvent, Machine, Next, TaskInfo};
use agentd::core::prompt::PromptTemplate;
use agentd::core::storable;
use agentd::core::types::{LlmReply, ToolCallRequest, ToolCallResult};
use agentd::store::step::StepRefused;
use agentd::store::transient::refuses_nul;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use super::*;

/// Cases against the database: each is a task and one statement, so a few dozen suffice
/// to reach the corners the pieces below aim at.
const CASES: u32 = 32;

/// Pieces that PostgreSQL, JSON or Unicode treat specially.
const UNICODE: &[&str] = &[
    "\u{0}",
    "\\u0000",
    "\\\\u0000",
    "\\",
    "\"",
    "\u{FFFF}",
    "\u{FFFE}",
    "\u{10FFFF}",
    "\\ud800",
    "\\udfff",
    "e\u{301}\u{301}",
    "好",
];

fn unicode_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => select(UNICODE).prop_map(str::to_owned),
        2 => any::<char>().prop_map(String::from),
        1 => (1usize..2_000).prop_map(|n| format!("a{}", "\u{301}".repeat(n))),
        2 => "[a-z ]{0,8}",
    ];
    vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

/// One recursion's inputs: thought, answer-or-call, the tool calls' ids and arguments, and
/// what each tool returns.
type Case = (
    String,
    String,
    bool,
    Vec<(String, String)>,
    Vec<(String, String)>,
);

fn case() -> impl Strategy<Value = Case> {
    let id = prop_oneof![
        select(&["", "a", "a", "\u{0}"][..]).prop_map(str::to_owned),
        unicode_text()
    ];
    (
        unicode_text(),
        unicode_text(),
        any::<bool>(),
        vec((id, unicode_text()), 1..4),
        vec((unicode_text(), unicode_text()), 4),
    )
}

fn task_info(task_id: Uuid, agent_id: Uuid) -> TaskInfo {
    TaskInfo {
        task_id,
        agent_id,
        objective: "hi".into(),
        constraints: Vec::new(),
        max_iteration: 4,
        created_at: Utc::now(),
        limits: Limits::default(),
        conversation: Vec::new(),
        budget: None,
        stall: Default::default(),
    }
}

/// Runs one recursion of `case` through the machine: the record it produced.
fn run_recursion(machine: &mut Machine, case: Case) -> RecursionRecord {
    let (thought, text, calls_tools, calls, outputs) = case;
    let template = PromptTemplate::new("{{current_state}}").expect("template");
    let Next::CallLlm(_) = machine.begin_recursion(Uuid::now_v7(), Utc::now(), &template) else {
        panic!("the first recursion begins");
    };
    let kind = if calls_tools { "CALL_TOOL" } else { "ANSWER" };
    let content = json!({"observe": text, "thought": thought, "abstract": text,
        "action": {"action_type": kind, "output": {"answer": format!("a{text}")}}});
    let tool_calls = match calls_tools {
        true => calls
            .into_iter()
            .map(|(id, arguments)| ToolCallRequest {
                id,
                name: "calculate".into(),
                arguments: json!({ "expression": arguments }).to_string(),
            })
            .collect(),
        false => Vec::new(),
    };
    let reply = LlmReply {
        content: content.to_string(),
        tool_calls,
        ..LlmReply::default()
    };
    if let Next::RunTools(calls) = machine.on_llm_reply(&reply, Utc::now()) {
        let results = calls
            .iter()
            .zip(outputs)
            .map(|(call, (result, error))| {
                inbound::tool_result(ToolCallResult {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: serde_json::from_str(&call.arguments).unwrap_or_default(),
                    success: error.is_empty(),
                    result: Some(json!({ result.clone(): [result] })),
                    error: (!error.is_empty()).then_some(error),
                    memo: None,
                    duration_ms: 1,
                })
            })
            .collect();
        machine.on_tool_results(results, Utc::now());
    }
    let records: Vec<RecursionRecord> = machine
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            DomainEvent::RecursionCompleted(record) => Some(record),
            _ => None,
        })
        .collect();
    records.into_iter().next().expect("the recursion completed")
}

/// Writes `record` (the machine's latest) as a step of `task_id` and checks that every
/// stored text equals what the machine holds.
async fn store_and_compare(
    pool: &PgPool,
    (task_id, owner): (Uuid, Uuid),
    machine: &Machine,
    record: RecursionRecord,
) {
    let checkpoint = serde_json::to_string(machine).expect("checkpoint");
    let plan = serde_json::to_string(machine.plan()).expect("plan");
    let progress = Progress::Checkpoint {
        iterations: 1,
        plan: plan.clone(),
        checkpoint: checkpoint.clone(),
    };
    let mut write = step_with(task_id, owner, 1, progress);
    write.records = vec![record.clone()];
    write.max_result_chars = usize::MAX;
    let payload = serde_json::to_string(&record).expect("event");
    let event = EventRow {
        seq: 1,
        event_id: Uuid::now_v7(),
        event_type: "recursion.completed",
        json: &payload,
    };
    let written = step::write(pool, &write, &[event]).await;
    assert!(matches!(written, Ok(true)), "{written:?} for {record:?}");
    type Stored = (
        String,
        String,
        String,
        Value,
        Option<String>,
        String,
        Value,
        Value,
    );
    let stored: Stored = sqlx::query_as(
        "SELECT r.observe, r.thought, r.abstract, r.output, r.error_log, t.checkpoint, \
                t.plan, e.payload \
         FROM recursions r JOIN tasks t USING (task_id) JOIN events e USING (task_id) \
         WHERE r.task_id = $1",
    )
    .bind(task_id)
    .fetch_one(pool)
    .await
    .expect("stored step");
    let held: Stored = (
        record.observe.clone(),
        record.thought.clone(),
        record.abstract_.clone(),
        record.output.clone(),
        record.error_log.clone(),
        checkpoint,
        serde_json::from_str(&plan).expect("plan"),
        serde_json::to_value(&record).expect("record"),
    );
    assert_eq!(stored, held);
    type Call = (String, String, Value, Option<Value>, Option<String>);
    let calls: Vec<Call> = sqlx::query_as(
        "SELECT tool_call_id, name, arguments, result, error FROM tool_calls \
         WHERE task_id = $1 ORDER BY id",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
    .expect("stored calls");
    let held: Vec<Call> = record
        .tool_call_results
        .iter()
        .map(|r| {
            let (id, name) = (r.tool_call_id.clone(), r.name.clone());
            (
                id,
                name,
                r.arguments.clone(),
                r.result.clone(),
                r.error.clone(),
            )
        })
        .collect();
    assert_eq!(calls, held);
    let ids: BTreeSet<&String> = calls.iter().map(|call| &call.0).collect();
    assert_eq!(ids.len(), calls.len(), "every call has an id of its own");
}

#[test]
fn any_unicode_from_a_model_or_a_tool_is_stored_as_the_machine_holds_it() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let env = runtime.block_on(TestEnv::without_worker(|_| {}));
    let pool = env.pool.clone();
    let (agent_id, owner) = (runtime.block_on(agent(&pool)), Uuid::now_v7());
    let config = Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&case(), |case| {
        runtime.block_on(async {
            let task_id = Uuid::now_v7();
            tasks::take_new(
                &pool,
                &new_task(task_id, agent_id),
                agent_id,
                owner,
                30.0,
                None,
            )
            .await
            .expect("take_new")
            .expect("agent");
            let mut machine = Machine::new(task_info(task_id, agent_id));
            let record = run_recursion(&mut machine, case);
            store_and_compare(&pool, (task_id, owner), &machine, record).await;
        });
        Ok(())
    });
    runtime.block_on(env.stop());
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A step with a NUL in each kind of column that holds outside text.
fn step_with_nul(task_id: Uuid, owner: Uuid) -> StepWrite {
    let progress = Progress::Checkpoint {
        iterations: 1,
        plan: r#"[{"step_id":"1\u0000"}]"#.into(),
        checkpoint: r#"{"note":"\u0000"}"#.into(),
    };
    let mut write = step_with(task_id, owner, 1, progress);
    let record = &mut write.records[0];
    record.thought = "a\0b".into();
    record.output = json!({"k\u{0}": "\u{0}"});
    record.tool_call_results[0].result = Some(json!("r\u{0}"));
    write.llm_rows[0].error = Some("provider said \0".into());
    write
}

#[tokio::test]
async fn a_nul_that_slipped_through_is_refused_then_stored_once_made_storable() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let (agent_id, owner, task_id) = (agent(pool).await, Uuid::now_v7(), Uuid::now_v7());
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
    let mut write = step_with_nul(task_id, owner);
    let refused = step::write(pool, &write, &[])
        .await
        .expect_err("NUL is refused");
    assert!(refuses_nul(&refused), "{refused}");
    assert!(write.make_storable(), "something had to change");
    assert!(!write.make_storable(), "once is enough");
    assert!(step::write(pool, &write, &[]).await.expect("stored"));
    let (thought, output, error): (String, Value, Option<String>) = sqlx::query_as(
        "SELECT r.thought, r.output, l.error FROM recursions r JOIN llm_calls l USING (task_id) \
         WHERE r.task_id = $1",
    )
    .bind(task_id)
    .fetch_one(pool)
    .await
    .expect("stored");
    assert_eq!(thought, "a\u{FFFD}b");
    assert_eq!(output, json!({"k\u{FFFD}": "\u{FFFD}"}));
    assert_eq!(error.as_deref(), Some("provider said \u{FFFD}"));
    assert!(storable::is_storable(&thought));
}

#[tokio::test]
async fn a_refused_step_names_what_it_could_not_store() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let (agent_id, owner, task_id) = (agent(pool).await, Uuid::now_v7(), Uuid::now_v7());
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
    sqlx::query("ALTER TABLE recursions ADD CONSTRAINT no_poison CHECK (thought <> 'poison')")
        .execute(pool)
        .await
        .expect("constraint");
    let mut write = step_with(task_id, owner, 3, Progress::Touch);
    write.records[0].thought = "poison".into();
    let err = step::write(pool, &write, &[]).await.expect_err("refused");
    assert!(!refuses_nul(&err) && !agentd::store::transient::sqlx_transient(&err));
    let refused = StepRefused::new(&write, err).to_string();
    assert!(
        refused.starts_with("PostgreSQL refused to store recursion 3"),
        "{refused}"
    );
    for named in ["table recursions", "constraint no_poison", "SQLSTATE 23514"] {
        assert!(refused.contains(named), "{refused}");
    }
}
