//! [`ToolRegistry`]: tool name → source. It decides which specs an agent is offered and
//! runs requested calls so that nothing a model asks for can fail the task: an unknown or
//! ungranted tool, unparsable or ill-fitting arguments, a tool error, even a panicking tool
//! all become a [`ToolCallResult`] with `success: false` and a precise `error` that the
//! next recursion sees.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt as _;
use serde_json::Value;

use crate::core::types::{ToolCallRequest, ToolCallResult, ToolSpec};
use crate::ports::{ToolOutput, ToolSource};

use super::builtin::BuiltinTools;
use super::schema;

/// A tool and the source that runs it.
#[derive(Clone)]
struct Entry {
    spec: ToolSpec,
    source: Arc<dyn ToolSource>,
}

/// Every tool the worker knows, by name, in the order the sources listed them.
#[derive(Clone)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.all_tool_names())
            .finish()
    }
}

impl ToolRegistry {
    /// Collects the tools of `sources` (listed once, now). When two sources offer the same
    /// name, the first source wins and a warning is logged.
    pub fn new(sources: Vec<Arc<dyn ToolSource>>) -> Self {
        let mut registry = Self {
            entries: Vec::new(),
            by_name: HashMap::new(),
        };
        for source in sources {
            for spec in source.list_tools() {
                if registry.by_name.contains_key(&spec.name) {
                    tracing::warn!(tool = %spec.name, "duplicate tool name; keeping the first source's tool");
                    continue;
                }
                registry
                    .by_name
                    .insert(spec.name.clone(), registry.entries.len());
                registry.entries.push(Entry {
                    spec,
                    source: Arc::clone(&source),
                });
            }
        }
        registry
    }

    /// A registry of the built-in tools only.
    pub fn builtin() -> Self {
        Self::new(vec![Arc::new(BuiltinTools)])
    }

    /// Every known tool name, in registration order.
    pub fn all_tool_names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.spec.name.clone()).collect()
    }

    /// The specs an agent may use: `granted` None = every tool; Some(list) = only those
    /// (unknown names ignored). Registration order either way.
    pub fn specs_for(&self, granted: Option<&[String]>) -> Vec<ToolSpec> {
        self.entries
            .iter()
            .filter(|e| is_granted(granted, &e.spec.name))
            .map(|e| e.spec.clone())
            .collect()
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
    ) -> ToolCallResult {
        let started = Instant::now();
        let (arguments, parse_error) = parse_arguments(&request.arguments);
        let outcome = self
            .run(granted, &request.name, &arguments, parse_error)
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
    ) -> Result<ToolOutput, String> {
        let Some(entry) = self.by_name.get(name).map(|&i| &self.entries[i]) else {
            return Err(self.unknown_tool(granted, name));
        };
        if !is_granted(granted, name) {
            return Err(format!("tool '{name}' is not granted to this agent"));
        }
        if let Some(error) = parse_error {
            return Err(error);
        }
        schema::validate(&entry.spec.parameters, arguments)?;
        AssertUnwindSafe(entry.source.call_tool(name, arguments.clone()))
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

fn is_granted(granted: Option<&[String]>, name: &str) -> bool {
    granted.is_none_or(|list| list.iter().any(|g| g == name))
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
