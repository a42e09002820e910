//! The gateway's bounds: an event stream reads stored events in pages and queues a bounded
//! number of bytes for its client, so a reader that does not read holds little and still
//! gets every event; a connection beyond `gateway.max_connections` is refused and its slot
//! comes back when one closes; a client that does not send its request head within
//! `gateway.header_read_timeout_secs` is disconnected, while an open stream lives on;
//! `GET /v1/tasks/{id}` pages its recursions and cuts oversized fields.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::gateway::{Gateway, SseStream};
use support::harness::TestEnv;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use uuid::Uuid;

use crate::{assert_gapless_from, support};

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
        tokio::time::sleep(Duration::from_millis(20)).await;
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
        "INSERT INTO events (task_id, seq, event_id, type, payload) \
         SELECT $1, g, gen_random_uuid(), kind, jsonb_build_object( \
             'event_id', gen_random_uuid(), 'task_id', $1, 'agent_id', NULL, 'seq', g, \
             'type', kind, 'trace_id', NULL, 'iteration', 1, 'ts', '2026-11-26T00:00:00Z', \
             'data', jsonb_build_object('content', repeat('x', $3), 'attempt', 1)) \
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
