//! [`ToolRegistry`]: tool name → source. It decides which specs an agent is offered and
//! runs requested calls so that nothing a model asks for can fail the task: an unknown or
//! ungranted tool, unparsable or ill-fitting arguments, a tool error, even a panicking tool
//! all become a [`ToolCallResult`] with `success: false` and a precise `error` that the
//! next recursion sees.
//!
//! Grants (CONTRACT §4): an agent whose `tools` is NULL gets the tools of the sources that
//! are granted by default (the built-ins); MCP tools are only offered and run when granted
//! by name.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures::FutureExt as _;
use serde_json::Value;

use crate::config::ToolsSettings;
use crate::core::types::{ToolCallRequest, ToolCallResult, ToolEffect, ToolSpec};
use crate::ports::{ToolCallContext, ToolOutput, ToolSource};

use super::builtin::BuiltinTools;
use super::mcp::McpToolSource;
use super::schema;

/// The source label of the built-in tools.
pub const BUILTIN_SOURCE: &str = "built-in";

/// A tool and the source that runs it.
#[derive(Clone)]
struct Entry {
    spec: ToolSpec,
    source: Arc<dyn ToolSource>,
    /// `built-in`, `mcp:<server>`, ...
    label: Arc<str>,
    /// What running it does outside agentd, as its source says.
    effect: ToolEffect,
    /// Offered to agents whose grant list is NULL.
    by_default: bool,
}

/// A tool as `agentd tools` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    pub spec: ToolSpec,
    /// Where it comes from: `built-in` or `mcp:<server>`.
    pub source: String,
    /// Whether an agent with `tools` NULL gets it.
    pub granted_by_default: bool,
    /// What running it does outside agentd.
    pub effect: ToolEffect,
}

/// Every tool the worker knows, by name, in the order the sources listed them.
#[derive(Clone)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    mcp: Vec<Arc<McpToolSource>>,
    /// The specs of agents without a grant list, built once and shared by their tasks.
    default_specs: OnceLock<Arc<[ToolSpec]>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.all_tool_names())
            .finish()
    }
}

impl ToolRegistry {
    /// Collects the tools of `sources` (listed once, now), all granted by default and
    /// labelled built-in. When two sources offer the same name, the first source wins and
    /// a warning is logged.
    pub fn new(sources: Vec<Arc<dyn ToolSource>>) -> Self {
        let mut registry = Self {
            entries: Vec::new(),
            by_name: HashMap::new(),
            mcp: Vec::new(),
            default_specs: OnceLock::new(),
        };
        for source in sources {
            registry.add(source, BUILTIN_SOURCE, true);
        }
        registry
    }

    /// Adds the tools of one more source, labelled `label`; `by_default`: offered to agents
    /// whose grant list is NULL (otherwise only when granted by name).
    pub fn add(&mut self, source: Arc<dyn ToolSource>, label: &str, by_default: bool) {
        self.default_specs = OnceLock::new();
        let label: Arc<str> = Arc::from(label);
        for spec in source.list_tools() {
            if self.by_name.contains_key(&spec.name) {
                tracing::warn!(tool = %spec.name, source = %label,
                    "duplicate tool name; keeping the first source's tool");
                continue;
            }
            self.by_name.insert(spec.name.clone(), self.entries.len());
            let effect = source.effect(&spec.name);
            self.entries.push(Entry {
                effect,
                spec,
                source: Arc::clone(&source),
                label: Arc::clone(&label),
                by_default,
            });
        }
    }

    /// A registry of the built-in tools only.
    pub fn builtin() -> Self {
        Self::new(vec![Arc::new(BuiltinTools)])
    }

    /// The built-ins plus the tools of every `[[tools.mcp]]` server, connected now (all at
    /// once). MCP tools are granted by name only. Fails when a server cannot be reached.
    pub async fn from_settings(settings: &ToolsSettings) -> anyhow::Result<Self> {
        let connects = settings
            .mcp
            .iter()
            .map(|server| McpToolSource::connect(server, settings));
        let sources = futures::future::try_join_all(connects).await?;
        let mut registry = Self::builtin();
        for source in sources {
            let source = Arc::new(source);
            let label = format!("mcp:{}", source.server());
            registry.add(Arc::clone(&source) as Arc<dyn ToolSource>, &label, false);
            registry.mcp.push(source);
        }
        crate::metrics::register_tools(&registry.all_tool_names());
        Ok(registry)
    }

    /// Sets every MCP server's `agentd_mcp_server_up` gauge from its current state. The
    /// servers connect before the metrics recorder is installed, so whoever installs it
    /// calls this afterwards, or the gauges of servers that never went down stay absent.
    pub fn report_status(&self) {
        for source in &self.mcp {
            source.report_status();
        }
    }

    /// Stops the MCP servers this registry started (waiting for them to exit).
    pub async fn shutdown(&self) {
        futures::future::join_all(self.mcp.iter().map(|source| source.shutdown())).await;
    }

    /// Every tool with its source, in registration order.
    pub fn catalog(&self) -> Vec<ToolInfo> {
        self.entries
            .iter()
            .map(|e| ToolInfo {
                spec: e.spec.clone(),
                source: e.label.to_string(),
                granted_by_default: e.by_default,
                effect: e.effect,
            })
            .collect()
    }

    /// Every known tool name, in registration order.
    pub fn all_tool_names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.spec.name.clone()).collect()
    }

    /// The specs an agent may use: `granted` None = every tool granted by default (the
    /// built-ins); Some(list) = only those (unknown names ignored). Registration order.
    pub fn specs_for(&self, granted: Option<&[String]>) -> Vec<ToolSpec> {
        self.entries
            .iter()
            .filter(|e| is_granted(granted, e))
            .map(|e| e.spec.clone())
            .collect()
    }

    /// [`Self::specs_for`] shared: agents without a grant list (most) get one copy between
    /// all their tasks instead of one each.
    pub fn shared_specs_for(&self, granted: Option<&[String]>) -> Arc<[ToolSpec]> {
        match granted {
            None => Arc::clone(
                self.default_specs
                    .get_or_init(|| self.specs_for(None).into()),
            ),
            Some(_) => self.specs_for(granted).into(),
        }
    }

    /// What running `name` does outside agentd. A name no source offers cannot run, so it
    /// counts as read-only (its call fails at once without touching anything).
    pub fn effect_of(&self, name: &str) -> ToolEffect {
        self.by_name
            .get(name)
            .map_or(ToolEffect::ReadOnly, |&i| self.entries[i].effect)
    }

    /// Runs one requested call and never fails: unknown tool, not granted, arguments not
    /// valid JSON, arguments not fitting the tool's JSON schema, a tool error or a tool
    /// panic → `success: false` with a precise `error`; success → `result` and `memo`.
    /// `arguments` is the parsed JSON, or the raw string when it did not parse (an empty
    /// string counts as `{}`); `duration_ms` covers the whole call.
    pub async fn call(
        &self,
        granted: Option<&[String]>,
        request: &ToolCallRequest,
        context: ToolCallContext<'_>,
    ) -> ToolCallResult {
        let started = Instant::now();
        let (arguments, parse_error) = parse_arguments(&request.arguments);
        let outcome = self
            .run(granted, &request.name, &arguments, parse_error, context)
            .await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (success, result, error, memo) = match outcome {
            Ok(output) => (true, Some(output.result), None, output.memo),
            Err(error) => (false, None, Some(error), None),
        };
        tracing::debug!(tool = %request.name, success, duration_ms, "tool call");
        ToolCallResult {
            tool_call_id: request.id.clone(),
            name: request.name.clone(),
            arguments,
            success,
            result,
            error,
            memo,
            duration_ms,
        }
    }

    async fn run(
        &self,
        granted: Option<&[String]>,
        name: &str,
        arguments: &Value,
        parse_error: Option<String>,
        context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String> {
        let Some(entry) = self.by_name.get(name).map(|&i| &self.entries[i]) else {
            return Err(self.unknown_tool(granted, name));
        };
        if !is_granted(granted, entry) {
            return Err(format!("tool '{name}' is not granted to this agent"));
        }
        if let Some(error) = parse_error {
            return Err(error);
        }
        schema::validate(&entry.spec.parameters, arguments)?;
        AssertUnwindSafe(entry.source.call_tool(name, arguments.clone(), context))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(format!("tool '{name}' failed unexpectedly (panicked)")))
    }

    fn unknown_tool(&self, granted: Option<&[String]>, name: &str) -> String {
        let available: Vec<String> = self
            .specs_for(granted)
            .into_iter()
            .map(|spec| spec.name)
            .collect();
        if available.is_empty() {
            format!("unknown tool '{name}'; no tools are available")
        } else {
            format!(
                "unknown tool '{name}'; available tools: {}",
                available.join(", ")
            )
        }
    }
}

fn is_granted(granted: Option<&[String]>, entry: &Entry) -> bool {
    match granted {
        None => entry.by_default,
        Some(list) => list.contains(&entry.spec.name),
    }
}

/// The arguments as JSON, or the raw string plus why it did not parse.
fn parse_arguments(raw: &str) -> (Value, Option<String>) {
    if raw.trim().is_empty() {
        return (Value::Object(Default::default()), None);
    }
    match serde_json::from_str(raw) {
        Ok(value) => (value, None),
        Err(e) => (
            Value::String(raw.to_owned()),
            Some(format!("arguments are not valid JSON: {e}")),
        ),
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
