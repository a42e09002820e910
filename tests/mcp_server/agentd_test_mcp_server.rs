//! `agentd-test-mcp-server`: a tiny MCP server built on rmcp's server side, used by the
//! integration tests as a real MCP child process (stdio) or HTTP endpoint. It offers
//! `echo`, `add`, `sleep` and `fail` (no annotations), and, with MCP tool annotations for
//! the effect tests (CONTRACT §7):
//!
//! - `charge` (destructive: a side effect): `{amount, sleep_ms?}`; sleeps `sleep_ms` first
//!   (so a test can kill a worker mid-call), then appends the request's idempotency key
//!   (`_meta["agentd/idempotency_key"]`, or `none`) as one line to the ledger file and
//!   answers `charged <amount>`.
//! - `upsert` (idempotentHint): `{name, value}`; appends `upsert <key>` to the ledger.
//! - `lookup` (readOnlyHint): `{name}`; answers `<name> is known`.
//! - `env` (readOnlyHint): the server process's environment as a JSON object name → value.
//!
//! - `agentd-test-mcp-server` serves MCP over stdin/stdout.
//! - `agentd-test-mcp-server --http 127.0.0.1:PORT` serves streamable HTTP at `/mcp`.
//!
//! Test hooks (environment): `AGENTD_TEST_MCP_PID_FILE=path` writes the process id there at
//! start, so a test can kill the server; `AGENTD_TEST_MCP_GATE=path` makes the server exit
//! at once with status 1 while that file exists, so a test can keep it "down" for a while;
//! `AGENTD_TEST_MCP_LEDGER=path` is the ledger file of `charge` and `upsert` (appended and
//! fsynced per call; without it they record nothing).

use std::io::Write as _;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, RequestMetaObject, ServerCapabilities, ServerConfig,
};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde_json::{Map, Value};

/// The `_meta` key agentd sends a call's idempotency key under (CONTRACT §7), written out
/// here rather than taken from agentd so that a renamed key fails the tests.
const IDEMPOTENCY_META_KEY: &str = "agentd/idempotency_key";
/// The environment variable naming the ledger file.
const LEDGER_ENV: &str = "AGENTD_TEST_MCP_LEDGER";

/// Arguments of `echo`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

/// Arguments of `add`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: f64,
    /// The second addend.
    b: f64,
}

/// Arguments of `sleep`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    /// How long to sleep, in milliseconds.
    ms: u64,
}

/// Arguments of `fail`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct FailArgs {
    /// The error message the tool reports.
    message: String,
}

/// Arguments of `charge`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    /// The amount to charge.
    amount: f64,
    /// Milliseconds to wait before recording the charge.
    #[serde(default)]
    sleep_ms: Option<u64>,
}

/// Arguments of `upsert`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct UpsertArgs {
    /// The record's name.
    name: String,
    /// Its new value.
    value: String,
    /// Milliseconds to wait before recording the upsert.
    #[serde(default)]
    sleep_ms: Option<u64>,
}

/// Arguments of `lookup`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct LookupArgs {
    /// The record's name.
    name: String,
}

/// The idempotency key the request carried, or `none`.
fn idempotency_key(meta: &RequestMetaObject) -> String {
    meta.get(IDEMPOTENCY_META_KEY)
        .and_then(Value::as_str)
        .unwrap_or("none")
        .to_owned()
}

/// Appends `line` to the ledger file (one write, then fsync, so that a line is either
/// there whole or not at all when a test kills things around it).
fn record(line: &str) -> Result<(), String> {
    let Some(path) = std::env::var_os(LEDGER_ENV) else {
        return Ok(());
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open the ledger: {e}"))?;
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write the ledger: {e}"))
}

/// A tool result from what [`record`] said.
fn recorded(outcome: Result<(), String>, answer: String) -> CallToolResult {
    match outcome {
        Ok(()) => CallToolResult::success(vec![ContentBlock::text(answer)]),
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error)]),
    }
}

/// The test server's tools.
#[derive(Debug, Clone)]
struct TestServer {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl TestServer {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Echo the given text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Add two numbers and return the sum")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Sleep for the given number of milliseconds")]
    async fn sleep(&self, Parameters(SleepArgs { ms }): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        format!("slept {ms} ms")
    }

    #[tool(description = "Always fail with the given message")]
    fn fail(&self, Parameters(FailArgs { message }): Parameters<FailArgs>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(message)])
    }

    #[tool(
        description = "Charge an amount; records the call's idempotency key in the ledger",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn charge(
        &self,
        meta: RequestMetaObject,
        Parameters(ChargeArgs { amount, sleep_ms }): Parameters<ChargeArgs>,
    ) -> CallToolResult {
        if let Some(ms) = sleep_ms {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        recorded(record(&idempotency_key(&meta)), format!("charged {amount}"))
    }

    #[tool(
        description = "Set a record's value; records `upsert <idempotency key>` in the ledger",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    async fn upsert(
        &self,
        meta: RequestMetaObject,
        Parameters(UpsertArgs {
            name,
            value,
            sleep_ms,
        }): Parameters<UpsertArgs>,
    ) -> CallToolResult {
        if let Some(ms) = sleep_ms {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let line = format!("upsert {}", idempotency_key(&meta));
        recorded(record(&line), format!("{name} = {value}"))
    }

    #[tool(description = "Look a record up", annotations(read_only_hint = true))]
    fn lookup(&self, Parameters(LookupArgs { name }): Parameters<LookupArgs>) -> String {
        format!("{name} is known")
    }

    #[tool(
        description = "The server process's environment variables",
        annotations(read_only_hint = true)
    )]
    fn env(&self) -> CallToolResult {
        let vars: Map<String, Value> = std::env::vars_os()
            .map(|(name, value)| {
                let value = value.to_string_lossy().into_owned();
                (name.to_string_lossy().into_owned(), Value::String(value))
            })
            .collect();
        CallToolResult::structured(Value::Object(vars))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions("agentd's MCP test server")
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    if let Some(gate) = std::env::var_os("AGENTD_TEST_MCP_GATE")
        && std::path::Path::new(&gate).exists()
    {
        eprintln!("agentd-test-mcp-server: gate file present, refusing to start");
        return std::process::ExitCode::FAILURE;
    }
    if let Some(path) = std::env::var_os("AGENTD_TEST_MCP_PID_FILE")
        && let Err(err) = std::fs::write(&path, std::process::id().to_string())
    {
        eprintln!("agentd-test-mcp-server: cannot write the pid file: {err}");
        return std::process::ExitCode::FAILURE;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let served = match args.as_slice() {
        [flag, addr] if flag == "--http" => serve_http(addr).await,
        [] => serve_stdio().await,
        _ => Err("usage: agentd-test-mcp-server [--http ADDR]".into()),
    };
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agentd-test-mcp-server: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn serve_stdio() -> Result<(), BoxError> {
    let service = TestServer::new().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

async fn serve_http(addr: &str) -> Result<(), BoxError> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let service: StreamableHttpService<TestServer, LocalSessionManager> =
        StreamableHttpService::new(
            || Ok(TestServer::new()),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!(
        "agentd-test-mcp-server: listening on {}",
        listener.local_addr()?
    );
    axum::serve(listener, router).await?;
    Ok(())
}
