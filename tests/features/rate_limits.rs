//! Provider rate limits shared by every worker (CONTRACT §10) with three real workers,
//! RabbitMQ, PostgreSQL and a provider over HTTP that answers 429 above N requests per
//! window: configured at N, no 429 reaches a task and the workers together keep to the
//! limit; a 429 with Retry-After holds the whole bucket (a task waiting for a slot is
//! cancelled in `cancel.rs`); the whole wait, however long, is recorded in
//! `llm_calls.queued_ms` and `agentd_llm_throttled_milliseconds_total`, and does not count
//! against the recursion's timeout.
//!
//! `limit_throughput_with_200_tasks` (ignored: about 35 s) measures the throughput against
//! the limit: `cargo test --test features rate_limits -- --ignored --nocapture`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;
use crate::support::wait::{self, TASK_ENDS_WITHIN};
use agentd::core::rate_limit::RateLimit;
use agentd::scripted_model::{ModelReply, ScriptedModel, answer_reply};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A provider that allows `limit` requests per `window` (sliding) and answers 429 with
/// Retry-After 1 above it: a handler of the scripted model; every request's arrival is
/// recorded.
pub(super) struct Provider {
    limit: usize,
    window: Duration,
    accepted: Mutex<VecDeque<Instant>>,
    arrivals: Mutex<Vec<(Instant, bool)>>,
}

impl Provider {
    pub(super) async fn start(
        limit: usize,
        window: Duration,
        delay: Duration,
    ) -> (Arc<Self>, String) {
        let provider = Arc::new(Self {
            limit,
            window,
            accepted: Mutex::new(VecDeque::new()),
            arrivals: Mutex::new(Vec::new()),
        });
        let model = ScriptedModel::start().await.unwrap();
        let answering = Arc::clone(&provider);
        model.otherwise(move |_| answering.answer(delay));
        (provider, model.base_url())
    }

    /// Admits the request if the window has room: an answer after `delay`, else a 429.
    fn answer(&self, delay: Duration) -> ModelReply {
        let now = Instant::now();
        let allowed = {
            let mut accepted = self.accepted.lock().unwrap();
            while accepted.front().is_some_and(|t| now - *t >= self.window) {
                accepted.pop_front();
            }
            let allowed = accepted.len() < self.limit;
            if allowed {
                accepted.push_back(now);
            }
            allowed
        };
        self.arrivals.lock().unwrap().push((now, allowed));
        if !allowed {
            return ModelReply::status(429, "rate limit exceeded")
                .with_retry_after(RETRY_AFTER.as_secs());
        }
        answer_reply("ok").with_delay(delay)
    }

    pub(super) fn arrivals(&self) -> Vec<(Instant, bool)> {
        self.arrivals.lock().unwrap().clone()
    }

    fn refused(&self) -> usize {
        self.arrivals().iter().filter(|(_, ok)| !ok).count()
    }
}

/// An environment whose workers (`workers` of them, in this process) call `url` under
/// `limit`.
pub(super) async fn env_with(
    url: String,
    limit: Option<RateLimit>,
    workers: usize,
) -> (TestEnv, Vec<CancellationToken>) {
    let env = TestEnv::without_worker(move |settings| {
        settings.llm.base_url = url;
        settings.llm.limits = limit.into_iter().collect();
        settings.worker.concurrency = 16;
    })
    .await;
    let mut stops = Vec::new();
    for _ in 0..workers {
        let stop = CancellationToken::new();
        tokio::spawn(agentd::worker::run(env.settings.clone(), stop.clone()));
        stops.push(stop);
    }
    (env, stops)
}

/// A task under a shared limit waits for the others' slots: 40 tasks at 8 per 2 s take
/// about 10 s, and the last may wait for nearly all of them.
const LIMITED_TASK_ENDS_WITHIN: Duration = Duration::from_secs(120);

/// 40 requests at 8 per 2 s: the last can go no sooner than 8 s after the first (less
/// 100 ms for the clocks), and, paced well, not much later than twice that.
const FORTY_AT_LEAST: Duration = Duration::from_millis(7_900);
const FORTY_AT_MOST: Duration = Duration::from_secs(16);

/// The provider's Retry-After in the hold test, and the stretch after the first 429 in
/// which no request may arrive: from 300 ms (requests already on their way may still
/// come) to 900 ms (the hold ends at 1 s, less the jitter of the waiters).
const RETRY_AFTER: Duration = Duration::from_secs(1);
const HELD_FROM: Duration = Duration::from_millis(300);
const HELD_UNTIL: Duration = Duration::from_millis(900);

/// How often the hold test publishes a new task: often enough that, without the hold,
/// some would call the provider during its Retry-After.
const SUBMIT_EVERY: Duration = Duration::from_millis(100);

pub(super) fn limit(rpm: u32, window_secs: f64) -> RateLimit {
    RateLimit {
        model: "fake-*".into(),
        rpm: Some(rpm),
        tpm: None,
        window_secs,
    }
}

async fn run_tasks(env: &TestEnv, count: usize) -> Vec<Uuid> {
    let agent = env.agent(None, None).await;
    let mut tasks = Vec::new();
    for i in 0..count {
        tasks.push(env.submit(agent, &format!("limited task {i}")).await);
    }
    for task_id in &tasks {
        assert_eq!(
            env.wait_terminal_within(*task_id, LIMITED_TASK_ENDS_WITHIN)
                .await
                .status,
            "completed"
        );
    }
    tasks
}

#[tokio::test]
async fn three_workers_keep_together_to_the_limit_and_no_429_reaches_a_task() {
    // The provider takes 10 requests per 2 s; the configured limit is 8 per 2 s ("at or
    // below" the provider's): the two spare requests per window absorb the time between
    // taking a slot and reaching the provider, which on a machine loaded by other work
    // (CI here shares its two cores) exceeds the limiter's 250 ms margin at times.
    let window = Duration::from_secs(2);
    let (provider, url) = Provider::start(10, window, Duration::ZERO).await;
    let (env, stops) = env_with(url, Some(limit(8, 2.0)), 3).await;
    let tasks = run_tasks(&env, 40).await;
    let first = provider.arrivals()[0].0;
    let offsets: Vec<String> = provider
        .arrivals()
        .iter()
        .map(|(at, ok)| {
            format!(
                "{}{}",
                (*at - first).as_millis(),
                if *ok { "" } else { "!" }
            )
        })
        .collect();
    assert_eq!(
        provider.refused(),
        0,
        "the provider refused requests: {offsets:?}"
    );
    let arrivals = provider.arrivals();
    assert_eq!(arrivals.len(), 40);
    // 40 requests at 8 per 2 s: the last can go no sooner than 8 s after the first.
    let span = arrivals.last().unwrap().0 - arrivals[0].0;
    assert!(span >= FORTY_AT_LEAST, "40 requests in {span:?}");
    assert!(span < FORTY_AT_MOST, "40 requests took {span:?}");
    let (queued, max_queued): (i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE queued_ms > 0), max(queued_ms) FROM llm_calls \
         WHERE task_id = ANY($1)",
    )
    .bind(&tasks)
    .fetch_one(&env.pool)
    .await
    .expect("queued_ms");
    assert!(queued >= 20, "{queued} attempts waited for the limit");
    assert!(
        max_queued.unwrap() >= 3_000,
        "the longest wait: {max_queued:?} ms"
    );
    for stop in stops {
        stop.cancel();
    }
}

#[tokio::test]
async fn a_429_holds_the_whole_bucket_for_its_retry_after() {
    // The limit is set far above what the provider takes: its 429s must hold everyone.
    let (provider, url) = Provider::start(3, Duration::from_secs(60), Duration::ZERO).await;
    let (env, stops) = env_with(url, Some(limit(1000, 60.0)), 3).await;
    let agent = env.agent(None, None).await;
    // New tasks keep coming, one every 100 ms: without the hold they would call at once.
    let submitter = {
        let (publisher, queue) = (env.publisher.clone(), env.settings.amqp.tasks_queue.clone());
        tokio::spawn(async move {
            for i in 0..25 {
                let body = json!({"agent_id": agent, "input": format!("held task {i}")});
                publisher
                    .publish_task(&queue, body.to_string().as_bytes())
                    .await
                    .expect("publish");
                tokio::time::sleep(SUBMIT_EVERY).await;
            }
        })
    };
    // Wait until the first 429, then watch the hold it starts: the test is about what
    // happens during its Retry-After, so it lets that time pass (and half as much again).
    let first_refusal = wait::until("the provider refused", TASK_ENDS_WITHIN, || async {
        let arrivals = provider.arrivals().into_iter();
        arrivals.filter(|(_, ok)| !ok).map(|(at, _)| at).next()
    })
    .await;
    tokio::time::sleep(RETRY_AFTER + RETRY_AFTER / 2).await;
    // Requests already on their way when the first 429 came may still arrive; then nothing
    // until its Retry-After is over.
    let during: Vec<Duration> = provider
        .arrivals()
        .into_iter()
        .filter(|(at, _)| *at > first_refusal)
        .map(|(at, _)| at - first_refusal)
        .filter(|after| *after > HELD_FROM && *after < HELD_UNTIL)
        .collect();
    assert!(during.is_empty(), "requests during the hold: {during:?}");
    // Requests did come after the hold.
    let after = provider
        .arrivals()
        .into_iter()
        .filter(|(at, _)| *at > first_refusal + HELD_UNTIL)
        .count();
    assert!(after > 0, "nothing was sent after the hold");
    submitter.await.expect("submitter");
    for stop in stops {
        stop.cancel();
    }
}

/// The recursion timeout of [`a_wait_longer_than_a_recursion_is_recorded_whole`], well below
/// the wait for a slot (the window, 2 s, plus its 250 ms margin).
const SHORT_RECURSION_MS: u64 = 800;

#[tokio::test]
async fn a_wait_longer_than_a_recursion_is_recorded_whole() {
    // A bucket of its own, so that the counter holds this test's waits only.
    let bucket = RateLimit {
        model: "fake-mod*".into(),
        rpm: Some(1),
        tpm: None,
        window_secs: 2.0,
    };
    let metrics = agentd::metrics::install().expect("the metrics recorder");
    let (_provider, url) = Provider::start(100, Duration::from_secs(60), Duration::ZERO).await;
    let mut env = TestEnv::without_worker(move |settings| {
        settings.llm.base_url = url;
        settings.llm.limits = vec![bucket];
        settings.worker.recursion_timeout_ms = SHORT_RECURSION_MS;
    })
    .await;
    env.spawn_worker();
    let agent = env.agent(None, None).await;
    let first = env.submit(agent, "takes the slot").await;
    let second = env.submit(agent, "waits a whole window").await;
    for task_id in [first, second] {
        let task = env.wait_terminal(task_id).await;
        assert_eq!(task.status, "completed", "{:?}", task.error);
        // No recursion was spent (and cut short) on the wait.
        let errors: Vec<Option<String>> =
            sqlx::query_scalar("SELECT error_log FROM recursions WHERE task_id = $1")
                .bind(task_id)
                .fetch_all(&env.pool)
                .await
                .expect("recursions");
        assert_eq!(task.iterations, 1, "{task_id}: {errors:?}");
    }
    let waits: Vec<i64> = sqlx::query_scalar(
        "SELECT queued_ms FROM llm_calls WHERE task_id = ANY($1) ORDER BY queued_ms",
    )
    .bind([first, second])
    .fetch_all(&env.pool)
    .await
    .expect("queued_ms");
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(
        waits[1] >= 1_500 && waits[1] > 2 * SHORT_RECURSION_MS as i64,
        "the second task waited about 2 s for its slot, recorded {waits:?} ms"
    );
    let text = metrics.render();
    let counted: i64 = text
        .lines()
        .find(|line| {
            line.starts_with("agentd_llm_throttled_milliseconds_total{bucket=\"fake-mod*\"}")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no throttled counter for the bucket in:\n{text}"));
    assert_eq!(
        counted,
        waits.iter().sum::<i64>(),
        "the counter sums the waits"
    );
    env.stop().await;
}

#[tokio::test]
#[ignore = "about 35 s: measures throughput against the limit"]
async fn limit_throughput_with_200_tasks() {
    // The provider takes 50 requests per 10 s (5/s); the limit is set at that.
    let window = Duration::from_secs(10);
    let (provider, url) = Provider::start(50, window, Duration::from_millis(50)).await;
    let (env, stops) = env_with(url, Some(limit(50, 10.0)), 3).await;
    let started = Instant::now();
    run_tasks(&env, 200).await;
    let took = started.elapsed();
    let arrivals = provider.arrivals();
    let span = arrivals.last().unwrap().0 - arrivals[0].0;
    // The most a 50-per-10-s window allows for 200 requests: 50 at once, then 50 after
    // 10, 20 and 30 s.
    let ideal = Duration::from_secs(30);
    println!(
        "200 tasks, 3 workers, limit 50 per 10 s: span {:.2} s (ideal {:.0} s, {:.1} % slower), wall {:.2} s, 429s {}",
        span.as_secs_f64(),
        ideal.as_secs_f64(),
        (span.as_secs_f64() / ideal.as_secs_f64() - 1.0) * 100.0,
        took.as_secs_f64(),
        provider.refused()
    );
    assert_eq!(provider.refused(), 0);
    assert!(
        span.as_secs_f64() <= ideal.as_secs_f64() * 1.1,
        "span {span:?}"
    );
    for stop in stops {
        stop.cancel();
    }
}
