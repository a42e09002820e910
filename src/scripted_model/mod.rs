//! The scripted model: an OpenAI-compatible endpoint over real HTTP that answers from a
//! script instead of a language model. It is the other end of `llm/`'s client, so the
//! worker's requests, retries, streams and accounting run exactly as against a provider.
//! `agentd dev` serves the [`demo`] script with it, the end-to-end bench the [`steps`]
//! script, and the integration tests script it per test.
//!
//! It serves `POST /v1/chat/completions` (plain JSON, or Server-Sent Events for
//! `"stream": true`) and records every request before answering ([`ModelRequest`], which
//! also reads the state snapshot the same way for every script). A request is answered by
//! the first route whose marker occurs in its user input (`messages[0].content`), in the
//! order the routes were added: a queue of replies consumed in order ([`ScriptedModel::script`])
//! or a handler that computes the reply from the request ([`ScriptedModel::handle`]); else
//! by the handler for every other input ([`ScriptedModel::otherwise`]). An exhausted queue
//! answers 500 `scripted model: script exhausted`, an input nothing matches 500
//! `scripted model: no script for this input`, a body that is not JSON 400. Replies can
//! carry any status, headers (Retry-After), a delay, a broken or endless stream
//! ([`ModelReply`]); while the model is held ([`ScriptedModel::hold`]) no reply leaves.

pub mod demo;
mod reply;
mod request;
mod seed;
mod sse;
pub mod steps;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use reply::{ModelReply, TRACE_ID_PLACEHOLDER, tool_call};
pub use request::{ModelRequest, Snapshot};
pub use seed::{Seed, answer_reply, call_tool_reply, plan_reply, reflect_reply, seed_object};
pub use sse::{ARGUMENT_PIECE, CONTENT_PIECE, StreamEnd};

/// A reply computed from the request.
pub type Handler = Arc<dyn Fn(&ModelRequest) -> ModelReply + Send + Sync>;

/// Where and how the model serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The address to bind (`127.0.0.1:0` for a free port).
    pub addr: String,
    /// Whether every request is kept for [`ScriptedModel::requests`]: yes for tests; no for
    /// the demo and the bench, which serve for long and only need the counts.
    pub record_requests: bool,
    /// Serving stops when this fires (never, by default).
    pub shutdown: CancellationToken,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            addr: "127.0.0.1:0".to_owned(),
            record_requests: true,
            shutdown: CancellationToken::new(),
        }
    }
}

/// The running model. Cheap to clone; all clones share the routes and the recordings.
#[derive(Clone)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    record_requests: bool,
    routes: Mutex<Vec<Route>>,
    otherwise: Mutex<Option<Handler>>,
    requests: Mutex<Vec<ModelRequest>>,
    /// While true, replies wait (after their delay) until it is false again.
    held: tokio::sync::watch::Sender<bool>,
    answered: AtomicU64,
    unreadable: AtomicU64,
}

struct Route {
    marker: String,
    then: Then,
}

enum Then {
    Queue(VecDeque<ModelReply>),
    Handle(Handler),
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedModel {
    /// Serves on a free port of 127.0.0.1, recording every request, until the process ends;
    /// ready when this returns.
    pub async fn start() -> anyhow::Result<ScriptedModel> {
        Self::start_with(ServeOptions::default()).await
    }

    /// Binds `options.addr` and serves in a task of the current runtime until
    /// `options.shutdown` fires; ready when this returns.
    pub async fn start_with(options: ServeOptions) -> anyhow::Result<ScriptedModel> {
        let listener = tokio::net::TcpListener::bind(&options.addr)
            .await
            .with_context(|| format!("binding the scripted model to {}", options.addr))?;
        let addr = listener
            .local_addr()
            .context("the scripted model's address")?;
        let inner = Arc::new(Inner {
            addr,
            record_requests: options.record_requests,
            routes: Mutex::new(Vec::new()),
            otherwise: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            held: tokio::sync::watch::Sender::new(false),
            answered: AtomicU64::new(0),
            unreadable: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(Arc::clone(&inner));
        let shutdown = options.shutdown;
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
            if let Err(err) = served {
                tracing::warn!(error = %err, "the scripted model stopped");
            }
        });
        Ok(ScriptedModel { inner })
    }

    /// The `/v1` root to use as `llm.base_url`: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.inner.addr)
    }

    /// Scripts the replies for requests whose user input contains `marker`, consumed in
    /// order. Scripting a marker again appends to its queue.
    pub fn script(&self, marker: &str, replies: Vec<ModelReply>) {
        let mut routes = lock(&self.inner.routes);
        let queue = routes.iter_mut().find_map(|route| match &mut route.then {
            Then::Queue(queue) if route.marker == marker => Some(queue),
            _ => None,
        });
        match queue {
            Some(queue) => queue.extend(replies),
            None => routes.push(Route {
                marker: marker.to_owned(),
                then: Then::Queue(replies.into()),
            }),
        }
    }

    /// Answers every request whose user input contains `marker` with `handler`'s reply.
    pub fn handle(
        &self,
        marker: &str,
        handler: impl Fn(&ModelRequest) -> ModelReply + Send + Sync + 'static,
    ) {
        lock(&self.inner.routes).push(Route {
            marker: marker.to_owned(),
            then: Then::Handle(Arc::new(handler)),
        });
    }

    /// Answers every request no route matches with `handler`'s reply (replacing an earlier
    /// one).
    pub fn otherwise(&self, handler: impl Fn(&ModelRequest) -> ModelReply + Send + Sync + 'static) {
        *lock(&self.inner.otherwise) = Some(Arc::new(handler));
    }

    /// Every request received, in arrival order (none unless `record_requests`).
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.inner.requests).clone()
    }

    /// The recorded requests whose user input contains `marker`, in arrival order.
    pub fn requests_for(&self, marker: &str) -> Vec<ModelRequest> {
        self.requests_where(|r| r.user_input().contains(marker))
    }

    /// The recorded requests `keep` accepts, in arrival order.
    pub fn requests_where(&self, keep: impl Fn(&ModelRequest) -> bool) -> Vec<ModelRequest> {
        lock(&self.inner.requests)
            .iter()
            .filter(|r| keep(r))
            .cloned()
            .collect()
    }

    /// How many scripted replies are still unconsumed for `marker`.
    pub fn remaining(&self, marker: &str) -> usize {
        lock(&self.inner.routes)
            .iter()
            .find_map(|route| match &route.then {
                Then::Queue(queue) if route.marker == marker => Some(queue.len()),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// From now on no reply is sent (requests are still received and recorded) until
    /// [`ScriptedModel::release`]: a deterministic "tasks are still running" for a test
    /// that breaks something meanwhile.
    pub fn hold(&self) {
        self.inner.held.send_replace(true);
    }

    /// Sends the held replies and stops holding.
    pub fn release(&self) {
        self.inner.held.send_replace(false);
    }

    /// Requests answered with a 2xx so far.
    pub fn answered(&self) -> u64 {
        self.inner.answered.load(Ordering::Relaxed)
    }

    /// Requests whose body was not JSON (answered 400).
    pub fn unreadable(&self) -> u64 {
        self.inner.unreadable.load(Ordering::Relaxed)
    }

    /// The reply the routes give `request`.
    fn reply_to(&self, request: &ModelRequest) -> ModelReply {
        let input = request.user_input();
        let handler = {
            let mut routes = lock(&self.inner.routes);
            let Some(route) = routes.iter_mut().find(|r| input.contains(&r.marker)) else {
                drop(routes);
                return match lock(&self.inner.otherwise).clone() {
                    Some(handler) => handler(request),
                    None => ModelReply::status(500, "scripted model: no script for this input"),
                };
            };
            match &mut route.then {
                Then::Queue(queue) => {
                    return queue.pop_front().unwrap_or_else(|| {
                        ModelReply::status(500, "scripted model: script exhausted")
                    });
                }
                Then::Handle(handler) => Arc::clone(handler),
            }
        };
        handler(request)
    }
}

async fn chat(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<Value>(&body).ok();
    let readable = parsed.is_some();
    let request = ModelRequest {
        body: parsed.unwrap_or_else(|| Value::String(String::from_utf8_lossy(&body).into_owned())),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        bytes: body.to_vec(),
    };
    if inner.record_requests {
        lock(&inner.requests).push(request.clone());
    }
    let model = ScriptedModel {
        inner: Arc::clone(&inner),
    };
    let reply = if readable {
        model.reply_to(&request)
    } else {
        inner.unreadable.fetch_add(1, Ordering::Relaxed);
        ModelReply::status(400, "scripted model: request body is not JSON")
    };
    if let Some(delay) = reply.delay() {
        tokio::time::sleep(delay).await;
    }
    let _ = inner.held.subscribe().wait_for(|held| !*held).await;
    if (200..300).contains(&reply.status_code()) {
        inner.answered.fetch_add(1, Ordering::Relaxed);
    }
    reply.into_response_for(&request)
}
