//! `agentd serve`: the HTTP interface for front ends, a separate process from the worker.
//!
//! It publishes tasks to the tasks queue like any producer, streams a task's progress
//! events as Server-Sent Events (stored ones from PostgreSQL, then live ones from one
//! subscription to the events exchange per process), serves tasks with their traces,
//! agents and their history, the OpenAPI document and the live trace page.
//!
//! - [`routes`]: the `/v1` JSON API; [`sse`]: the event stream; [`hub`]: the fan-out of
//!   the events subscription; [`auth`]: bearer tokens and the loopback rule;
//!   [`errors`]: the JSON error shape; [`openapi`]: `/openapi.json`; [`page`]: `/`;
//!   [`serve`]: the server loop with its connection cap and header-read timeout;
//!   [`reads`]: read-your-writes when reads go to a read replica (`database.read_url`).
//!
//! [`bind`] connects and binds, then returns the address and the serving future, so tests
//! run the gateway in process on `127.0.0.1:0` ([`bind_observed`] also hands out the
//! counters of [`Observed`]); [`run`] is bind-then-serve.

pub mod access;
pub mod auth;
pub mod errors;
pub mod hub;
pub mod openapi;
pub mod page;
pub mod reads;
pub mod routes;
pub mod serve;
pub mod sse;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request, header};
use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use axum::routing::get;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

use crate::amqp::{self, Publisher};
use crate::config::Secret;
use crate::config::{GatewaySettings, Settings};
use crate::store;
use hub::Hub;

/// How long the events pump gets to stop once the server has.
const DRAIN: Duration = Duration::from_secs(5);

/// Settings that make the gateway refuse to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "gateway.bind {bind:?} is not a loopback address ({addr}) and gateway.tokens is empty: \
         configure bearer tokens (gateway.tokens, or AGENTD__GATEWAY__TOKENS=token1,token2), \
         create a scoped one (agentd token create) or bind a loopback address such as \
         127.0.0.1:8787"
    )]
    OpenWithoutTokens { bind: String, addr: SocketAddr },
    #[error("gateway.bind {0:?} does not resolve to an address")]
    Unresolvable(String),
    #[error("gateway.{0} must be > 0")]
    Zero(&'static str),
}

/// Counters of a running gateway, for tests and diagnostics.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Connections open and refused (`gateway.max_connections`).
    pub connections: Arc<serve::ConnectionStats>,
    /// What the event streams read from the table and hold for their clients.
    pub streams: Arc<sse::StreamStats>,
}

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

struct Shared {
    pool: PgPool,
    readers: store::readers::Readers,
    publisher: Publisher,
    settings: Settings,
    hub: Arc<Hub>,
    stop: CancellationToken,
    stream_stats: Arc<sse::StreamStats>,
}

impl AppState {
    /// Bundles what the handlers share.
    pub fn new(
        readers: store::readers::Readers,
        publisher: Publisher,
        settings: Settings,
        hub: Arc<Hub>,
        stop: CancellationToken,
    ) -> Self {
        let shared = Shared {
            pool: readers.primary().clone(),
            readers,
            publisher,
            settings,
            hub,
            stop,
            stream_stats: Arc::default(),
        };
        Self {
            inner: Arc::new(shared),
        }
    }

    /// The database pool (the primary).
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// Where reads that may come from the read replica go (`store::readers`).
    pub fn readers(&self) -> &store::readers::Readers {
        &self.inner.readers
    }

    /// The confirmed publisher (tasks, cancels).
    pub fn publisher(&self) -> &Publisher {
        &self.inner.publisher
    }

    /// All settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The live events of this process.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.inner.hub
    }

    /// The event streams' counters.
    pub fn stream_stats(&self) -> &Arc<sse::StreamStats> {
        &self.inner.stream_stats
    }

    /// Fires when the gateway stops: event streams end.
    pub fn stop(&self) -> &CancellationToken {
        &self.inner.stop
    }

    /// The accepted bearer tokens (empty: no auth, loopback only).
    pub fn tokens(&self) -> &[Secret] {
        &self.inner.settings.gateway.tokens
    }

    /// Interval of SSE heartbeats (and of the stream's database catch-up).
    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.inner.settings.gateway.heartbeat_secs)
    }
}

/// Resolves `gateway.bind` and applies the start-up rules.
pub async fn listen_address(gateway: &GatewaySettings) -> Result<SocketAddr, ConfigError> {
    if gateway.heartbeat_secs == 0 {
        return Err(ConfigError::Zero("heartbeat_secs"));
    }
    let sizes = [
        ("max_body_bytes", gateway.max_body_bytes),
        ("max_connections", gateway.max_connections),
        (
            "header_read_timeout_secs",
            gateway.header_read_timeout_secs as usize,
        ),
        ("stream_page_bytes", gateway.stream_page_bytes),
        ("stream_buffer_bytes", gateway.stream_buffer_bytes),
        ("trace_page_recursions", gateway.trace_page_recursions),
        ("max_field_chars", gateway.max_field_chars),
    ];
    if let Some((key, _)) = sizes.iter().find(|(_, value)| *value == 0) {
        return Err(ConfigError::Zero(key));
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(gateway.bind.as_str())
        .await
        .map_err(|_| ConfigError::Unresolvable(gateway.bind.clone()))?
        .collect();
    let addr = *addrs
        .first()
        .ok_or_else(|| ConfigError::Unresolvable(gateway.bind.clone()))?;
    if gateway.tokens.is_empty()
        && let Some(open) = addrs.iter().find(|a| !auth::is_loopback(a.ip()))
    {
        return Err(ConfigError::OpenWithoutTokens {
            bind: gateway.bind.clone(),
            addr: *open,
        });
    }
    Ok(addr)
}

/// Checks the settings, connects to PostgreSQL (creating and migrating the database like
/// the worker) and RabbitMQ (declaring the topology, subscribing to the events exchange)
/// and binds the listener. Returns the bound address and the future that serves until
/// `shutdown` fires; open event streams then end, and the future completes once every
/// connection has closed.
pub async fn bind(
    settings: Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<(
    SocketAddr,
    impl Future<Output = anyhow::Result<()>> + Send + 'static,
)> {
    let (addr, _, serving) = bind_observed(settings, shutdown).await?;
    Ok((addr, serving))
}

/// [`bind`], also returning the gateway's counters.
pub async fn bind_observed(
    settings: Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<(
    SocketAddr,
    Observed,
    impl Future<Output = anyhow::Result<()>> + Send + 'static,
)> {
    let prepare = || store::prepare(&settings.database.url, settings.pool_size());
    let (addr, pool) = match listen_address(&settings.gateway).await {
        Ok(addr) => (addr, prepare().await?),
        // Live scoped tokens (CONTRACT v3 §15) close the gateway as static ones do; without
        // any, it would answer non-loopback peers 403 anyway (`auth::loopback_only`).
        Err(ConfigError::OpenWithoutTokens { bind, addr }) => {
            let pool = prepare().await?;
            if !store::api_tokens::any_live(&pool).await? {
                return Err(ConfigError::OpenWithoutTokens { bind, addr }.into());
            }
            (addr, pool)
        }
        Err(err) => return Err(err.into()),
    };
    let readers = store::readers::Readers::new(pool, &settings.database, settings.pool_size())?;
    let publisher = amqp::connect_declared(&settings).await?;
    let broker = Arc::clone(publisher.broker());
    let exchange = settings.amqp.events_exchange.clone();
    let consumer = amqp::subscriber::subscribe(&broker, &exchange).await?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (gateway.bind)"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    let stop = shutdown.child_token();
    let hub = Arc::new(Hub::default());
    let limits = serve::ServeLimits {
        max_connections: settings.gateway.max_connections,
        header_read_timeout: Duration::from_secs(settings.gateway.header_read_timeout_secs),
    };
    let state = AppState::new(readers, publisher, settings, Arc::clone(&hub), stop.clone());
    let observed = Observed {
        connections: Arc::default(),
        streams: Arc::clone(state.stream_stats()),
    };
    let connections = Arc::clone(&observed.connections);
    let app = router(state);
    let serving = async move {
        let pump = tokio::spawn(hub::pump(
            hub,
            Arc::clone(&broker),
            exchange,
            consumer,
            stop.clone(),
        ));
        serve::run(listener, app, limits, connections, stop.clone()).await;
        stop.cancel();
        let _ = tokio::time::timeout(DRAIN, pump).await;
        broker.close().await;
        Ok(())
    };
    Ok((local, observed, serving))
}

/// Starts the gateway and serves until `shutdown` fires.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (addr, serving) = bind(settings, shutdown).await?;
    tracing::info!(%addr, "gateway listening; the trace page is at http://{addr}/");
    serving.await
}

/// The whole application: API, OpenAPI document, page, JSON fallbacks and the layers.
pub fn router(state: AppState) -> Router {
    let (api, mut openapi) = routes::api(&state).split_for_parts();
    openapi::complete(&mut openapi);
    let document = axum::body::Bytes::from(openapi.to_json().unwrap_or_else(|_| "{}".into()));
    let max_body = state.settings().gateway.max_body_bytes;
    Router::new()
        .merge(api)
        .route(
            "/openapi.json",
            get(move || async move {
                let json = HeaderValue::from_static("application/json");
                ([(header::CONTENT_TYPE, json)], document).into_response()
            }),
        )
        .merge(page::routes())
        .fallback(errors::route_not_found)
        .method_not_allowed_fallback(errors::method_not_allowed)
        .layer(from_fn_with_state(state.clone(), reads::note_writes))
        .layer(from_fn_with_state(state.clone(), auth::loopback_only))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
            // The path only: the query may hold an access_token.
            tracing::info_span!("http", method = %request.method(), path = %request.uri().path())
        }))
        .with_state(state)
}
