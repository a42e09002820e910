//! The time partitions of the trace tables against the real database (issue 29): the upkeep
//! driven by a clock the test sets, across a day boundary, with a task that runs across it
//! and keeps every row in its creation partition; concurrent upkeep; rows rescued from the
//! default partition; retention that drops whole partitions only when every task in them
//! has ended and aged; queries that read one partition; and the migration of a database
//! that already holds a trace, migrated up to the tenants (`partitions/migration.rs`).

mod migration;
mod steps;

use crate::support::harness::TestEnv;
use agentd::core::partitions::{Layout, Range};
use agentd::store::partitions::{self, TRACE_TABLES};
use agentd::store::prune::{self, PruneRequest};
use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgPool;
use uuid::Uuid;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("a test instant")
        .with_timezone(&Utc)
}

fn daily() -> Layout {
    Layout::parse("1d", 3).expect("daily")
}

fn midnight(at: DateTime<Utc>) -> DateTime<Utc> {
    daily().slot(at).expect("a slot").from
}

/// The ranges of `table`'s partitions (the default one left out).
async fn ranges(pool: &PgPool, table: &str) -> Vec<Range> {
    let mut conn = pool.acquire().await.expect("connection");
    let listed = partitions::list(&mut conn, table).await.expect("list");
    listed.into_iter().filter_map(|p| p.range).collect()
}

/// The partitions that hold `task_id`'s rows in `table`.
async fn homes(pool: &PgPool, table: &str, task_id: Uuid) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE task_id = $1 ORDER BY 1"
    ))
    .bind(task_id)
    .fetch_all(pool)
    .await
    .expect("homes")
}

async fn rows(pool: &PgPool, table: &str, task_id: Uuid) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE task_id = $1"))
        .bind(task_id)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// A task created at `created`, ended (`finished`) or running, with one recursion, tool
/// call, LLM attempt and request part and two events, written as agentd writes them: each
/// row with its task's creation time.
async fn task(pool: &PgPool, created: DateTime<Utc>, finished: Option<DateTime<Utc>>) -> Uuid {
    let task_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, input, status, created_at, finished_at) \
         VALUES ($1, 'x', CASE WHEN $3::timestamptz IS NULL THEN 'running' ELSE 'completed' END, \
                 $2, $3)",
    )
    .bind(task_id)
    .bind(created)
    .bind(finished)
    .execute(pool)
    .await
    .expect("task");
    sqlx::query(
        "WITH t AS (SELECT task_id, created_at FROM tasks WHERE task_id = $1), \
         r AS (INSERT INTO recursions (trace_id, task_id, iteration, status, started_at, \
                                       finished_at, task_created_at) \
               SELECT gen_random_uuid(), task_id, 1, 'done', now(), now(), created_at FROM t \
               RETURNING trace_id), \
         c AS (INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, success, \
                                       duration_ms, task_created_at) \
               SELECT $1, r.trace_id, 'call_1', 'calculate', true, 1, t.created_at FROM r, t), \
         l AS (INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, \
                                      latency_ms, task_created_at) \
               SELECT $1, r.trace_id, 1, 1, '200', 5, t.created_at FROM r, t), \
         p AS (INSERT INTO llm_request_parts (task_id, part_id, content, task_created_at) \
               SELECT $1, gen_random_uuid(), '{}', created_at FROM t) \
         INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, seq, gen_random_uuid(), 'task.started', '{}', t.created_at \
         FROM t, generate_series(1, 2) AS seq",
    )
    .bind(task_id)
    .execute(pool)
    .await
    .expect("trace rows");
    task_id
}

#[tokio::test]
async fn the_upkeep_crosses_midnight_and_a_task_keeps_its_rows_in_its_creation_partition() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let layout = daily();
    let before = at("2031-03-14T23:59:30Z");
    let made = partitions::maintain(pool, &layout, before)
        .await
        .expect("upkeep");
    assert_eq!(made.len(), 4 * TRACE_TABLES.len(), "{made:?}");
    assert!(made.contains(&"events_p20310314".to_owned()), "{made:?}");
    assert!(made.contains(&"llm_request_parts_p20310317".to_owned()));
    let again = partitions::maintain(pool, &layout, before).await;
    assert_eq!(again.expect("upkeep"), Vec::<String>::new(), "idempotent");

    // A task created ten seconds before midnight writes a step, the clock crosses midnight,
    // the upkeep runs, and the task writes its last step.
    let run = steps::TaskRun::start(pool, at("2031-03-14T23:59:50Z")).await;
    run.step(pool, 1, false).await;
    let after = at("2031-03-15T00:00:30Z");
    let made = partitions::maintain(pool, &layout, after)
        .await
        .expect("upkeep");
    let expected: Vec<String> = TRACE_TABLES
        .iter()
        .map(|t| format!("{t}_p20310318"))
        .collect();
    assert_eq!(made, expected, "one more day ahead, for every table");
    run.step(pool, 2, true).await;

    for table in TRACE_TABLES {
        assert_eq!(
            homes(pool, table, run.task_id).await,
            vec![format!("{table}_p20310314")],
            "every {table} row of the task lives in its creation partition"
        );
        let covered = ranges(pool, table).await;
        for day in 14..=18 {
            let from = at(&format!("2031-03-{day}T00:00:00Z"));
            assert!(covered.iter().any(|r| r.from == from), "{table} {day}");
        }
    }
    assert_eq!(rows(pool, "recursions", run.task_id).await, 2);
    assert_eq!(rows(pool, "events", run.task_id).await, 4);
    let events = agentd::store::events::list_after(pool, run.task_id, 0)
        .await
        .expect("events");
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4], "the replay read finds every event");
    let trace = agentd::store::trace::recursions(pool, run.task_id)
        .await
        .expect("trace");
    assert_eq!(trace.len(), 2);
    env.stop().await;
}

#[tokio::test]
async fn concurrent_upkeep_makes_every_partition_once() {
    let env = TestEnv::without_worker(|_| {}).await;
    let layout = daily();
    let now = at("2032-01-10T12:00:00Z");
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let pool = env.pool.clone();
            tokio::spawn(async move { partitions::maintain(&pool, &layout, now).await })
        })
        .collect();
    let mut made = Vec::new();
    for run in runs {
        made.extend(run.await.expect("joined").expect("every run succeeds"));
    }
    made.sort();
    let mut expected: Vec<String> = TRACE_TABLES
        .iter()
        .flat_map(|t| (10..=13).map(move |d| format!("{t}_p203201{d}")))
        .collect();
    expected.sort();
    assert_eq!(made, expected, "each partition made by exactly one run");
    env.stop().await;
}

#[tokio::test]
async fn rows_in_the_default_partition_get_a_partition_of_their_own() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    // No partition covers 2035: the rows land in the default partitions, and no insert fails.
    let stray = task(pool, at("2035-05-05T05:00:00Z"), None).await;
    for table in TRACE_TABLES {
        assert_eq!(
            homes(pool, table, stray).await,
            vec![format!("{table}_default")]
        );
    }
    let made = partitions::maintain(pool, &daily(), Utc::now())
        .await
        .expect("upkeep");
    for table in TRACE_TABLES {
        assert!(made.contains(&format!("{table}_p20350505")), "{made:?}");
        assert_eq!(
            homes(pool, table, stray).await,
            vec![format!("{table}_p20350505")]
        );
        let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}_default"))
            .fetch_one(pool)
            .await
            .expect("default");
        assert_eq!(left, 0, "{table}_default is empty again");
    }
    assert_eq!(
        rows(pool, "events", stray).await,
        2,
        "nothing lost in the move"
    );
    env.stop().await;
}

#[tokio::test]
async fn retention_drops_a_partition_only_once_every_task_in_it_has_ended_and_aged() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let now = Utc::now();
    let day = midnight(now) - TimeDelta::days(60);
    partitions::maintain(pool, &daily(), day)
        .await
        .expect("partitions 60 days ago");
    let h = TimeDelta::hours;
    let ended = task(pool, day + h(10), Some(day + h(11))).await;
    let running = task(pool, day + h(12), None).await;
    let next_day = task(pool, day + h(33), Some(day + h(34))).await;
    let recent = task(pool, day + h(57), Some(now - TimeDelta::days(10))).await;
    let name = |table: &str, d: i64| {
        let from = (day + TimeDelta::days(d)).format("%Y%m%d");
        format!("{table}_p{from}")
    };
    let request = PruneRequest::older_than(TimeDelta::days(30), ended_statuses(), 10);

    // Day 0 is held by the running task (its ended task goes row by row), day 2 by a task
    // that ended 10 days ago; days 1 and 3 (empty) go whole.
    let preview = prune::preview(pool, &request).await.expect("preview");
    let removed = prune::prune(pool, &request).await.expect("prune");
    assert_eq!(
        removed, preview,
        "the dry run counts what the prune removes"
    );
    assert_eq!(removed.partitions, 2);
    assert_eq!(removed.tasks, 2);
    assert_eq!((removed.recursions, removed.events), (2, 4));
    for (task_id, left) in [(ended, 0), (running, 1), (next_day, 0), (recent, 1)] {
        assert_eq!(rows(pool, "recursions", task_id).await, left, "{task_id}");
        assert_eq!(rows(pool, "tasks", task_id).await, left);
    }
    for table in TRACE_TABLES {
        let left = ranges(pool, table).await;
        let has = |d: i64| left.iter().any(|r| r.from == day + TimeDelta::days(d));
        assert!(has(0) && has(2), "{table}: held ranges stay");
        assert!(
            !has(1) && !has(3),
            "{table}: ranges of aged tasks are dropped"
        );
    }
    assert_eq!(
        homes(pool, "events", running).await,
        vec![name("events", 0)]
    );

    // The running task ends (long ago by now): the next prune drops its range whole.
    sqlx::query("UPDATE tasks SET status = 'failed', finished_at = $2 WHERE task_id = $1")
        .bind(running)
        .bind(day + h(40))
        .execute(pool)
        .await
        .expect("end");
    let removed = prune::prune(pool, &request).await.expect("prune");
    assert_eq!(
        (removed.partitions, removed.tasks, removed.events),
        (1, 1, 2)
    );
    assert!(ranges(pool, "events").await.iter().all(|r| r.from != day));
    assert_eq!(
        rows(pool, "recursions", recent).await,
        1,
        "within retention"
    );
    env.stop().await;
}

fn ended_statuses() -> Vec<String> {
    prune::ENDED_STATUSES
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

/// The plan of a read by task_id that names the partition key the way agentd's reads do
/// runs one partition of the many: the others are pruned at run time.
#[tokio::test]
async fn a_read_by_task_runs_on_its_partition_only() {
    let env = TestEnv::without_worker(|_| {}).await;
    let pool = &env.pool;
    let day = midnight(Utc::now()) - TimeDelta::days(5);
    partitions::cover(pool, &daily(), day, day + TimeDelta::days(4))
        .await
        .expect("partitions");
    let mut tasks = Vec::new();
    for d in 0..5 {
        tasks.push(task(pool, day + TimeDelta::days(d) + TimeDelta::hours(1), None).await);
    }
    let plan: serde_json::Value = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, FORMAT JSON) \
         SELECT seq, payload FROM events WHERE task_id = $1 AND seq > 0 \
           AND task_created_at = (SELECT created_at FROM tasks WHERE task_id = $1) \
         ORDER BY seq",
    )
    .bind(tasks[2])
    .fetch_one(pool)
    .await
    .expect("explain");
    let mut scans = Vec::new();
    collect_scans(&plan[0]["Plan"], &mut scans);
    let partitions_in_plan = scans
        .iter()
        .filter(|(r, _)| r.starts_with("events_"))
        .count();
    let run: Vec<&String> = scans
        .iter()
        .filter(|(r, loops)| r.starts_with("events_") && *loops > 0)
        .map(|(r, _)| r)
        .collect();
    assert!(partitions_in_plan > 5, "{scans:?}");
    let home = format!("events_p{}", (day + TimeDelta::days(2)).format("%Y%m%d"));
    assert_eq!(run, vec![&home], "only the task's partition is read");
    env.stop().await;
}

/// `(relation, actual loops)` of every scan in an EXPLAIN (ANALYZE, FORMAT JSON) plan.
fn collect_scans(node: &serde_json::Value, out: &mut Vec<(String, i64)>) {
    if let Some(relation) = node["Relation Name"].as_str() {
        out.push((
            relation.to_owned(),
            node["Actual Loops"].as_i64().unwrap_or(0),
        ));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        collect_scans(child, out);
    }
}
