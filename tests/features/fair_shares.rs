//! Fair shares (CONTRACT v3 §15, issue 28 item 3) with the real worker, a fake LLM over
//! HTTP, RabbitMQ and PostgreSQL: a tenant never has more than `tenants.max_running` tasks
//! running, the tasks over it wait (`tenant_limit`, no lease, message acknowledged) and
//! start as slots free, so 1,000 tasks of one tenant do not hold up ten of another; and
//! within a tenant `high` priority starts first.
//!
//! Starts are measured in the database, not by timing: a trigger the test adds logs every
//! move of a task into `running` with its tenant's running count at that moment, the moves
//! of a tenant serialized by a lock of the test's own, so the log's order is the order of
//! the starts and its counts are exact.

use std::time::Duration;

use crate::support::harness::TestEnv;
use crate::support::words;
use agentd::scripted_model::ScriptedModel;
use serde_json::json;
use uuid::Uuid;

/// The start log: one row per move into `running`, in order, with the running count.
const START_LOG: &str = "
CREATE TABLE test_starts (
    n bigserial PRIMARY KEY,
    task_id uuid NOT NULL,
    tenant_id text NOT NULL,
    running bigint NOT NULL
);
CREATE FUNCTION test_log_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'running' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'running') THEN
        PERFORM pg_advisory_xact_lock(4242, hashtext(NEW.tenant_id));
        INSERT INTO test_starts (task_id, tenant_id, running)
        SELECT NEW.task_id, NEW.tenant_id, count(*) FROM tasks
        WHERE tenant_id = NEW.tenant_id AND status = 'running';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER test_log_start AFTER INSERT OR UPDATE OF status ON tasks
    FOR EACH ROW EXECUTE FUNCTION test_log_start();
";

/// How long the tasks of a test may take to start and end on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(180);

/// A worker running `concurrency` tasks at once (its prefetch) whose model answers at once
/// (`steps=0`), the start log installed.
async fn env_with(llm: &ScriptedModel, concurrency: u16) -> TestEnv {
    let base_url = llm.base_url();
    let env = TestEnv::without_worker(|s| {
        s.llm.base_url = base_url;
        s.worker.concurrency = concurrency;
    })
    .await;
    sqlx::raw_sql(START_LOG)
        .execute(&env.pool)
        .await
        .expect("the start log");
    env
}

/// An agent of `tenant`, the tenant held to `max_running` when given.
async fn agent_of(env: &TestEnv, tenant: &str, max_running: Option<i32>) -> Uuid {
    if let Some(max) = max_running {
        sqlx::query("INSERT INTO tenants (tenant_id, max_running) VALUES ($1, $2)")
            .bind(tenant)
            .bind(max)
            .execute(&env.pool)
            .await
            .expect("tenant");
    }
    let agent_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agents (agent_id, name, model, tenant_id) VALUES ($1, 'fair', 'fake-model', $2)",
    )
    .bind(agent_id)
    .bind(tenant)
    .execute(&env.pool)
    .await
    .expect("agent");
    agent_id
}

/// Publishes a task of `agent` (with `priority` when given); returns its id.
async fn publish(env: &TestEnv, agent: Uuid, input: &str, priority: Option<&str>) -> Uuid {
    let task_id = Uuid::now_v7();
    let mut body = json!({"task_id": task_id, "agent_id": agent, "input": input});
    if let Some(priority) = priority {
        body["priority"] = json!(priority);
    }
    env.publish_raw(body.to_string().as_bytes()).await;
    task_id
}

/// Waits until `query` (a count) reaches `at_least`.
async fn wait_count(env: &TestEnv, query: &str, bind: &str, at_least: i64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let count: i64 = sqlx::query_scalar(query)
            .bind(bind)
            .fetch_one(&env.pool)
            .await
            .expect("count");
        if count >= at_least {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{query} ({bind}) is {count}, not {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The start log of `tenant`: (task_id, running count), in start order.
async fn starts(env: &TestEnv, tenant: &str) -> Vec<(Uuid, i64)> {
    sqlx::query_as("SELECT task_id, running FROM test_starts WHERE tenant_id = $1 ORDER BY n")
        .bind(tenant)
        .fetch_all(&env.pool)
        .await
        .expect("starts")
}

/// Where in the whole log the `nth` (1-based) start of `tenant` is.
async fn position(env: &TestEnv, tenant: &str, nth: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT n FROM test_starts WHERE tenant_id = $1 ORDER BY n OFFSET $2 LIMIT 1",
    )
    .bind(tenant)
    .bind(nth - 1)
    .fetch_one(&env.pool)
    .await
    .expect("position")
}

/// A's limit: the flood runs this many tasks at once at most.
const FLOOD_LIMIT: i32 = 4;
const FLOOD: usize = 1000;
const FEW: usize = 10;

#[tokio::test]
async fn a_flood_of_one_tenant_does_not_hold_up_another_and_never_passes_its_limit() {
    let llm = words::start().await;
    let mut env = env_with(&llm, 8).await;
    let flooder = agent_of(&env, "flooder", Some(FLOOD_LIMIT)).await;
    let small = agent_of(&env, "small", None).await;
    env.spawn_worker();
    for i in 0..FLOOD {
        publish(&env, flooder, &format!("steps=0 flood {i}"), None).await;
    }
    let mut few = Vec::new();
    for i in 0..FEW {
        few.push(publish(&env, small, &format!("steps=0 few {i}"), None).await);
    }
    for task_id in &few {
        let task = env.wait_terminal_within(*task_id, PATIENCE).await;
        assert_eq!(task.status, "completed");
    }
    // The flood goes on until its hundredth task has started.
    let query = "SELECT count(*) FROM test_starts WHERE tenant_id = $1";
    wait_count(&env, query, "flooder", 100).await;

    let flood_starts = starts(&env, "flooder").await;
    let most = flood_starts.iter().map(|(_, running)| *running).max();
    assert_eq!(
        most,
        Some(i64::from(FLOOD_LIMIT)),
        "never more than max_running"
    );
    let started: std::collections::HashSet<Uuid> = flood_starts.iter().map(|(t, _)| *t).collect();
    assert_eq!(started.len(), flood_starts.len(), "each task started once");
    let last_of_few = position(&env, "small", FEW as i64).await;
    let hundredth = position(&env, "flooder", 100).await;
    eprintln!(
        "the ten of the small tenant started by start {last_of_few}, the flood's hundredth \
         was start {hundredth}; the flood ran {most:?} at most"
    );
    assert!(
        last_of_few < hundredth,
        "the ten started at {last_of_few}, the flood's hundredth at {hundredth}"
    );
    // The flood's tasks over the limit waited held: no lease, reason tenant_limit.
    let held: Vec<(Option<Uuid>, Option<String>)> = sqlx::query_as(
        "SELECT lease_owner, wait_reason FROM tasks WHERE tenant_id = 'flooder' \
         AND status = 'waiting' LIMIT 50",
    )
    .fetch_all(&env.pool)
    .await
    .expect("held");
    assert!(!held.is_empty());
    assert!(
        held.iter()
            .all(|(owner, reason)| owner.is_none() && reason.as_deref() == Some("tenant_limit"))
    );
    env.stop().await;
}

#[tokio::test]
async fn within_a_tenant_high_priority_starts_first_and_held_tasks_are_acknowledged() {
    // Prefetch 2: the first task holds one message; had the held tasks kept theirs, the
    // worker could not read past the next one.
    let llm = words::start().await;
    let mut env = env_with(&llm, 2).await;
    let agent = agent_of(&env, "one-at-a-time", Some(1)).await;
    env.spawn_worker();
    // The first task takes the tenant's one slot and stays in its model call.
    llm.hold();
    let first = publish(&env, agent, "steps=0 first", None).await;
    env.wait_status(first, "running").await;
    let mut normal = Vec::new();
    let mut high = Vec::new();
    for i in 0..3 {
        normal.push(publish(&env, agent, &format!("steps=0 normal {i}"), None).await);
        high.push(publish(&env, agent, &format!("steps=0 high {i}"), Some("high")).await);
    }
    let held = "SELECT count(DISTINCT e.task_id) FROM events e JOIN tasks t USING (task_id) \
                WHERE e.tenant_id = $1 AND e.type = 'task.waiting' AND t.status = 'waiting' \
                  AND t.wait_reason = 'tenant_limit' AND t.lease_owner IS NULL";
    wait_count(&env, held, "one-at-a-time", 6).await;
    // Their messages were acknowledged: all read, with a prefetch of 2.
    let channel = env.publisher.broker().channel().await.expect("channel");
    let queue = channel
        .queue_declare(
            env.settings.amqp.tasks_queue.as_str().into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .expect("the tasks queue");
    assert_eq!(queue.message_count(), 0);
    let events = env.stored_events(high[0]).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "task.waiting");
    assert_eq!(events[0]["data"]["reason"], "tenant_limit");

    llm.release();
    for task_id in normal.iter().chain(&high) {
        assert_eq!(
            env.wait_terminal_within(*task_id, PATIENCE).await.status,
            "completed"
        );
    }
    let order: Vec<Uuid> = starts(&env, "one-at-a-time")
        .await
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let expected: Vec<Uuid> = std::iter::once(first).chain(high).chain(normal).collect();
    assert_eq!(
        order, expected,
        "the first, then high in arrival order, then normal"
    );
    let most: i64 = sqlx::query_scalar("SELECT max(running) FROM test_starts")
        .fetch_one(&env.pool)
        .await
        .expect("max");
    assert_eq!(most, 1);
    env.stop().await;
}
