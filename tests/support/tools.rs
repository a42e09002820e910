//! A tool source written for the tests, offered by an in-process worker next to the
//! built-ins (see `TestEnv::start_with_tools`).

use std::time::Duration;

use agentd::core::types::ToolSpec;
use agentd::ports::{ToolCallContext, ToolOutput, ToolSource};
use async_trait::async_trait;
use serde_json::{Value, json};

/// Tools written for the tests: `sleep_ms` waits, `big_output` returns a long text.
pub struct TestTools;

#[async_trait]
impl ToolSource for TestTools {
    fn list_tools(&self) -> Vec<ToolSpec> {
        let schema = |field: &str| json!({"type": "object", "properties": {field: {"type": "integer"}}, "required": [field]});
        vec![
            ToolSpec {
                name: "sleep_ms".into(),
                description: "waits".into(),
                parameters: schema("ms"),
            },
            ToolSpec {
                name: "big_output".into(),
                description: "long text".into(),
                parameters: schema("chars"),
            },
        ]
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        _context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String> {
        match name {
            "sleep_ms" => {
                let ms = arguments["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(ToolOutput {
                    result: json!({"slept_ms": ms}),
                    memo: None,
                })
            }
            "big_output" => {
                let chars = arguments["chars"].as_u64().unwrap_or(0) as usize;
                let text: String = "lorem ipsum dolor sit amet "
                    .chars()
                    .cycle()
                    .take(chars)
                    .collect();
                Ok(ToolOutput {
                    result: json!({"text": text}),
                    memo: None,
                })
            }
            other => Err(format!("no tool {other}")),
        }
    }
}
