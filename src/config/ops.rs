//! Settings of the tool sources and of operations: `[tools]` with its `[[tools.mcp]]` servers,
//! `[metrics]` and `[retention]`. Every section and key is optional in a config file; the
//! defaults here match config/default.toml, where each key is documented.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::secret::Secret;
use crate::core::types::ToolEffect;

/// The `[tools]` section: call limits and the MCP servers whose tools agents may be granted.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ToolsSettings {
    /// Time one MCP tool call may take, in milliseconds (a server entry may override it).
    pub call_timeout_ms: u64,
    /// Time allowed to start or reach an MCP server and list its tools, in milliseconds.
    pub connect_timeout_ms: u64,
    /// First delay before restarting a dead MCP server, in milliseconds (doubles per try).
    pub restart_initial_delay_ms: u64,
    /// Longest delay between restart attempts, in milliseconds.
    pub restart_max_delay_ms: u64,
    /// The MCP servers (`[[tools.mcp]]` entries).
    pub mcp: Vec<McpServerSettings>,
}

impl Default for ToolsSettings {
    fn default() -> Self {
        Self {
            call_timeout_ms: 10_000,
            connect_timeout_ms: 30_000,
            restart_initial_delay_ms: 500,
            restart_max_delay_ms: 30_000,
            mcp: Vec::new(),
        }
    }
}

/// One `[[tools.mcp]]` entry: a stdio child process (`command`) or a streamable HTTP
/// endpoint (`url`).
#[derive(Debug, Clone, Deserialize)]
pub struct McpServerSettings {
    /// The server's name; its tools are offered as `<name>__<tool>`.
    pub name: String,
    /// The program to start (stdio transport).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The child's environment besides the few variables it inherits from the worker
    /// (PATH, HOME, locale, ...; see `tools::mcp`): nothing else of the worker's reaches it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The streamable HTTP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// A bearer token sent to the HTTP endpoint. Never logged.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Overrides `tools.call_timeout_ms` for this server.
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    /// The effect of this server's tools (`read_only`, `idempotent`, `side_effect`),
    /// instead of what their MCP annotations say.
    #[serde(default)]
    pub effect: Option<ToolEffect>,
    /// Per-tool effects, keyed by the server's own tool name (or the namespaced
    /// `<server>__<tool>`); they win over `effect` and the annotations.
    #[serde(default)]
    pub effects: BTreeMap<String, ToolEffect>,
}

/// How agentd reaches an MCP server.
#[derive(Debug, Clone, Copy)]
pub enum McpTransport<'a> {
    /// Start `command args...` with `env` and talk MCP over its stdin/stdout.
    Stdio {
        command: &'a str,
        args: &'a [String],
        env: &'a BTreeMap<String, String>,
    },
    /// Streamable HTTP at `url`.
    Http {
        url: &'a str,
        bearer_token: Option<&'a Secret>,
    },
}

impl McpServerSettings {
    /// The transport this entry configures (validated: exactly one of command and url).
    pub fn transport(&self) -> McpTransport<'_> {
        match (&self.command, &self.url) {
            (Some(command), _) if !command.trim().is_empty() => McpTransport::Stdio {
                command,
                args: &self.args,
                env: &self.env,
            },
            (_, url) => McpTransport::Http {
                url: url.as_deref().unwrap_or_default(),
                bearer_token: self.bearer_token.as_ref(),
            },
        }
    }

    /// The call timeout of this server's tools.
    pub fn call_timeout(&self, tools: &ToolsSettings) -> Duration {
        Duration::from_millis(self.call_timeout_ms.unwrap_or(tools.call_timeout_ms))
    }

    fn validate(&self) -> anyhow::Result<()> {
        let name = &self.name;
        anyhow::ensure!(
            !name.is_empty()
                && name.len() <= 32
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "tools.mcp name '{name}' must be 1-32 characters of a-z, A-Z, 0-9, _ or -"
        );
        let has_command = self
            .command
            .as_deref()
            .is_some_and(|c| !c.trim().is_empty());
        let has_url = self.url.as_deref().is_some_and(|u| !u.trim().is_empty());
        anyhow::ensure!(
            has_command != has_url,
            "tools.mcp '{name}' needs exactly one of `command` (stdio) and `url` (HTTP)"
        );
        if let Some(url) = self.url.as_deref().filter(|_| has_url) {
            anyhow::ensure!(
                url.starts_with("http://") || url.starts_with("https://"),
                "tools.mcp '{name}': url must start with http:// or https://"
            );
        }
        anyhow::ensure!(
            self.call_timeout_ms != Some(0),
            "tools.mcp '{name}': call_timeout_ms must be > 0"
        );
        Ok(())
    }
}

impl ToolsSettings {
    /// Checks timeouts and the MCP entries (valid, unique names; one transport each).
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.call_timeout_ms > 0,
            "tools.call_timeout_ms must be > 0"
        );
        anyhow::ensure!(
            self.connect_timeout_ms > 0,
            "tools.connect_timeout_ms must be > 0"
        );
        anyhow::ensure!(
            self.restart_initial_delay_ms > 0
                && self.restart_max_delay_ms >= self.restart_initial_delay_ms,
            "tools.restart_initial_delay_ms must be > 0 and <= tools.restart_max_delay_ms"
        );
        let mut names = HashSet::new();
        for server in &self.mcp {
            server.validate()?;
            anyhow::ensure!(
                names.insert(server.name.as_str()),
                "tools.mcp name '{}' is used twice",
                server.name
            );
        }
        Ok(())
    }
}

/// The `[metrics]` section: the Prometheus, `/healthz` and `/readyz` listener.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MetricsSettings {
    /// `host:port` to listen on; empty = no listener.
    pub bind: String,
}

impl MetricsSettings {
    /// The address to listen on, or None when the listener is off.
    pub fn address(&self) -> anyhow::Result<Option<SocketAddr>> {
        let bind = self.bind.trim();
        if bind.is_empty() {
            return Ok(None);
        }
        bind.parse()
            .map(Some)
            .map_err(|e| anyhow::anyhow!("metrics.bind '{bind}' is not host:port: {e}"))
    }
}

/// The `[retention]` section: the worker's periodic prune of old ended tasks.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RetentionSettings {
    /// Seconds between two prunes; 0 = never prune from the worker.
    pub interval_secs: u64,
    /// Tasks that ended longer ago than this are removed: `30d`, `12h`, `90m`, `2w`...
    pub older_than: String,
    /// Which ended statuses are removed.
    pub statuses: Vec<String>,
    /// Tasks removed per transaction.
    pub batch_size: u32,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            interval_secs: 0,
            older_than: "30d".to_owned(),
            // Every ended status (`store::prune::ENDED_STATUSES`; a test of
            // `cli::prune` keeps the two the same).
            statuses: ["completed", "failed", "cancelled", "rejected"]
                .map(str::to_owned)
                .to_vec(),
            batch_size: 500,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn server(name: &str, command: Option<&str>, url: Option<&str>) -> McpServerSettings {
        McpServerSettings {
            name: name.to_owned(),
            command: command.map(str::to_owned),
            args: Vec::new(),
            env: BTreeMap::new(),
            url: url.map(str::to_owned),
            bearer_token: None,
            call_timeout_ms: None,
            effect: None,
            effects: BTreeMap::new(),
        }
    }

    #[test]
    fn mcp_entries_need_one_transport_and_a_unique_valid_name() {
        let mut tools = ToolsSettings {
            mcp: vec![
                server("fs", Some("npx"), None),
                server("web", None, Some("https://x/mcp")),
            ],
            ..ToolsSettings::default()
        };
        assert!(tools.validate().is_ok());
        assert!(matches!(
            tools.mcp[0].transport(),
            McpTransport::Stdio { .. }
        ));
        assert!(matches!(
            tools.mcp[1].transport(),
            McpTransport::Http { .. }
        ));
        for bad in [
            server("both", Some("npx"), Some("http://x")),
            server("neither", None, None),
            server("bad name", Some("npx"), None),
            server("ftp", None, Some("ftp://x")),
        ] {
            let tools = ToolsSettings {
                mcp: vec![bad],
                ..ToolsSettings::default()
            };
            assert!(tools.validate().is_err(), "{tools:?}");
        }
        tools.mcp.push(server("fs", Some("other"), None));
        assert!(tools.validate().is_err());
    }

    #[test]
    fn metrics_bind_empty_means_off() {
        let off = MetricsSettings::default();
        assert_eq!(off.address().ok().flatten(), None);
        let on = MetricsSettings {
            bind: "127.0.0.1:9464".to_owned(),
        };
        assert!(on.address().ok().flatten().is_some());
        let bad = MetricsSettings {
            bind: "localhost".to_owned(),
        };
        assert!(bad.address().is_err());
    }

    #[test]
    fn files_without_the_new_sections_load_and_mcp_tables_parse() {
        let full = std::fs::read_to_string("config/default.toml").expect("config/default.toml");
        let mut kept = String::new();
        let mut skipping = false;
        for line in full.lines() {
            if line.starts_with('[') {
                skipping = matches!(line.trim(), "[tools]" | "[metrics]" | "[retention]");
            }
            if !skipping {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        let dir = std::env::temp_dir().join(format!("agentd-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (old, extra) = (dir.join("old.toml"), dir.join("mcp.toml"));
        std::fs::write(&old, kept).expect("old config");
        let toml = "[[tools.mcp]]\nname = \"fs\"\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]\n\
                    env = { API_Key = \"k\" }\n\n[[tools.mcp]]\nname = \"web\"\n\
                    url = \"http://127.0.0.1:3001/mcp\"\ncall_timeout_ms = 500\n\
                    effect = \"idempotent\"\neffects = { \"get.page\" = \"read_only\" }\n";
        std::fs::write(&extra, toml).expect("mcp config");
        let settings = crate::config::Settings::load_from(&old, None).expect("old file loads");
        assert!(settings.tools.mcp.is_empty() && settings.metrics.bind.is_empty());
        assert_eq!(settings.retention.interval_secs, 0);
        let settings = crate::config::Settings::load_from(&old, Some(&extra)).expect("mcp loads");
        let _ = std::fs::remove_dir_all(&dir);
        let [fs, web] = settings.tools.mcp.as_slice() else {
            panic!("{:?}", settings.tools.mcp)
        };
        assert_eq!(fs.args, ["-y", "x"]);
        assert_eq!(
            fs.env.get("API_Key").map(String::as_str),
            Some("k"),
            "env keys keep case"
        );
        assert_eq!(
            web.call_timeout(&settings.tools),
            Duration::from_millis(500)
        );
        assert_eq!(
            (fs.effect, fs.effects.len()),
            (None, 0),
            "effects are optional"
        );
        assert_eq!(web.effect, Some(ToolEffect::Idempotent));
        assert_eq!(
            web.effects.get("get.page"),
            Some(&ToolEffect::ReadOnly),
            "tool names keep their case and dots"
        );
    }

    #[test]
    fn an_unknown_effect_name_is_refused() {
        let dir = std::env::temp_dir().join(format!("agentd-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let extra = dir.join("bad.toml");
        let toml = "[[tools.mcp]]\nname = \"fs\"\ncommand = \"npx\"\neffect = \"harmless\"\n";
        std::fs::write(&extra, toml).expect("config");
        let loaded =
            crate::config::Settings::load_from(Path::new("config/default.toml"), Some(&extra));
        let _ = std::fs::remove_dir_all(&dir);
        let error = format!(
            "{:#}",
            loaded.expect_err("an unknown effect fails the load")
        );
        assert!(error.contains("harmless"), "{error}");
    }
}
