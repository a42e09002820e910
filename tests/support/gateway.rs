//! The gateway (`agentd::gateway::bind_observed`) running in the test's process on 127.0.0.1:0 next
//! to a [`TestEnv`]'s worker, an HTTP client that adds the bearer token, and a small reader
//! of Server-Sent Events that also counts comment lines (heartbeats).

use agentd::config::Secret;
use agentd::config::Settings;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::harness::TestEnv;
use super::wait;

/// A running gateway.
pub struct Gateway {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The token sent by [`Gateway::get`] and [`Gateway::post`], if any.
    pub token: Option<String>,
    pub client: reqwest::Client,
    /// The gateway's counters (connections, event streams).
    pub observed: agentd::gateway::Observed,
    stop: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Gateway {
    /// Starts a gateway on the env's database and broker names; `tokens` configures auth
    /// (the first one is sent by the helpers). Heartbeats every second.
    pub async fn start(env: &TestEnv, tokens: &[&str]) -> Gateway {
        Self::start_with(env.settings.clone(), tokens).await
    }

    /// Like [`Gateway::start`] with explicit settings.
    pub async fn start_with(mut settings: Settings, tokens: &[&str]) -> Gateway {
        settings.gateway.bind = "127.0.0.1:0".to_owned();
        settings.gateway.tokens = tokens.iter().map(|t| Secret::from(*t)).collect();
        settings.gateway.heartbeat_secs = 1;
        let stop = CancellationToken::new();
        let (addr, observed, serving) = agentd::gateway::bind_observed(settings, stop.clone())
            .await
            .expect("the gateway binds");
        Gateway {
            base: format!("http://{addr}"),
            token: tokens.first().map(|t| (*t).to_owned()),
            client: reqwest::Client::new(),
            observed,
            stop,
            handle: tokio::spawn(serving),
        }
    }

    /// The absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// GET with the token.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorized(self.client.get(self.url(path)))
    }

    /// POST with the token.
    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorized(self.client.post(self.url(path)))
    }

    /// PUT `body`, expecting `status`; returns the JSON body.
    pub async fn put_json(&self, path: &str, body: &Value, status: u16) -> Value {
        let request = self.authorized(self.client.put(self.url(path)));
        expect_json(request.json(body).send().await, status).await
    }

    /// GET, expecting `status`; returns the JSON body.
    pub async fn get_json(&self, path: &str, status: u16) -> Value {
        expect_json(self.get(path).send().await, status).await
    }

    /// POST `body`, expecting `status`; returns the JSON body.
    pub async fn post_json(&self, path: &str, body: &Value, status: u16) -> Value {
        expect_json(self.post(path).json(body).send().await, status).await
    }

    /// POST /v1/tasks for `agent_id` with `input`; returns the task id.
    pub async fn submit(&self, agent_id: Uuid, input: &str) -> Uuid {
        let body = serde_json::json!({"agent_id": agent_id, "input": input});
        let accepted = self.post_json("/v1/tasks", &body, 202).await;
        accepted["task_id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .expect("task_id in the 202")
    }

    /// Opens a task's event stream, after `last_event_id` when given.
    pub async fn events(&self, task_id: Uuid, last_event_id: Option<i64>) -> SseStream {
        let mut request = self.get(&format!("/v1/tasks/{task_id}/events"));
        if let Some(seq) = last_event_id {
            request = request.header("Last-Event-ID", seq.to_string());
        }
        let response = request.send().await.expect("event stream request");
        assert_eq!(response.status(), 200, "event stream status");
        SseStream::new(response)
    }

    /// Stops the gateway; it must end cleanly within [`wait::WORKER_STOPS_WITHIN`] (it
    /// drains its connections as a worker drains its tasks).
    pub async fn stop(self) {
        self.stop.cancel();
        let result = tokio::time::timeout(wait::WORKER_STOPS_WITHIN, self.handle)
            .await
            .expect("the gateway stops in time")
            .expect("gateway task");
        result.expect("the gateway ended without error");
    }
}

/// Asserts the status of a response and returns its JSON body (Null when empty).
pub async fn expect_json(response: reqwest::Result<reqwest::Response>, status: u16) -> Value {
    let response = response.expect("request sent");
    let actual = response.status().as_u16();
    let text = response.text().await.expect("response body");
    assert_eq!(actual, status, "unexpected status; body: {text}");
    match text.is_empty() {
        true => Value::Null,
        false => serde_json::from_str(&text).expect("JSON body"),
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// `data` as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }

    /// `id` as a seq.
    pub fn seq(&self) -> i64 {
        self.id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .expect("numeric id")
    }

    /// Whether this is task.completed, task.failed or task.cancelled.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.event.as_deref(),
            Some("task.completed" | "task.failed" | "task.cancelled")
        )
    }
}

/// Reads events off a `text/event-stream` response.
pub struct SseStream {
    body: BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buffer: Vec<u8>,
    /// Comment lines seen so far (heartbeats).
    pub comments: usize,
}

impl SseStream {
    /// Wraps a response whose body is an event stream.
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            body: response.bytes_stream().boxed(),
            buffer: Vec::new(),
            comments: 0,
        }
    }

    /// The next event; None when the stream ended. Panics after
    /// [`wait::TASK_ENDS_WITHIN`] without one (a stream may wait for a whole task).
    pub async fn next(&mut self) -> Option<SseEvent> {
        tokio::time::timeout(wait::TASK_ENDS_WITHIN, self.next_event())
            .await
            .expect("an event in time")
    }

    async fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = self.parse(&String::from_utf8_lossy(&block)) {
                    return Some(event);
                }
                continue;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(chunk.as_ref()),
                Some(Err(err)) => panic!("event stream failed: {err}"),
                None => return None,
            }
        }
    }

    fn parse(&mut self, block: &str) -> Option<SseEvent> {
        let mut event = SseEvent::default();
        let mut data = Vec::new();
        for line in block.lines() {
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => event.id = Some(value.to_owned()),
                "event" => event.event = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                _ => {}
            }
        }
        if data.is_empty() {
            return None;
        }
        event.data = data.join("\n");
        Some(event)
    }

    /// Events until the terminal one (included); then asserts that the stream ends.
    pub async fn until_terminal(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            let terminal = event.is_terminal();
            events.push(event);
            if terminal {
                assert!(
                    self.next().await.is_none(),
                    "the stream ends after the terminal event"
                );
                return events;
            }
        }
        panic!("the stream ended before a terminal event: {events:#?}");
    }
}
