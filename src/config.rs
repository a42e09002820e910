//! Typed settings loaded with the `config` crate: `config/default.toml`, then the optional
//! `--config PATH` file, then `AGENTD__SECTION__KEY` environment variables. Every key is
//! documented in config/default.toml; the API key lives in a type whose Debug prints nothing.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::core::retry::RetryPolicy;
use crate::llm::LlmSettings;
use crate::llm::secret::Secret;

mod ops;
pub use ops::{McpServerSettings, McpTransport, MetricsSettings, RetentionSettings, ToolsSettings};

/// Everything the binary can be configured with.
#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub amqp: AmqpSettings,
    pub database: DatabaseSettings,
    pub llm: LlmConfig,
    pub worker: WorkerSettings,
    pub log: LogSettings,
    /// The `[limits]` section: the context budget and trimming of every task.
    #[serde(default)]
    pub limits: crate::core::limits::Limits,
    /// `[tools]`: call limits and MCP servers (optional section).
    #[serde(default)]
    pub tools: ToolsSettings,
    /// `[metrics]`: the /metrics, /healthz and /readyz listener (optional section).
    #[serde(default)]
    pub metrics: MetricsSettings,
    /// `[retention]`: the worker's periodic prune (optional section).
    #[serde(default)]
    pub retention: RetentionSettings,
    /// `[gateway]`: the HTTP/SSE interface of `agentd serve` (optional section).
    #[serde(default)]
    pub gateway: GatewaySettings,
}

/// RabbitMQ connection and topology names (CONTRACT §2–3).
#[derive(Debug, Clone, Deserialize)]
pub struct AmqpSettings {
    pub url: String,
    pub tasks_queue: String,
    pub dead_letter_queue: String,
    pub events_exchange: String,
    pub control_exchange: String,
}

/// PostgreSQL connection.
#[derive(Debug, Clone, Deserialize)]
pub struct DatabaseSettings {
    pub url: String,
    pub max_connections: u32,
}

/// The `[llm]` section.
#[derive(Debug, Clone, Deserialize)]
pub struct LlmConfig {
    pub base_url: String,
    #[serde(default)]
    pub api_key: Option<Secret>,
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub retry: RetryPolicy,
}

impl LlmConfig {
    /// The client settings (an empty api_key counts as none).
    pub fn client_settings(&self) -> LlmSettings {
        LlmSettings {
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone().filter(|key| !key.expose().is_empty()),
            timeout_ms: self.timeout_ms,
            connect_timeout_ms: self.connect_timeout_ms,
        }
    }
}

/// The `[worker]` section.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkerSettings {
    pub concurrency: u16,
    pub max_message_bytes: usize,
    pub max_deliveries: u32,
    pub prompt_path: PathBuf,
    pub shutdown_grace_secs: u64,
    /// Seconds a task lease lasts without renewal (renewed every third of it).
    #[serde(default = "defaults::lease_secs")]
    pub lease_secs: f64,
    /// Tool calls of one reply run at once, at most this many (1 = one after another).
    #[serde(default = "defaults::tool_concurrency")]
    pub tool_concurrency: usize,
    /// Timeout of one tool call, in milliseconds.
    #[serde(default = "defaults::tool_timeout_ms")]
    pub tool_timeout_ms: u64,
    /// Timeout of one recursion (LLM call with its retries, then its tools), in milliseconds.
    #[serde(default = "defaults::recursion_timeout_ms")]
    pub recursion_timeout_ms: u64,
}

/// Defaults of keys added after the first release, so older config files still load.
mod defaults {
    pub fn lease_secs() -> f64 {
        30.0
    }
    pub fn tool_concurrency() -> usize {
        8
    }
    pub fn tool_timeout_ms() -> u64 {
        10_000
    }
    pub fn recursion_timeout_ms() -> u64 {
        30_000
    }
}

/// The `[gateway]` section: the HTTP/SSE interface of `agentd serve`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct GatewaySettings {
    /// Address to listen on, e.g. `127.0.0.1:8787`.
    pub bind: String,
    /// Accepted bearer tokens. Empty: no auth, and only loopback binds and peers are allowed.
    /// A list, or one comma-separated string (`AGENTD__GATEWAY__TOKENS=a,b`).
    #[serde(deserialize_with = "crate::gateway::auth::tokens_from_config")]
    pub tokens: Vec<Secret>,
    /// Seconds between SSE heartbeat comments on an idle event stream.
    pub heartbeat_secs: u64,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8787".to_owned(),
            tokens: Vec::new(),
            heartbeat_secs: 15,
            max_body_bytes: 65_536,
        }
    }
}

/// The `[log]` section.
#[derive(Debug, Clone, Deserialize)]
pub struct LogSettings {
    pub level: String,
    pub format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Settings {
    /// Loads config/default.toml (relative to the working directory), then `extra`, then
    /// the `AGENTD__` environment.
    pub fn load(extra: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_from(Path::new("config/default.toml"), extra)
    }

    /// Like [`Settings::load`] with an explicit default file.
    pub fn load_from(default: &Path, extra: Option<&Path>) -> anyhow::Result<Self> {
        let mut builder =
            config::Config::builder().add_source(config::File::from(default).required(true));
        if let Some(path) = extra {
            builder = builder.add_source(config::File::from(path).required(true));
        }
        let built = builder
            .add_source(
                config::Environment::with_prefix("AGENTD")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true),
            )
            .build()
            .with_context(|| format!("reading configuration ({})", default.display()))?;
        let settings: Settings = built.try_deserialize().context("invalid configuration")?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.worker.concurrency > 0,
            "worker.concurrency must be > 0"
        );
        anyhow::ensure!(
            self.worker.max_deliveries > 0,
            "worker.max_deliveries must be > 0"
        );
        anyhow::ensure!(
            self.worker.max_message_bytes > 0,
            "worker.max_message_bytes must be > 0"
        );
        self.tools.validate()?;
        self.metrics.address()?;
        self.retention.validate()?;
        Ok(())
    }

    /// Pool size: the configured one, or concurrency + 4 capped at 32. A task holds a
    /// connection only while it commits, so a few dozen serve a thousand tasks; asking for
    /// more than the server's `max_connections` (100 by default) would starve everyone.
    pub fn pool_size(&self) -> u32 {
        match self.database.max_connections {
            0 => (u32::from(self.worker.concurrency) + 4).min(32),
            n => n,
        }
    }
}
