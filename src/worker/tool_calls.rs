//! Runs the native tool calls of a CALL_TOOL recursion through the tool registry: all of them
//! concurrently, each announced by `tool.started` and closed by `tool.completed`, results
//! returned in call order. A failing tool is a result, never an error of the task.

use futures::future::join_all;
use serde_json::{Value, json};

use super::interrupt::Interrupt;
use super::task_run::TaskRun;
use crate::core::types::{ToolCallRequest, ToolCallResult};

impl TaskRun<'_> {
    /// Runs `calls`, committing their start and end events.
    pub(super) async fn run_tools(
        &mut self,
        calls: &[ToolCallRequest],
    ) -> anyhow::Result<Result<Vec<ToolCallResult>, Interrupt>> {
        let (trace_id, iteration) = self.open_recursion();
        for call in calls {
            let arguments = serde_json::from_str::<Value>(&call.arguments)
                .unwrap_or_else(|_| Value::String(call.arguments.clone()));
            self.log.push(
                "tool.started",
                trace_id,
                iteration,
                json!({"tool_call_id": call.id, "name": call.name, "arguments": arguments}),
            );
        }
        self.commit_step().await?;
        let registry = &self.deps.tools;
        let granted = self.granted.as_deref();
        let runs = join_all(calls.iter().map(|call| registry.call(granted, call)));
        let results = match self.stops.guard(runs).await {
            Ok(results) => results,
            Err(interrupt) => return Ok(Err(interrupt)),
        };
        for result in &results {
            let mut data = json!({
                "tool_call_id": result.tool_call_id,
                "name": result.name,
                "success": result.success,
                "duration_ms": result.duration_ms,
            });
            if let Some(map) = data.as_object_mut() {
                match (&result.result, &result.error) {
                    (_, Some(error)) => map.insert("error".into(), json!(error)),
                    (value, None) => map.insert("result".into(), json!(value)),
                };
            }
            self.log.push("tool.completed", trace_id, iteration, data);
        }
        self.commit_step().await?;
        Ok(Ok(results))
    }

    /// The trace_id and iteration of the recursion in progress.
    fn open_recursion(&self) -> (Option<uuid::Uuid>, Option<u32>) {
        (
            self.machine.current_trace_id(),
            Some(self.machine.iteration()),
        )
    }
}
