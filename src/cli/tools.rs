//! `agentd tools`: every tool a worker with this configuration would offer, built-in and
//! MCP, with its source and effect (CONTRACT §7). MCP servers are started (or reached) for
//! the listing and stopped again.

use std::process::ExitCode;

use crate::config::Settings;
use crate::tools::{ToolInfo, ToolRegistry};

/// Longest description shown per tool, in characters.
const DESCRIPTION_CHARS: usize = 72;

/// Lists the tools.
pub async fn run(settings: &Settings) -> anyhow::Result<ExitCode> {
    let registry = ToolRegistry::from_settings(&settings.tools).await?;
    let catalog = registry.catalog();
    registry.shutdown().await;
    super::out::text(&render(&catalog))?;
    Ok(ExitCode::SUCCESS)
}

/// Width of the effect column: the longest effect name, `side_effect`.
const EFFECT_WIDTH: usize = 11;

/// The listing: one line per tool, then how grants and effects work.
pub fn render(catalog: &[ToolInfo]) -> String {
    let width = catalog
        .iter()
        .map(|t| t.spec.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let source_width = catalog
        .iter()
        .map(|t| t.source.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:<width$}  {:<source_width$}  {:<EFFECT_WIDTH$}  description\n",
        "name", "source", "effect"
    );
    for tool in catalog {
        out.push_str(&format!(
            "{:<width$}  {:<source_width$}  {:<EFFECT_WIDTH$}  {}\n",
            tool.spec.name,
            tool.source,
            tool.effect.as_str(),
            short(&tool.spec.description)
        ));
    }
    out.push_str(
        "\nAn agent whose `tools` is NULL gets the built-in tools; \
         MCP tools must be granted by name.\n\
         Effects: read_only (nothing outside agentd), idempotent (once per idempotency key), \
         side_effect (never run twice).\n",
    );
    out
}

/// The first line of a description, cut to [`DESCRIPTION_CHARS`].
fn short(description: &str) -> String {
    let line = description.lines().next().unwrap_or("").trim();
    if line.chars().count() <= DESCRIPTION_CHARS {
        return line.to_owned();
    }
    let cut: String = line.chars().take(DESCRIPTION_CHARS - 1).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::{ToolEffect, ToolSpec};

    #[test]
    fn lists_names_sources_effects_and_short_descriptions() {
        let mut catalog = ToolRegistry::builtin().catalog();
        catalog.push(ToolInfo {
            spec: ToolSpec {
                name: "srv__charge".to_owned(),
                description: "Charge a card".to_owned(),
                parameters: serde_json::json!({"type": "object"}),
            },
            source: "mcp:srv".to_owned(),
            granted_by_default: false,
            effect: ToolEffect::SideEffect,
        });
        let text = render(&catalog);
        let lines: Vec<&str> = text.lines().collect();
        let columns = |line: &str| {
            line.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(columns(lines[0]), "name source effect", "{text}");
        assert_eq!(columns(lines[1]), "calculate built-in read_only", "{text}");
        assert_eq!(
            columns(lines[4]),
            "srv__charge mcp:srv side_effect",
            "{text}"
        );
        let description_at = lines[0].find("description");
        assert_eq!(description_at, lines[4].find("Charge a card"), "aligned");
        assert!(text.contains("granted by name"));
        assert_eq!(short(&"x".repeat(100)).chars().count(), DESCRIPTION_CHARS);
        assert_eq!(short("first\nsecond"), "first");
    }
}
