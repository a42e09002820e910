//! Runs the native tool calls of a CALL_TOOL recursion through the tool registry: up to
//! `worker.tool_concurrency` at once, each bounded by its timeout (and by what is left of the
//! recursion's), announced by `tool.started` and closed by `tool.completed`, results returned
//! in call order. A failing or hung tool is a result, never an error of the task. Events of
//! tools that end quickly are committed with the rest of their recursion.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::deps::WorkerDeps;
use super::interrupt::Interrupt;
use super::task_run::TaskRun;
use crate::core::types::{ToolCallRequest, ToolCallResult};

/// How long tools may run before their `tool.started` events are committed and published on
/// their own. Tools that finish sooner are committed together with the rest of their
/// recursion: one transaction and one publish per recursion instead of three.
const ANNOUNCE_AFTER: Duration = Duration::from_millis(20);

impl TaskRun<'_> {
    /// Runs `calls` before `deadline`, recording their start and end events.
    pub(super) async fn run_tools(
        &mut self,
        calls: &[ToolCallRequest],
        deadline: Instant,
    ) -> anyhow::Result<Result<Vec<ToolCallResult>, Interrupt>> {
        let (trace_id, iteration) = (
            self.machine.current_trace_id(),
            Some(self.machine.iteration()),
        );
        for call in calls {
            self.log.push(
                "tool.started",
                trace_id,
                iteration,
                json!({"tool_call_id": call.id, "name": call.name, "arguments": parsed(call)}),
            );
        }
        let timeout = self
            .deps
            .tool_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        let (deps, granted, stops) = (self.deps, self.granted.clone(), self.stops.clone());
        let slots = Semaphore::new(deps.tool_concurrency);
        let runs = join_all(
            calls
                .iter()
                .map(|call| run_tool(deps, granted.as_deref(), call, timeout, &slots)),
        );
        let runs = stops.guard(runs);
        tokio::pin!(runs);
        let finished = tokio::select! {
            finished = &mut runs => finished,
            () = tokio::time::sleep(ANNOUNCE_AFTER) => {
                self.commit_step().await?;
                runs.await
            }
        };
        let results = match finished {
            Ok(results) => results,
            Err(interrupt) => return Ok(Err(interrupt)),
        };
        for result in &results {
            self.log.push(
                "tool.completed",
                trace_id,
                iteration,
                completed_data(result),
            );
        }
        Ok(Ok(results))
    }
}

/// One call through the registry once a slot is free, cut at `timeout`.
async fn run_tool(
    deps: &WorkerDeps,
    granted: Option<&[String]>,
    call: &ToolCallRequest,
    timeout: Duration,
    slots: &Semaphore,
) -> ToolCallResult {
    let _slot = slots.acquire().await;
    let started = std::time::Instant::now();
    match tokio::time::timeout(timeout, deps.tools.call(granted, call, Default::default())).await {
        Ok(result) => result,
        Err(_) => ToolCallResult {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: parsed(call),
            success: false,
            result: None,
            error: Some(format!(
                "tool call timed out after {} ms",
                timeout.as_millis()
            )),
            memo: None,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        },
    }
}

/// The call's arguments as JSON, or as the raw string when they are not JSON.
fn parsed(call: &ToolCallRequest) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

/// The data of a `tool.completed` event.
fn completed_data(result: &ToolCallResult) -> Value {
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
    data
}
