//! Between MCP and agentd's tool types: namespaced tool names that are valid OpenAI function
//! names (`^[a-zA-Z0-9_-]{1,64}$`), tool specs with the server's JSON schema passed through,
//! and `tools/call` results turned into a [`ToolOutput`] or an error value.

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::Value;

use crate::core::storable;
use crate::core::types::ToolSpec;
use crate::ports::ToolOutput;

/// Longest tool name an OpenAI-compatible API accepts.
const MAX_NAME: usize = 64;

/// `<server>__<tool>`, with characters outside `[a-zA-Z0-9_-]` replaced by `_`. A name
/// longer than 64 characters is cut and ends with a hash of the full name, so two long
/// names stay distinct.
pub fn namespaced(server: &str, tool: &str) -> String {
    let full: String = format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = format!("{:08x}", fnv1a(full.as_bytes()));
    format!("{}_{hash}", &full[..MAX_NAME - hash.len() - 1])
}

/// 32-bit FNV-1a: stable across builds and platforms (unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// How an MCP tool is offered to the model under its namespaced name.
pub(crate) fn spec(server: &str, tool: &Tool) -> ToolSpec {
    let description = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("Tool '{}' of the MCP server '{server}'", tool.name));
    ToolSpec {
        name: namespaced(server, &tool.name),
        description,
        parameters: Value::Object((*tool.input_schema).clone()),
    }
}

/// A `tools/call` result as agentd's tool outcome: `isError` → the error value (the tool's
/// text); else the structured content when the server sent one, else the text (one block)
/// or the list of texts, else the content blocks as JSON. What a server sends may hold
/// any Unicode: the outcome is made storable ([`storable`]) here, where it enters agentd.
pub(crate) fn output(result: CallToolResult) -> Result<ToolOutput, String> {
    match unchecked_output(result) {
        Ok(output) => Ok(ToolOutput {
            result: storable::json_owned(output.result),
            memo: output.memo.map(storable::owned),
        }),
        Err(error) => Err(storable::owned(error)),
    }
}

fn unchecked_output(result: CallToolResult) -> Result<ToolOutput, String> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        let message = match (texts.is_empty(), &result.structured_content) {
            (false, _) => texts.join("\n"),
            (true, Some(value)) => value.to_string(),
            (true, None) => "the tool reported an error without a message".to_owned(),
        };
        return Err(message);
    }
    let value = match (
        result.structured_content,
        texts.len() == result.content.len(),
    ) {
        (Some(value), _) => value,
        (None, true) if texts.len() == 1 => Value::String(texts[0].to_owned()),
        (None, true) => Value::Array(
            texts
                .iter()
                .map(|t| Value::String((*t).to_owned()))
                .collect(),
        ),
        (None, false) => blocks_json(&result.content),
    };
    Ok(ToolOutput {
        result: value,
        memo: None,
    })
}

fn blocks_json(blocks: &[ContentBlock]) -> Value {
    serde_json::to_value(blocks)
        .unwrap_or_else(|e| Value::String(format!("unreadable content: {e}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn is_valid_function_name(name: &str) -> bool {
        (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn names_are_namespaced_sanitized_and_bounded() {
        assert_eq!(namespaced("fs", "read_file"), "fs__read_file");
        assert_eq!(namespaced("web", "get.page/v2"), "web__get_page_v2");
        let long_a = namespaced("server", &"a".repeat(80));
        let long_b = namespaced("server", &format!("{}b", "a".repeat(79)));
        assert_eq!(long_a.len(), 64);
        assert_ne!(long_a, long_b);
        for name in [&long_a, &long_b, &namespaced("s", "ü ö")] {
            assert!(is_valid_function_name(name), "{name}");
        }
    }

    #[test]
    fn specs_pass_the_schema_through() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "number"}}});
        let Value::Object(schema) = schema.clone() else {
            unreachable!()
        };
        let tool = Tool::new("add", "Add two numbers", Arc::new(schema));
        let spec = spec("calc", &tool);
        assert_eq!(spec.name, "calc__add");
        assert_eq!(spec.description, "Add two numbers");
        assert_eq!(spec.parameters["properties"]["a"]["type"], "number");
    }

    #[test]
    fn results_become_values_or_error_values() {
        let text = CallToolResult::success(vec![ContentBlock::text("5")]);
        assert_eq!(output(text).map(|o| o.result), Ok(json!("5")));
        let two = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(output(two).map(|o| o.result), Ok(json!(["a", "b"])));
        let structured = CallToolResult::structured(json!({"sum": 5}));
        assert_eq!(output(structured).map(|o| o.result), Ok(json!({"sum": 5})));
        let failed = CallToolResult::error(vec![ContentBlock::text("no such file")]);
        assert_eq!(output(failed), Err("no such file".to_owned()));
        let nul = CallToolResult::success(vec![ContentBlock::text("a\0b")]);
        assert_eq!(output(nul).map(|o| o.result), Ok(json!("a\u{FFFD}b")));
        let nul = CallToolResult::structured(json!({"k\u{0}": ["\u{0}"]}));
        let stored = json!({"k\u{FFFD}": ["\u{FFFD}"]});
        assert_eq!(output(nul).map(|o| o.result), Ok(stored));
        let nul = CallToolResult::error(vec![ContentBlock::text("no\0such file")]);
        assert_eq!(output(nul), Err("no\u{FFFD}such file".to_owned()));
        let image = CallToolResult::success(vec![ContentBlock::image("AAAA", "image/png")]);
        let value = output(image).map(|o| o.result).unwrap_or_default();
        assert_eq!(value[0]["type"], "image", "{value}");
    }
}
