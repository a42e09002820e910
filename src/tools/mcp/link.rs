//! The connection to one MCP server and its supervisor. [`open`] starts the server (stdio
//! child process, in its own process group so that `npx`-style launchers die with it, with
//! a cleared environment, see `child_env`) or reaches it over streamable HTTP, does the MCP
//! handshake and lists its tools. The supervisor waits for the session to end (the child
//! died, the transport closed, or a call saw the transport fail), marks the link down, and
//! opens it again with exponential backoff until it succeeds or the source shuts down.
//! Calls made while the link is down get the reason at once instead of hanging.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use backon::{BackoffBuilder, ExponentialBuilder};
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::{McpServerSettings, McpTransport};

use super::child_env;

/// A live MCP client session.
pub(super) type Session = RunningService<RoleClient, ClientConfig>;

/// What the supervisor needs to reopen a server.
#[derive(Debug, Clone)]
pub(super) struct Opener {
    pub settings: McpServerSettings,
    pub connect_timeout: Duration,
    pub restart_initial: Duration,
    pub restart_max: Duration,
}

/// Whether the server can take calls now, shared by the source and its supervisor.
pub(super) struct Link {
    server: String,
    state: RwLock<State>,
    broken: Notify,
}

enum State {
    Up(Peer<RoleClient>),
    Down(String),
}

impl Link {
    pub(super) fn new(server: &str, peer: Peer<RoleClient>) -> Self {
        crate::metrics::mcp_server_up(server, true);
        Self {
            server: server.to_owned(),
            state: RwLock::new(State::Up(peer)),
            broken: Notify::new(),
        }
    }

    /// The peer to call, or why there is none right now.
    pub(super) fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let state = self
            .state
            .read()
            .map_err(|_| "internal error: poisoned MCP link state".to_owned())?;
        match &*state {
            State::Up(peer) if !peer.is_transport_closed() => Ok(peer.clone()),
            State::Up(_) => Err("its connection closed".to_owned()),
            State::Down(why) => Err(why.clone()),
        }
    }

    /// Whether calls can go through now.
    pub(super) fn is_up(&self) -> bool {
        self.peer().is_ok()
    }

    /// A call saw the transport fail: have the supervisor reconnect now.
    pub(super) fn report_broken(&self) {
        self.broken.notify_waiters();
    }

    /// Sets the `mcp_server_up` gauge from the current state once more: the metrics
    /// recorder is installed after the tools are connected, and a gauge set before it
    /// went nowhere.
    pub(super) fn report_status(&self) {
        if let Ok(state) = self.state.read() {
            crate::metrics::mcp_server_up(&self.server, matches!(*state, State::Up(_)));
        }
    }

    fn set(&self, state: State) {
        // The gauge is set under the lock, so a concurrent `report_status` cannot leave
        // it showing the state before this one.
        if let Ok(mut current) = self.state.write() {
            crate::metrics::mcp_server_up(&self.server, matches!(state, State::Up(_)));
            *current = state;
        }
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("agentd", env!("CARGO_PKG_VERSION")),
    )
}

/// Starts or reaches the server, does the handshake and lists its tools, within
/// `connect_timeout`.
pub(super) async fn open(opener: &Opener) -> anyhow::Result<(Session, Vec<Tool>)> {
    let settings = &opener.settings;
    let connect = async {
        let session = match settings.transport() {
            McpTransport::Stdio { command, args, env } => {
                let mut command = tokio::process::Command::new(command);
                command
                    .args(args)
                    .env_clear()
                    .envs(child_env::for_server(std::env::vars_os(), env));
                let mut wrapped = CommandWrap::from(command);
                wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
                let (transport, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .context("starting the server process")?;
                if let Some(stderr) = stderr {
                    tokio::spawn(forward_stderr(settings.name.clone(), stderr));
                }
                client_config().serve(transport).await?
            }
            McpTransport::Http { url, bearer_token } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url);
                if let Some(token) = bearer_token {
                    config = config.auth_header(token.expose());
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                client_config().serve(transport).await?
            }
        };
        let tools = session
            .list_all_tools()
            .await
            .context("listing its tools")?;
        anyhow::Ok((session, tools))
    };
    tokio::time::timeout(opener.connect_timeout, connect)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "no answer within {} ms (tools.connect_timeout_ms)",
                opener.connect_timeout.as_millis()
            )
        })?
}

/// Logs what the server writes to stderr, one line at a time.
async fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(mcp_server = %server, "{line}");
    }
}

/// Keeps the server connected until `stop` fires, then closes the session (which stops a
/// child process: stdin closed, then SIGTERM, then SIGKILL to its process group).
pub(super) async fn supervise(
    link: Arc<Link>,
    mut session: Session,
    opener: Opener,
    stop: CancellationToken,
) {
    let server = opener.settings.name.clone();
    loop {
        let cancel = session.cancellation_token();
        let waiting = session.waiting();
        tokio::pin!(waiting);
        let wake = tokio::select! {
            ended = &mut waiting => Wake::Ended(match ended {
                Ok(reason) => format!("the session ended ({reason:?})"),
                Err(err) => format!("the session task failed: {err}"),
            }),
            () = link.broken.notified() => Wake::Broken,
            () = stop.cancelled() => Wake::Stop,
        };
        let why = match wake {
            Wake::Ended(why) => why,
            Wake::Broken | Wake::Stop => {
                cancel.cancel();
                let _ = waiting.await;
                if matches!(wake, Wake::Stop) {
                    link.set(State::Down("the worker is shutting down".to_owned()));
                    return;
                }
                "a call found the transport broken".to_owned()
            }
        };
        tracing::warn!(mcp_server = %server, reason = %why, "MCP server down; restarting it");
        link.set(State::Down(format!(
            "it went down ({why}) and is being restarted"
        )));
        match reopen(&link, &opener, &stop).await {
            Some(next) => session = next,
            None => return,
        }
    }
}

/// What woke the supervisor.
enum Wake {
    Ended(String),
    Broken,
    Stop,
}

/// Reopens the server with backoff; `None` when `stop` fired first.
async fn reopen(link: &Link, opener: &Opener, stop: &CancellationToken) -> Option<Session> {
    let server = &opener.settings.name;
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(opener.restart_initial)
        .with_max_delay(opener.restart_max)
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        let delay = delays.next().unwrap_or(opener.restart_max);
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        let opened = tokio::select! {
            () = stop.cancelled() => return None,
            opened = open(opener) => opened,
        };
        match opened {
            Ok((session, tools)) => {
                tracing::info!(mcp_server = %server, tools = tools.len(), "MCP server restarted");
                crate::metrics::mcp_server_restarted(server);
                link.set(State::Up(session.peer().clone()));
                return Some(session);
            }
            Err(err) => {
                let why = format!("{err:#}");
                tracing::warn!(mcp_server = %server, error = %why, retry_in_ms = delay.as_millis() as u64,
                    "MCP server restart failed");
                link.set(State::Down(format!(
                    "it is down and restarting failed: {why}"
                )));
            }
        }
    }
}
