//! [`BuiltinTools`]: the tools agentd ships with (contract §5), as one [`ToolSource`].

use async_trait::async_trait;
use serde_json::Value;

use crate::core::types::{ToolEffect, ToolSpec};
use crate::ports::{ToolCallContext, ToolOutput, ToolSource};

use super::{calculate, current_time, take_memo};

/// The built-in tools: `calculate`, `take_memo` and `current_time`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinTools;

impl BuiltinTools {
    /// The names of the built-in tools, in the order they are offered.
    pub fn names() -> [&'static str; 3] {
        [calculate::NAME, take_memo::NAME, current_time::NAME]
    }
}

#[async_trait]
impl ToolSource for BuiltinTools {
    fn list_tools(&self) -> Vec<ToolSpec> {
        vec![calculate::spec(), take_memo::spec(), current_time::spec()]
    }

    /// The built-ins act on nothing outside agentd (`take_memo` writes the task's own
    /// memory, which is part of its checkpoint).
    fn effect(&self, _name: &str) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        _context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String> {
        match name {
            calculate::NAME => calculate::run(&arguments),
            take_memo::NAME => take_memo::run(&arguments),
            current_time::NAME => current_time::run(&arguments),
            other => Err(format!("unknown built-in tool '{other}'")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lists_the_three_tools_with_object_schemas() {
        let specs = BuiltinTools.list_tools();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, BuiltinTools::names());
        for spec in &specs {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(!spec.description.is_empty());
        }
    }

    #[tokio::test]
    async fn dispatches_by_name() {
        let sum = BuiltinTools
            .call_tool(
                "calculate",
                json!({"expression": "1+2"}),
                ToolCallContext::default(),
            )
            .await;
        assert_eq!(sum.map(|o| o.result), Ok(json!(3)));
        let unknown = BuiltinTools
            .call_tool("nope", json!({}), ToolCallContext::default())
            .await;
        assert_eq!(unknown, Err("unknown built-in tool 'nope'".to_owned()));
    }
}
