//! `agentd tools`: every tool a worker with this configuration would offer, built-in and
//! MCP, with its source. MCP servers are started (or reached) for the listing and stopped
//! again.

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
    print!("{}", render(&catalog));
    Ok(ExitCode::SUCCESS)
}

/// The listing: one line per tool, then how grants work.
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
        "{:<width$}  {:<source_width$}  description\n",
        "name", "source"
    );
    for tool in catalog {
        out.push_str(&format!(
            "{:<width$}  {:<source_width$}  {}\n",
            tool.spec.name,
            tool.source,
            short(&tool.spec.description)
        ));
    }
    out.push_str(
        "\nAn agent whose `tools` is NULL gets the built-in tools; \
         MCP tools must be granted by name.\n",
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

    #[test]
    fn lists_names_sources_and_short_descriptions() {
        let catalog = ToolRegistry::builtin().catalog();
        let text = render(&catalog);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("name"));
        assert!(lines[1].starts_with("calculate"), "{text}");
        assert!(lines[1].contains("built-in"));
        assert!(text.contains("granted by name"));
        assert_eq!(short(&"x".repeat(100)).chars().count(), DESCRIPTION_CHARS);
        assert_eq!(short("first\nsecond"), "first");
    }
}
