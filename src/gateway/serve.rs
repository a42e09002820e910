//! The gateway's HTTP server loop, in place of `axum::serve`, for two bounds it lacks:
//!
//! - **A connection cap** (`gateway.max_connections`): a connection beyond it is answered
//!   at once with `503 too_many_connections` (the JSON error shape, `Retry-After: 1`) and
//!   closed, so a flood of idle or slow clients cannot hold unbounded sockets and tasks.
//! - **A header-read timeout** (`gateway.header_read_timeout_secs`): a client that does not
//!   send a whole request head in time (a half-open or slowloris request) is disconnected.
//!   Only the head is timed: an open event stream may last as long as its task.
//!
//! Each connection is served by hyper's HTTP/1 connection with the router as its service
//! and the peer address as [`ConnectInfo`] (the loopback rule reads it). When `stop` fires,
//! the listener closes and every connection shuts down gracefully; the loop returns once
//! the last one has closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service as _;

/// How long a refused connection gets to send its request head and take its 503.
const REFUSAL_TIME: Duration = Duration::from_secs(2);
/// The most of a refused connection's request head that is read.
const REFUSAL_HEAD: usize = 16 * 1024;
/// A failed `accept` (out of file descriptors, ...) is retried after this pause.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The bounds of the server loop.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections served at once; more are refused with 503.
    pub max_connections: usize,
    /// Time a client has to send a whole request head.
    pub header_read_timeout: Duration,
}

/// What the server loop counts (tests and logs read it).
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Connections served right now.
    pub open: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub refused: AtomicU64,
}

/// Serves `app` on `listener` until `stop` fires, then drains every connection.
pub async fn run(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    stats: Arc<ConnectionStats>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, max = limits.max_connections, "refusing a connection: gateway.max_connections are open");
            tokio::spawn(refuse(stream));
            continue;
        };
        let connection = Connection {
            app: app.clone(),
            peer,
            limits,
            stats: Arc::clone(&stats),
            _slot: slot,
        };
        connections.spawn(connection.serve(stream, stop.clone()));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// One accepted connection and the slot it holds until it closes.
struct Connection {
    app: Router,
    peer: SocketAddr,
    limits: ServeLimits,
    stats: Arc<ConnectionStats>,
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    async fn serve(self, stream: TcpStream, stop: CancellationToken) {
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        let (app, peer) = (self.app.clone(), self.peer);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let mut app = app.clone();
            async move {
                let response = app.call(request.map(axum::body::Body::new)).await;
                Ok::<_, Infallible>(response.unwrap_or_else(|never| match never {}))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout);
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let mut stopping = false;
        loop {
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(err) = served {
                        tracing::debug!(peer = %self.peer, error = %err, "connection ended");
                    }
                    break;
                }
                () = stop.cancelled(), if !stopping => {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Answers 503 to a connection beyond the cap and closes it. Its request head is read first
/// (at most [`REFUSAL_HEAD`] bytes; clients treat an answer before their request as a
/// broken connection), and everything is over within [`REFUSAL_TIME`].
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"error":{"code":"too_many_connections","message":"the gateway serves gateway.max_connections connections at once; retry later"}}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = async {
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REFUSAL_HEAD {
            match stream.read(&mut buffer).await? {
                0 => break,
                n => head.extend_from_slice(&buffer[..n]),
            }
        }
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what else the client sent until it closes: closing with unread bytes would
        // reset the connection, and the client might lose the answer.
        while stream.read(&mut buffer).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, answer).await;
}
