//! The operations listener of a worker (`[metrics] bind`): `GET /metrics` (Prometheus text
//! format), `GET /healthz` (200 while the process serves HTTP) and `GET /readyz` (200 when
//! the broker connection is up and PostgreSQL answers `SELECT 1`, else 503 with the reason).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::amqp::Broker;

/// How long one readiness check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// How often histogram data is folded in when nobody scrapes.
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// What `/readyz` checks.
#[derive(Clone)]
pub struct Readiness {
    pub pool: PgPool,
    pub broker: Arc<Broker>,
}

struct Shared {
    handle: PrometheusHandle,
    readiness: Readiness,
}

/// Installs the recorder, binds `addr` and serves until `shutdown` fires. Returns the bound
/// address (useful with port 0) and the server task.
pub async fn spawn(
    addr: SocketAddr,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let handle = super::install()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics listener on {addr}"))?;
    let local = listener.local_addr().context("metrics listener address")?;
    let shared = Arc::new(Shared { handle, readiness });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::clone(&shared));
    let task = tokio::spawn(async move {
        let upkeep = upkeep(shared.handle.clone(), shutdown.clone());
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        let (served, ()) = tokio::join!(served, upkeep);
        if let Err(err) = served {
            tracing::error!(error = %err, "metrics listener failed");
        }
    });
    tracing::info!(address = %local, "serving /metrics, /healthz and /readyz");
    Ok((local, task))
}

async fn upkeep(handle: PrometheusHandle, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(UPKEEP_PERIOD) => handle.run_upkeep(),
        }
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    shared.handle.run_upkeep();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        shared.handle.render(),
    )
        .into_response()
}

async fn healthz() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let readiness = &shared.readiness;
    let (broker, database) = tokio::join!(check_broker(readiness), check_database(readiness));
    let ready = broker.is_ok() && database.is_ok();
    let verdict = |check: &Result<(), String>| match check {
        Ok(()) => "ok".to_owned(),
        Err(why) => why.clone(),
    };
    let body = json!({
        "ready": ready,
        "broker": verdict(&broker),
        "database": verdict(&database),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn check_broker(readiness: &Readiness) -> Result<(), String> {
    match tokio::time::timeout(CHECK_TIMEOUT, readiness.broker.is_connected()).await {
        Ok(true) => Ok(()),
        Ok(false) => Err("not connected to RabbitMQ".to_owned()),
        Err(_) => Err("RabbitMQ connection check timed out (reconnecting?)".to_owned()),
    }
}

async fn check_database(readiness: &Readiness) -> Result<(), String> {
    let ping = sqlx::query("SELECT 1").execute(&readiness.pool);
    match tokio::time::timeout(CHECK_TIMEOUT, ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("PostgreSQL: {err}")),
        Err(_) => Err("PostgreSQL did not answer SELECT 1 in time".to_owned()),
    }
}
