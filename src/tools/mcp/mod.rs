//! [`McpToolSource`]: the tools of one MCP server (seed 001's `ToolSource`, default MCP),
//! through the official Rust SDK `rmcp`. At worker start the server is started (stdio) or
//! reached (streamable HTTP) and its tools listed; they are offered as
//! `<server>__<tool>` with the server's JSON schema. A server that dies is restarted with
//! backoff by a supervisor task (`link`); while it is down its tools answer with a clear
//! error value, and every call is bounded by the server's call timeout.
//!
//! Each tool's effect (`effect`) is decided at connect from its annotations and the
//! configuration; a call that carries an idempotency key sends it in the request's `_meta`
//! as [`IDEMPOTENCY_META_KEY`]. A stdio server starts with a cleared environment plus
//! [`INHERITED_ENV`] and its own `env` (`child_env`).

mod child_env;
mod convert;
mod effect;
mod link;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};
use rmcp::model::{CallToolRequestParams, RequestParamsMeta, Tool};
use rmcp::service::ServiceError;
use serde_json::{Map, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{McpServerSettings, ToolsSettings};
use crate::core::types::{ToolEffect, ToolSpec};
use crate::ports::{ToolCallContext, ToolOutput, ToolSource};

pub use child_env::INHERITED_ENV;
pub use convert::namespaced;
use link::{Link, Opener};

/// Attempts to reach a server at worker start before giving up.
const START_ATTEMPTS: usize = 3;

/// The `_meta` key of a `tools/call` request that carries the call's idempotency key
/// (CONTRACT §7): `"<task_id>:<tool_call_id>"`, the same when the call is run again.
pub const IDEMPOTENCY_META_KEY: &str = "agentd/idempotency_key";

/// One MCP server's tools.
pub struct McpToolSource {
    server: String,
    specs: Vec<ToolSpec>,
    /// Namespaced name → the server's own tool name and the tool's effect.
    remote: HashMap<String, RemoteTool>,
    link: Arc<Link>,
    call_timeout: Duration,
    stop: CancellationToken,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for McpToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolSource")
            .field("server", &self.server)
            .field("tools", &self.remote.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A tool as the server knows it.
struct RemoteTool {
    name: String,
    effect: ToolEffect,
}

impl McpToolSource {
    /// Starts or reaches the server (a few quick attempts), lists its tools and starts the
    /// supervisor that restarts it when it dies. Fails when the server cannot be reached.
    pub async fn connect(
        settings: &McpServerSettings,
        tools: &ToolsSettings,
    ) -> anyhow::Result<Self> {
        let opener = Opener {
            settings: settings.clone(),
            connect_timeout: Duration::from_millis(tools.connect_timeout_ms),
            restart_initial: Duration::from_millis(tools.restart_initial_delay_ms),
            restart_max: Duration::from_millis(tools.restart_max_delay_ms),
        };
        let start_backoff = ExponentialBuilder::default()
            .with_min_delay(opener.restart_initial)
            .with_max_times(START_ATTEMPTS - 1);
        let (session, listed) = (|| link::open(&opener))
            .retry(start_backoff)
            .notify(|err, delay| {
                tracing::warn!(mcp_server = %settings.name, error = %format!("{err:#}"),
                    retry_in_ms = delay.as_millis() as u64, "MCP server not reachable yet");
            })
            .await
            .with_context(|| format!("MCP server '{}'", settings.name))?;
        let (specs, remote) = catalog(settings, &listed);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        tracing::info!(mcp_server = %settings.name, tools = ?names, "MCP server connected");
        let link = Arc::new(Link::new(&settings.name, session.peer().clone()));
        let stop = CancellationToken::new();
        let supervisor = tokio::spawn(link::supervise(
            Arc::clone(&link),
            session,
            opener,
            stop.clone(),
        ));
        Ok(Self {
            server: settings.name.clone(),
            specs,
            remote,
            link,
            call_timeout: settings.call_timeout(tools),
            stop,
            supervisor: Mutex::new(Some(supervisor)),
        })
    }

    /// The server's configured name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the server is connected right now.
    pub fn is_up(&self) -> bool {
        self.link.is_up()
    }

    /// Sets the `agentd_mcp_server_up` gauge from the current state (again): for a metrics
    /// recorder installed after the server connected.
    pub fn report_status(&self) {
        self.link.report_status();
    }

    /// Stops the supervisor and closes the session (a child process is stopped), waiting
    /// for it. Dropping the source does the same without waiting.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let supervisor = self.supervisor.lock().ok().and_then(|mut s| s.take());
        if let Some(supervisor) = supervisor {
            let _ = supervisor.await;
        }
    }

    async fn call(
        &self,
        remote: &str,
        arguments: Map<String, Value>,
        context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String> {
        let server = &self.server;
        let peer = self.link.peer().map_err(|why| {
            format!("MCP server '{server}' is unavailable: {why}; '{remote}' cannot run now, try again later")
        })?;
        let mut params = CallToolRequestParams::new(remote.to_owned()).with_arguments(arguments);
        if let Some(key) = context.idempotency_key {
            params
                .meta_or_default()
                .insert(IDEMPOTENCY_META_KEY.to_owned(), Value::from(key));
        }
        match tokio::time::timeout(self.call_timeout, peer.call_tool(params)).await {
            Err(_) => Err(format!(
                "MCP server '{server}' did not answer '{remote}' within {} ms",
                self.call_timeout.as_millis()
            )),
            Ok(Err(err)) => Err(self.call_error(remote, &err)),
            Ok(Ok(result)) => convert::output(result),
        }
    }
}

/// The specs the server's tools are offered under, and what each namespaced name stands
/// for. Warns about `effects` entries that name no tool.
fn catalog(
    settings: &McpServerSettings,
    listed: &[Tool],
) -> (Vec<ToolSpec>, HashMap<String, RemoteTool>) {
    for key in effect::unknown_overrides(settings, listed) {
        tracing::warn!(mcp_server = %settings.name, tool = %key,
            "tools.mcp effects names a tool the server does not offer; ignored");
    }
    let mut specs = Vec::with_capacity(listed.len());
    let mut remote = HashMap::new();
    for tool in listed {
        let spec = convert::spec(&settings.name, tool);
        let effect = effect::resolve(settings, tool);
        let name = tool.name.to_string();
        remote.insert(spec.name.clone(), RemoteTool { name, effect });
        specs.push(spec);
    }
    (specs, remote)
}

impl McpToolSource {
    /// The error value of a failed call; a broken transport also wakes the supervisor.
    fn call_error(&self, remote: &str, err: &ServiceError) -> String {
        let server = &self.server;
        if !matches!(
            err,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        ) {
            return format!("MCP server '{server}' failed to run '{remote}': {err}");
        }
        self.link.report_broken();
        let mut cause: &dyn std::error::Error = err;
        while let Some(source) = cause.source() {
            cause = source;
        }
        // rmcp names the transport's Rust type in its message; keep what follows it.
        let cause = cause.to_string();
        let cause = cause
            .rsplit_once("] error: ")
            .map_or(cause.as_str(), |(_, rest)| rest);
        format!(
            "MCP server '{server}' could not be reached to run '{remote}' ({cause}); \
             it is being reconnected, try again later"
        )
    }
}

impl Drop for McpToolSource {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[async_trait]
impl ToolSource for McpToolSource {
    fn list_tools(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    fn effect(&self, name: &str) -> ToolEffect {
        self.remote
            .get(name)
            .map_or(ToolEffect::SideEffect, |tool| tool.effect)
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String> {
        let Some(RemoteTool { name: remote, .. }) = self.remote.get(name) else {
            return Err(format!("MCP server '{}' has no tool '{name}'", self.server));
        };
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => return Err(format!("arguments must be a JSON object, got {other}")),
        };
        let result = self.call(remote, arguments, context).await;
        if let Err(error) = &result {
            tracing::info!(mcp_server = %self.server, tool = %remote, %error, "MCP tool call failed");
        }
        result
    }
}
