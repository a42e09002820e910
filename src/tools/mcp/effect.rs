//! The effect of each MCP tool (CONTRACT §7): a per-tool override from the server's
//! `effects`, else the server's `effect`, else what the tool's MCP annotations say. It is
//! decided once, from the listing at connect, so that a server restarted with other
//! annotations cannot change how a running task treats its calls.

use rmcp::model::Tool;

use crate::config::McpServerSettings;
use crate::core::types::ToolEffect;

use super::convert::namespaced;

/// The effect of `tool`, one of the tools of the server `settings` configures.
pub(crate) fn resolve(settings: &McpServerSettings, tool: &Tool) -> ToolEffect {
    settings
        .effects
        .get(tool.name.as_ref())
        .or_else(|| {
            settings
                .effects
                .get(&namespaced(&settings.name, &tool.name))
        })
        .copied()
        .or(settings.effect)
        .unwrap_or_else(|| from_annotations(tool))
}

/// `readOnlyHint` true → read-only; else `idempotentHint` true → idempotent; else a side
/// effect. MCP's own defaults say the same: a tool that declares nothing may do anything.
pub(crate) fn from_annotations(tool: &Tool) -> ToolEffect {
    let Some(hints) = &tool.annotations else {
        return ToolEffect::SideEffect;
    };
    if hints.read_only_hint == Some(true) {
        ToolEffect::ReadOnly
    } else if hints.idempotent_hint == Some(true) {
        ToolEffect::Idempotent
    } else {
        ToolEffect::SideEffect
    }
}

/// The keys of the server's `effects` that name none of `tools`, by the server's name or
/// the namespaced one: most likely a typo, worth a warning (the server may also have
/// dropped the tool, so not an error).
pub(crate) fn unknown_overrides<'a>(
    settings: &'a McpServerSettings,
    tools: &[Tool],
) -> Vec<&'a str> {
    settings
        .effects
        .keys()
        .filter(|key| {
            !tools.iter().any(|tool| {
                tool.name == key.as_str() || namespaced(&settings.name, &tool.name) == **key
            })
        })
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use rmcp::model::ToolAnnotations;

    use super::*;

    fn tool(name: &str, hints: Option<ToolAnnotations>) -> Tool {
        let tool = Tool::new(name.to_owned(), "a tool", Arc::new(Default::default()));
        match hints {
            Some(hints) => tool.with_annotations(hints),
            None => tool,
        }
    }

    fn server(effect: Option<ToolEffect>, effects: &[(&str, ToolEffect)]) -> McpServerSettings {
        McpServerSettings {
            name: "srv".to_owned(),
            command: Some("srv".to_owned()),
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            bearer_token: None,
            call_timeout_ms: None,
            effect,
            effects: effects.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    #[test]
    fn annotations_decide_when_nothing_is_configured() {
        use ToolEffect::*;
        let plain = server(None, &[]);
        let read = ToolAnnotations::new().read_only(true);
        let both = ToolAnnotations::new().read_only(true).idempotent(true);
        let idempotent = ToolAnnotations::new().read_only(false).idempotent(true);
        let destructive = ToolAnnotations::new().destructive(true);
        let cases = [
            (None, SideEffect),
            (Some(ToolAnnotations::new()), SideEffect),
            (Some(read), ReadOnly),
            (Some(both), ReadOnly),
            (Some(idempotent), Idempotent),
            (Some(destructive), SideEffect),
        ];
        for (hints, expected) in cases {
            let described = format!("{hints:?}");
            assert_eq!(resolve(&plain, &tool("t", hints)), expected, "{described}");
        }
    }

    #[test]
    fn configuration_overrides_per_tool_then_per_server() {
        use ToolEffect::*;
        let read = || Some(ToolAnnotations::new().read_only(true));
        let settings = server(
            Some(Idempotent),
            &[("get.page", ReadOnly), ("srv__send", SideEffect)],
        );
        assert_eq!(resolve(&settings, &tool("get.page", None)), ReadOnly);
        assert_eq!(resolve(&settings, &tool("send", read())), SideEffect);
        assert_eq!(resolve(&settings, &tool("other", read())), Idempotent);
        let only_tools = server(None, &[("send", Idempotent)]);
        assert_eq!(resolve(&only_tools, &tool("send", None)), Idempotent);
        assert_eq!(resolve(&only_tools, &tool("other", read())), ReadOnly);
    }

    #[test]
    fn overrides_naming_no_tool_are_reported() {
        let settings = server(
            None,
            &[
                ("get.page", ToolEffect::ReadOnly),
                ("srv__send", ToolEffect::ReadOnly),
                ("typo", ToolEffect::ReadOnly),
            ],
        );
        let tools = [tool("get.page", None), tool("send", None)];
        assert_eq!(unknown_overrides(&settings, &tools), ["typo"]);
    }
}
