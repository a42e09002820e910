//! The gateway's bounds: an event stream reads stored events in pages and queues a bounded
//! number of bytes for its client, so a reader that does not read holds little and still
//! gets every event; a connection beyond `gateway.max_connections` is refused and its slot
//! comes back when one closes; a client that does not send its request head within
//! `gateway.header_read_timeout_secs` is disconnected, while an open stream lives on;
//! `GET /v1/tasks/{id}` pages its recursions and cuts oversized fields.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::gateway::{Gateway, SseStream};
use crate::support::harness::TestEnv;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use uuid::Uuid;

use super::assert_gapless_from;

/// How long a test waits for the gateway to reach the state it checks (2 cores, loaded).
const SETTLE: Duration = Duration::from_secs(20);

/// Waits until `counter` satisfies `ready`; panics after [`SETTLE`].
async fn wait_for(what: &str, counter: &AtomicU64, ready: impl Fn(u64) -> bool) {
    let started = Instant::now();
    while !ready(counter.load(Ordering::Relaxed)) {
        assert!(
            started.elapsed() < SETTLE,
            "{what}: {}",
            counter.load(Ordering::Relaxed)
        );
        tokio::time::sleep(crate::support::wait::POLL).await;
    }
}

/// An ended task with `count` stored events of about `size` bytes each, the last terminal.
async fn task_with_big_events(env: &TestEnv, count: i64, size: i32) -> Uuid {
    let task_id = Uuid::now_v7();
    sqlx::query("INSERT INTO tasks (task_id, input, status) VALUES ($1, 'big', 'completed')")
        .bind(task_id)
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, g, gen_random_uuid(), kind, jsonb_build_object( \
             'event_id', gen_random_uuid(), 'task_id', $1, 'agent_id', NULL, 'seq', g, \
             'type', kind, 'trace_id', NULL, 'iteration', 1, 'ts', '2026-11-26T00:00:00Z', \
             'data', jsonb_build_object('content', repeat('x', $3), 'attempt', 1)), \
             (SELECT created_at FROM tasks WHERE task_id = $1) \
         FROM generate_series(1, $2::bigint) AS g, \
              LATERAL (SELECT CASE WHEN g = $2 THEN 'task.completed' ELSE 'llm.delta' END) \
              AS k (kind)",
    )
    .bind(task_id)
    .bind(count)
    .bind(size)
    .execute(&env.pool)
    .await
    .unwrap();
    task_id
}

#[tokio::test]
async fn a_reader_that_does_not_read_holds_a_page_and_a_bounded_queue() {
    const EVENTS: i64 = 300;
    const BOUND: usize = 128 * 1024;
    let env = TestEnv::without_worker(|s| {
        s.gateway.stream_page_bytes = BOUND;
        s.gateway.stream_buffer_bytes = BOUND;
    })
    .await;
    let gateway = Gateway::start_with(env.settings.clone(), &[]).await;
    // 300 events of 64 KiB: about 19 MiB, more than the sockets on both sides can hold.
    let task_id = task_with_big_events(&env, EVENTS, 64 * 1024).await;
    let stalled = gateway
        .get(&format!("/v1/tasks/{task_id}/events"))
        .send()
        .await
        .expect("event stream");
    assert_eq!(stalled.status(), 200);
    let streams = &gateway.observed.streams;
    wait_for("the follower waits for its reader", &streams.waits, |n| {
        n >= 1
    })
    .await;
    let read = streams.events_read.load(Ordering::Relaxed);
    assert!(
        read < EVENTS as u64,
        "{read} of {EVENTS} events read while the reader stalls"
    );
    let peak = streams.peak_queued_bytes.load(Ordering::Relaxed);
    assert!(peak as usize <= BOUND, "{peak} bytes queued for one client");

    // Reading on gets every event, in order, once; so does resuming by seq.
    let events = SseStream::new(stalled).until_terminal().await;
    assert_eq!(events.len() as i64, EVENTS);
    assert_gapless_from(&events, 1);
    let tail = gateway
        .events(task_id, Some(EVENTS - 2))
        .await
        .until_terminal()
        .await;
    assert_gapless_from(&tail, EVENTS - 1);
    let pages = streams.pages_read.load(Ordering::Relaxed);
    assert!(
        pages >= 2 * EVENTS as u64 / 3,
        "{pages} pages: one or two events each"
    );
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused_until_one_closes() {
    let env = TestEnv::without_worker(|s| {
        s.gateway.max_connections = 2;
        s.gateway.header_read_timeout_secs = 60;
    })
    .await;
    let gateway = Gateway::start_with(env.settings.clone(), &[]).await;
    let addr = gateway.base.trim_start_matches("http://").to_owned();
    let first = TcpStream::connect(&addr).await.unwrap();
    let _second = TcpStream::connect(&addr).await.unwrap();
    let connections = &gateway.observed.connections;
    wait_for("two open connections", &connections.open, |n| n == 2).await;

    let refused = reqwest::Client::new()
        .get(gateway.url("/healthz"))
        .send()
        .await
        .expect("an answer, not a hang");
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = refused.json().await.expect("JSON error");
    assert_eq!(body["error"]["code"], "too_many_connections");
    assert_eq!(connections.refused.load(Ordering::Relaxed), 1);

    drop(first);
    wait_for("a slot comes back", &connections.open, |n| n == 1).await;
    let served = reqwest::Client::new()
        .get(gateway.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn a_request_head_not_sent_in_time_is_disconnected_but_streams_live_on() {
    let env = TestEnv::without_worker(|s| s.gateway.header_read_timeout_secs = 1).await;
    let gateway = Gateway::start_with(env.settings.clone(), &[]).await;
    let addr = gateway.base.trim_start_matches("http://").to_owned();
    let mut half_open = TcpStream::connect(&addr).await.unwrap();
    half_open
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: agentd\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(SETTLE, half_open.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the half-open request is still open after {SETTLE:?}"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    wait_for(
        "no connection left",
        &gateway.observed.connections.open,
        |n| n == 0,
    )
    .await;

    // An event stream (its head sent at once) outlives the header timeout: two heartbeats
    // a second apart arrive on it.
    let task_id = Uuid::now_v7();
    sqlx::query("INSERT INTO tasks (task_id, input, status) VALUES ($1, 'idle', 'running')")
        .bind(task_id)
        .execute(&env.pool)
        .await
        .unwrap();
    let mut stream = gateway
        .get(&format!("/v1/tasks/{task_id}/events"))
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while text.matches(": heartbeat").count() < 2 {
        let chunk = tokio::time::timeout(SETTLE, stream.chunk()).await;
        let chunk = chunk.expect("a heartbeat").expect("the stream is open");
        text.push_str(&String::from_utf8_lossy(&chunk.expect("not ended")));
    }
    gateway.stop().await;
    env.stop().await;
}

/// A task with `recursions` recursions (a tool call and an LLM attempt each, the third
/// with a 200,000-character thought), a tool call of a recursion still open, and a huge
/// answer.
async fn task_with_a_long_trace(env: &TestEnv, recursions: i32) -> Uuid {
    let task_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, input, status, answer) \
         VALUES ($1, 'long trace', 'running', repeat('a', 300000))",
    )
    .bind(task_id)
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "WITH r AS ( \
             INSERT INTO recursions (trace_id, task_id, iteration, thought, output, status, \
                                     started_at, finished_at, task_created_at) \
             SELECT gen_random_uuid(), $1, i, CASE WHEN i = 3 THEN repeat('t', 200000) \
                    ELSE 'short' END, jsonb_build_object('i', i), 'done', now(), now(), \
                    (SELECT created_at FROM tasks WHERE task_id = $1) \
             FROM generate_series(1, $2) AS i \
             RETURNING trace_id, iteration, task_created_at), \
         t AS ( \
             INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, \
                                     success, result, duration_ms, task_created_at) \
             SELECT $1, trace_id, 'call_' || iteration, 'calculate', '{}', true, \
                    to_jsonb(iteration), 1, task_created_at FROM r RETURNING 1) \
         INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms, \
                                task_created_at) \
         SELECT $1, trace_id, iteration, 1, '200', 5, task_created_at FROM r",
    )
    .bind(task_id)
    .bind(recursions)
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, \
                                 duration_ms, task_created_at) \
         SELECT $1, gen_random_uuid(), 'call_open', 'calculate', '{}', NULL, NULL, created_at \
         FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .execute(&env.pool)
    .await
    .unwrap();
    task_id
}

#[tokio::test]
async fn the_trace_is_paged_and_long_fields_are_cut() {
    let env = TestEnv::without_worker(|s| {
        s.gateway.trace_page_recursions = 2;
        s.gateway.max_field_chars = 1000;
    })
    .await;
    let gateway = Gateway::start_with(env.settings.clone(), &[]).await;
    let task_id = task_with_a_long_trace(&env, 5).await;
    let path = format!("/v1/tasks/{task_id}");
    let mut pages = Vec::new();
    let mut after = 0;
    loop {
        let page = gateway
            .get_json(&format!("{path}?after_iteration={after}"), 200)
            .await;
        let next = page["next_after_iteration"].as_i64();
        pages.push(page);
        match next {
            Some(next) => after = next,
            None => break,
        }
    }
    let iterations = |page: &serde_json::Value, list: &str, field: &str| -> Vec<String> {
        page[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row[field].to_string())
            .collect()
    };
    let recursions: Vec<Vec<String>> = pages
        .iter()
        .map(|p| iterations(p, "recursions", "iteration"))
        .collect();
    assert_eq!(recursions, [vec!["1", "2"], vec!["3", "4"], vec!["5"]]);
    let calls: Vec<Vec<String>> = pages
        .iter()
        .map(|p| iterations(p, "tool_calls", "tool_call_id"))
        .collect();
    assert_eq!(
        calls,
        [
            vec!["\"call_1\"", "\"call_2\""],
            vec!["\"call_3\"", "\"call_4\""],
            vec!["\"call_5\"", "\"call_open\""]
        ],
        "tool calls go with their recursion; the open one with the last page"
    );
    let attempts: Vec<usize> = pages
        .iter()
        .map(|p| p["llm_calls"].as_array().unwrap().len())
        .collect();
    assert_eq!(attempts, [2, 2, 1]);

    let thought = pages[1]["recursions"][0]["thought"].as_str().unwrap();
    assert!(
        thought.ends_with("…[truncated: 1000 of 200000 chars shown]"),
        "{}",
        &thought[thought.len().saturating_sub(60)..]
    );
    assert_eq!(
        thought.chars().count(),
        1000 + "…[truncated: 1000 of 200000 chars shown]".chars().count()
    );
    let answer = pages[0]["task"]["answer"].as_str().unwrap();
    assert!(answer.ends_with("…[truncated: 1000 of 300000 chars shown]"));
    assert_eq!(
        pages[0]["recursions"][0]["output"],
        serde_json::json!({"i": 1})
    );

    let limited = gateway.get_json(&format!("{path}?limit=1"), 200).await;
    assert_eq!(limited["next_after_iteration"], 1);
    let too_many = gateway.get_json(&format!("{path}?limit=3"), 422).await;
    assert_eq!(too_many["error"]["code"], "invalid_parameter");
    gateway.stop().await;
    env.stop().await;
}
