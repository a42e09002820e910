//! Typed settings loaded with the `config` crate: the defaults built into the binary, then
//! `config/default.toml` when the working directory has one, then the optional `--config
//! PATH` file, then `AGENTD__SECTION__KEY` environment variables. Every key is documented in
//! config/default.toml; a key nothing reads is refused ([`keys`]); the API key, the tokens
//! and the signing keys live in a type whose Debug prints nothing ([`Secret`]).
//!
//! The settings are plain data and depend on the core only: each adapter reads its own
//! section and makes its own settings from it (`llm::LlmSettings::from`), and what only an
//! adapter can check (an AMQP URL, a retention age) it checks when the binary loads them
//! (`cli::settings`).

use std::path::PathBuf;

use serde::Deserialize;

mod control;
mod gateway;
mod keys;
mod llm;
mod load;
mod ops;
mod otel;
mod partitions;
mod schedules;
mod secret;
pub use control::{ControlSettings, Signer};
pub use gateway::GatewaySettings;
pub use llm::{
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STREAM_BYTES, LlmConfig, default_max_delta_bytes,
    default_max_delta_events, default_max_response_bytes, default_max_stream_bytes,
};
pub use load::{
    BUILT_IN_DEFAULTS, BUILT_IN_DEV, BUILT_IN_PROMPT, DEFAULT_PROMPT_PATH, DEFAULTS_PATH, Extra,
};
pub use ops::{McpServerSettings, McpTransport, MetricsSettings, RetentionSettings, ToolsSettings};
pub use otel::OtelSettings;
pub use partitions::PartitionSettings;
pub use schedules::SchedulesSettings;
pub use secret::{Secret, redact_userinfo};

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
    /// `[partitions]`: the time partitions of the trace tables (optional section).
    #[serde(default)]
    pub partitions: PartitionSettings,
    /// `[gateway]`: the HTTP/SSE interface of `agentd serve` (optional section).
    #[serde(default)]
    pub gateway: GatewaySettings,
    /// `[prices."MODEL"]`: USD per million input and output tokens (CONTRACT §8).
    #[serde(default)]
    pub prices: std::collections::HashMap<String, crate::core::budget::Price>,
    /// `[otel]`: OpenTelemetry export of one trace per task (off by default).
    #[serde(default)]
    pub otel: OtelSettings,
    /// `[schedules]`: the fleet's scheduler (CONTRACT v3 §14).
    #[serde(default)]
    pub schedules: SchedulesSettings,
    /// `[control]`: who may steer tasks (CONTRACT v3 §15).
    #[serde(default)]
    pub control: ControlSettings,
}

/// RabbitMQ connection and topology names (CONTRACT §2–3).
#[derive(Debug, Clone, Deserialize)]
pub struct AmqpSettings {
    /// One AMQP URL, or the nodes of one cluster separated by commas (a TOML list is
    /// accepted too and joined): a worker connects to one node and moves to the next when
    /// it loses it.
    #[serde(deserialize_with = "url_list")]
    pub url: String,
    pub tasks_queue: String,
    pub dead_letter_queue: String,
    pub events_exchange: String,
    pub control_exchange: String,
    /// Fanout exchange the tasks queue dead-letters through: bound to `dead_letter_queue`
    /// (kept for operators) and to `deaths_queue` (read by the workers).
    #[serde(default = "defaults::dead_letter_exchange")]
    pub dead_letter_exchange: String,
    /// Where workers learn that the broker dead-lettered a task message (delivery limit).
    #[serde(default = "defaults::deaths_queue")]
    pub deaths_queue: String,
    /// Durable queue bound to `control_exchange`, consumed by the workers in turn: control
    /// messages published while no worker runs are applied when one starts.
    #[serde(default = "defaults::control_pending_queue")]
    pub control_pending_queue: String,
}

impl AmqpSettings {
    /// The same topology under names ending with `.{suffix}` (tests, benchmarks).
    pub fn renamed(&self, suffix: &str) -> Self {
        let name = |base: &str| format!("{base}.{suffix}");
        Self {
            url: self.url.clone(),
            tasks_queue: name(&self.tasks_queue),
            dead_letter_queue: name(&self.dead_letter_queue),
            events_exchange: name(&self.events_exchange),
            control_exchange: name(&self.control_exchange),
            dead_letter_exchange: name(&self.dead_letter_exchange),
            deaths_queue: name(&self.deaths_queue),
            control_pending_queue: name(&self.control_pending_queue),
        }
    }

    /// The `AGENTD__AMQP__*` variables that select this topology.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("URL", &self.url),
            ("TASKS_QUEUE", &self.tasks_queue),
            ("DEAD_LETTER_QUEUE", &self.dead_letter_queue),
            ("EVENTS_EXCHANGE", &self.events_exchange),
            ("CONTROL_EXCHANGE", &self.control_exchange),
            ("DEAD_LETTER_EXCHANGE", &self.dead_letter_exchange),
            ("DEATHS_QUEUE", &self.deaths_queue),
            ("CONTROL_PENDING_QUEUE", &self.control_pending_queue),
        ]
        .into_iter()
        .map(|(key, value)| (format!("AGENTD__AMQP__{key}"), value.clone()))
        .collect()
    }

    /// Every durable queue of the topology.
    pub fn queues(&self) -> [&str; 4] {
        [
            &self.tasks_queue,
            &self.dead_letter_queue,
            &self.deaths_queue,
            &self.control_pending_queue,
        ]
    }

    /// Every exchange of the topology.
    pub fn exchanges(&self) -> [&str; 3] {
        [
            &self.events_exchange,
            &self.control_exchange,
            &self.dead_letter_exchange,
        ]
    }

    /// The exclusive control queue of the worker `worker_id`: it receives every control
    /// message, messages addressed to that worker alone, and exists exactly while the
    /// worker's broker connection does (others check it to tell whether it lives).
    pub fn worker_control_queue(&self, worker_id: uuid::Uuid) -> String {
        format!("{}.worker.{worker_id}", self.control_exchange)
    }
}

/// PostgreSQL connection.
#[derive(Debug, Clone, Deserialize)]
pub struct DatabaseSettings {
    pub url: String,
    pub max_connections: u32,
    /// A read replica (a streaming standby of `url`) for readers: the gateway's reads,
    /// `trace`, `tasks` and replay's selection (`store::readers`). Unset or empty: they
    /// read from `url`. The worker never uses it.
    #[serde(default)]
    pub read_url: Option<String>,
}

impl DatabaseSettings {
    /// `read_url` when set to something (an empty value, e.g. from the environment, is none).
    pub fn read_url(&self) -> Option<&str> {
        self.read_url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty())
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
    /// A task `running` whose lease expired this long ago (or `pending` untouched this
    /// long), that no delivery brought back, is re-enqueued by the reconciler.
    #[serde(default = "defaults::orphan_after_secs")]
    pub orphan_after_secs: f64,
    /// A conversation turn this worker records from its message waits this long after the
    /// message arrived before it is admitted, so that a turn published just before it and
    /// read by another worker is recorded first (docs/loop.md). 0: no wait.
    #[serde(default = "defaults::turn_settle_ms")]
    pub turn_settle_ms: u64,
}

/// Defaults of keys added after the first release, so older config files still load.
/// `amqp.url` as one string: a TOML list of URLs is joined with commas, the form the
/// environment (`AGENTD__AMQP__URL=amqp://a,amqp://b`) gives anyway.
fn url_list<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Urls {
        One(String),
        List(Vec<String>),
    }
    Ok(match Urls::deserialize(deserializer)? {
        Urls::One(url) => url,
        Urls::List(urls) => urls.join(","),
    })
}

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
    pub fn orphan_after_secs() -> f64 {
        300.0
    }
    pub fn turn_settle_ms() -> u64 {
        150
    }
    pub fn dead_letter_exchange() -> String {
        "agentd.tasks.dead".to_owned()
    }
    pub fn deaths_queue() -> String {
        "agentd.tasks.deaths".to_owned()
    }
    pub fn control_pending_queue() -> String {
        "agentd.control.pending".to_owned()
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
        anyhow::ensure!(
            self.worker.orphan_after_secs > 0.0,
            "worker.orphan_after_secs must be > 0"
        );
        for limit in &self.llm.limits {
            limit.validate().map_err(anyhow::Error::msg)?;
        }
        crate::core::call_record::Redactor::new(&self.llm.record_redact)?;
        self.tools.validate()?;
        self.metrics.address()?;
        self.partitions.validate()?;
        self.control.validate()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// config/default.toml overlaid with `extra` (a TOML text).
    fn load_with(extra: &str) -> anyhow::Result<Settings> {
        let path =
            std::env::temp_dir().join(format!("agentd-config-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&path, extra)?;
        let settings = Settings::load_from(Path::new("config/default.toml"), Some(&path));
        let _ = std::fs::remove_file(&path);
        settings
    }

    #[test]
    fn amqp_url_is_one_url_a_comma_separated_string_or_a_list() {
        let one = load_with("").expect("defaults");
        assert_eq!(one.amqp.url, "amqp://guest:guest@127.0.0.1:5672/%2f");
        let text = load_with("[amqp]\nurl = \"amqp://h1:5673/%2f, amqp://h2:5674/%2f\"\n")
            .expect("comma-separated");
        assert_eq!(text.amqp.url, "amqp://h1:5673/%2f, amqp://h2:5674/%2f");
        let list = load_with("[amqp]\nurl = [\"amqp://h1:5673/%2f\", \"amqp://h2:5674/%2f\"]\n")
            .expect("list");
        assert_eq!(list.amqp.url, "amqp://h1:5673/%2f,amqp://h2:5674/%2f");
        assert_eq!(list.amqp.env()[0].1, list.amqp.url);
    }

    #[test]
    fn a_misspelled_key_is_refused_naming_the_nearest_known_one() {
        let err = load_with("[worker]\nconcurency = 4\n").expect_err("misspelled");
        let text = format!("{err:#}");
        assert!(
            text.contains("worker.concurency: did you mean worker.concurrency?"),
            "{text}"
        );
        let read = "[llm]\napi_key = \"k\"\n\n[[tools.mcp]]\nname = \"s\"\ncommand = \"true\"\n\
                    env = { A = \"1\" }\n\n[prices.\"m\"]\ninput_per_mtok = 1.0\n\
                    output_per_mtok = 1.0\n";
        load_with(read).expect("optional keys, maps and lists are read");
    }

    #[test]
    fn prices_keep_model_names_with_dots_and_capitals() {
        let text = "[prices.\"gpt-4.1-Mini\"]\ninput_per_mtok = 0.4\noutput_per_mtok = 1.6\n";
        let settings = load_with(text).expect("prices");
        let price = settings
            .prices
            .get("gpt-4.1-Mini")
            .expect("the model's price");
        assert_eq!((price.input_per_mtok, price.output_per_mtok), (0.4, 1.6));
        assert!(load_with("").expect("defaults").prices.is_empty());
    }

    #[test]
    fn rate_limits_load_from_a_file_and_are_checked() {
        let text = "[[llm.limits]]\nmodel = \"gpt-4o*\"\nrpm = 500\ntpm = 200000\n\n\
                    [[llm.limits]]\nmodel = \"*\"\nrpm = 60\nwindow_secs = 10\n";
        let settings = load_with(text).expect("limits");
        let limits = &settings.llm.limits;
        assert_eq!(limits.len(), 2);
        assert_eq!((limits[0].rpm, limits[0].tpm), (Some(500), Some(200_000)));
        assert_eq!(limits[0].window_secs, 60.0);
        assert_eq!(limits[1].window_secs, 10.0);
        assert!(load_with("").expect("defaults").llm.limits.is_empty());
        let error = load_with("[[llm.limits]]\nmodel = \"m\"\n").unwrap_err();
        assert!(
            format!("{error:#}").contains("rpm, tpm or both"),
            "{error:#}"
        );
    }
}
