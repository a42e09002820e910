//! `agentd-test-mcp-server`: a tiny MCP server built on rmcp's server side, used by the
//! integration tests as a real MCP child process (stdio) or HTTP endpoint. It offers
//! `echo`, `add`, `sleep` and `fail`.
//!
//! - `agentd-test-mcp-server` serves MCP over stdin/stdout.
//! - `agentd-test-mcp-server --http 127.0.0.1:PORT` serves streamable HTTP at `/mcp`.
//!
//! Test hooks (environment): `AGENTD_TEST_MCP_PID_FILE=path` writes the process id there at
//! start, so a test can kill the server; `AGENTD_TEST_MCP_GATE=path` makes the server exit
//! at once with status 1 while that file exists, so a test can keep it "down" for a while.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

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
