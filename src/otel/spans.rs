//! A committed step as OpenTelemetry spans (GenAI semantic conventions, plus OpenInference's
//! `openinference.span.kind` so that Arize Phoenix draws the tree as an agent's):
//!
//! - the task: `invoke_agent {agent}` (`gen_ai.operation.name = invoke_agent`), trace id =
//!   task id, span id derived from it, exported by the step that ends the task, from the
//!   task's `created_at` to its end, with its status, iterations and spending;
//! - each recursion: `recursion {n}`, child of the task, `agentd.trace_id`, action and status;
//! - each LLM attempt: `chat {model}` (`gen_ai.operation.name = chat`,
//!   `gen_ai.request.model`, `gen_ai.usage.input_tokens` / `output_tokens`), child of its
//!   recursion; an attempt after the first carries a `gen_ai.retry` event, a failed one the
//!   status ERROR and `error.type`;
//! - each tool call: `execute_tool {name}` (`gen_ai.tool.name`, `gen_ai.tool.call.id`,
//!   `agentd.tool.effect`, `agentd.tool.success`), child of its recursion.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use uuid::Uuid;

use crate::store::step::{Progress, StepWrite};

/// What every span of a task needs to know about it.
#[derive(Debug, Clone)]
pub struct TaskSpan {
    pub task_id: Uuid,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub model: String,
    pub created_at: DateTime<Utc>,
}

/// The trace id of a task: its id.
pub fn trace_id(task_id: Uuid) -> TraceId {
    TraceId::from_bytes(*task_id.as_bytes())
}

/// A span id from a UUID: its two halves XORed (a v7's time half and its random half both
/// count), never zero.
pub fn span_id(id: Uuid) -> SpanId {
    let bytes = id.as_bytes();
    let mut half = [0u8; 8];
    for (i, byte) in half.iter_mut().enumerate() {
        *byte = bytes[i] ^ bytes[8 + i];
    }
    if half == [0; 8] {
        half[7] = 1;
    }
    SpanId::from_bytes(half)
}

struct RecursionSpan {
    trace_id: Uuid,
    iteration: u32,
    step_id: Option<String>,
    action_type: Option<String>,
    status: &'static str,
    error_log: Option<String>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
}

struct ToolSpan {
    parent: Uuid,
    name: String,
    tool_call_id: String,
    effect: &'static str,
    state: &'static str,
    success: bool,
    error: Option<String>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
}

struct LlmSpan {
    parent: Uuid,
    model: String,
    attempt: u32,
    status: String,
    error: Option<String>,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    cost_usd: Option<f64>,
    queued_ms: Option<u64>,
    started_at: DateTime<Utc>,
    latency_ms: u64,
}

struct TaskEnd {
    status: &'static str,
    iterations: u32,
    fail_reason: Option<&'static str>,
    error: Option<String>,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: Option<f64>,
    tool_calls: u64,
    at: DateTime<Utc>,
}

/// The spans of one step, ready to export once it committed.
pub struct StepSpans {
    tracer: SdkTracer,
    task: TaskSpan,
    recursions: Vec<RecursionSpan>,
    tools: Vec<ToolSpan>,
    llm: Vec<LlmSpan>,
    end: Option<TaskEnd>,
}

impl StepSpans {
    pub(super) fn new(tracer: SdkTracer, task: &TaskSpan, write: &StepWrite) -> Self {
        let recursions = write
            .records
            .iter()
            .map(|record| RecursionSpan {
                trace_id: record.trace_id,
                iteration: record.iteration,
                step_id: record.step_id.clone(),
                action_type: record.action_type.clone(),
                status: record.status.as_str(),
                error_log: record.error_log.clone(),
                started_at: record.started_at,
                finished_at: record.finished_at,
            })
            .collect();
        let calls = write.records.iter().flat_map(|record| {
            record
                .tool_call_results
                .iter()
                .map(|call| (record.trace_id, call))
        });
        let tools = calls
            .zip(&write.tool_meta)
            .map(|((parent, call), meta)| ToolSpan {
                parent,
                name: call.name.clone(),
                tool_call_id: call.tool_call_id.clone(),
                effect: meta.effect,
                state: meta.state,
                success: call.success,
                error: call.error.clone(),
                started_at: meta.started_at,
                finished_at: meta.finished_at,
            })
            .collect();
        let llm = write
            .llm_rows
            .iter()
            .map(|row| LlmSpan {
                parent: row.trace_id,
                model: row.model.clone(),
                attempt: row.attempt,
                status: row.status.clone(),
                error: row.error.clone(),
                prompt_tokens: row.prompt_tokens,
                completion_tokens: row.completion_tokens,
                cost_usd: row.cost_usd,
                queued_ms: row.queued_ms,
                started_at: row.started_at,
                latency_ms: row.latency_ms,
            })
            .collect();
        let end = match &write.progress {
            Progress::Finish(finish) => Some(TaskEnd {
                status: finish.status,
                iterations: finish.iterations,
                fail_reason: finish.fail_reason,
                error: finish.error.clone(),
                prompt_tokens: write.totals.prompt_tokens,
                completion_tokens: write.totals.completion_tokens,
                cost_usd: write.totals.cost_usd,
                tool_calls: write.totals.tool_calls,
                at: Utc::now(),
            }),
            _ => None,
        };
        Self {
            tracer,
            task: task.clone(),
            recursions,
            tools,
            llm,
            end,
        }
    }

    /// Hands the spans to the exporter (a batch sends them in the background).
    pub fn export(self) {
        let trace = trace_id(self.task.task_id);
        let root = span_id(self.task.task_id);
        let task_cx = remote(trace, root);
        for recursion in &self.recursions {
            let mut attributes = vec![
                KeyValue::new("openinference.span.kind", "CHAIN"),
                KeyValue::new("agentd.task_id", self.task.task_id.to_string()),
                KeyValue::new("agentd.trace_id", recursion.trace_id.to_string()),
                KeyValue::new("agentd.iteration", i64::from(recursion.iteration)),
                KeyValue::new("agentd.status", recursion.status),
            ];
            if let Some(action) = &recursion.action_type {
                attributes.push(KeyValue::new("agentd.action_type", action.clone()));
            }
            if let Some(step) = &recursion.step_id {
                attributes.push(KeyValue::new("agentd.step_id", step.clone()));
            }
            let status = match &recursion.error_log {
                Some(error) => {
                    attributes.push(KeyValue::new("agentd.error_log", error.clone()));
                    Status::error(error.clone())
                }
                None => Status::Ok,
            };
            self.span(
                format!("recursion {}", recursion.iteration),
                SpanKind::Internal,
                &task_cx,
                Some(span_id(recursion.trace_id)),
                (recursion.started_at, recursion.finished_at),
                attributes,
                status,
            );
        }
        for call in &self.llm {
            let mut attributes = vec![
                KeyValue::new("openinference.span.kind", "LLM"),
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.request.model", call.model.clone()),
                KeyValue::new("llm.model_name", call.model.clone()),
                KeyValue::new("agentd.llm.attempt", i64::from(call.attempt)),
                KeyValue::new("agentd.llm.status", call.status.clone()),
            ];
            if let Some(tokens) = call.prompt_tokens {
                attributes.push(KeyValue::new("gen_ai.usage.input_tokens", tokens));
                attributes.push(KeyValue::new("llm.token_count.prompt", tokens));
            }
            if let Some(tokens) = call.completion_tokens {
                attributes.push(KeyValue::new("gen_ai.usage.output_tokens", tokens));
                attributes.push(KeyValue::new("llm.token_count.completion", tokens));
            }
            if let Some(cost) = call.cost_usd {
                attributes.push(KeyValue::new("agentd.cost_usd", cost));
            }
            if let Some(queued) = call.queued_ms {
                attributes.push(KeyValue::new("agentd.llm.queued_ms", queued as i64));
            }
            let status = match &call.error {
                Some(error) => {
                    attributes.push(KeyValue::new("error.type", call.status.clone()));
                    Status::error(error.clone())
                }
                None => Status::Ok,
            };
            let end = call.started_at + chrono::Duration::milliseconds(call.latency_ms as i64);
            let cx = remote(trace, span_id(call.parent));
            let mut span = self.start(
                format!("chat {}", call.model),
                SpanKind::Client,
                &cx,
                None,
                call.started_at,
                attributes,
            );
            if call.attempt > 1 {
                span.add_event_with_timestamp(
                    "gen_ai.retry",
                    system_time(call.started_at),
                    vec![KeyValue::new("agentd.llm.attempt", i64::from(call.attempt))],
                );
            }
            span.set_status(status);
            span.end_with_timestamp(system_time(end));
        }
        for call in &self.tools {
            let mut attributes = vec![
                KeyValue::new("openinference.span.kind", "TOOL"),
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", call.name.clone()),
                KeyValue::new("tool.name", call.name.clone()),
                KeyValue::new("gen_ai.tool.call.id", call.tool_call_id.clone()),
                KeyValue::new("agentd.tool.effect", call.effect),
                KeyValue::new("agentd.tool.state", call.state),
                KeyValue::new("agentd.tool.success", call.success),
            ];
            let status = match (&call.error, call.success) {
                (_, true) => Status::Ok,
                (error, false) => {
                    attributes.push(KeyValue::new("error.type", "tool_error"));
                    Status::error(error.clone().unwrap_or_default())
                }
            };
            self.span(
                format!("execute_tool {}", call.name),
                SpanKind::Internal,
                &remote(trace, span_id(call.parent)),
                None,
                (call.started_at, call.finished_at),
                attributes,
                status,
            );
        }
        if let Some(end) = &self.end {
            let mut attributes = vec![
                KeyValue::new("openinference.span.kind", "AGENT"),
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.id", self.task.agent_id.to_string()),
                KeyValue::new("gen_ai.agent.name", self.task.agent_name.clone()),
                KeyValue::new("gen_ai.request.model", self.task.model.clone()),
                KeyValue::new("agentd.task_id", self.task.task_id.to_string()),
                KeyValue::new("agentd.status", end.status),
                KeyValue::new("agentd.iterations", i64::from(end.iterations)),
                KeyValue::new("gen_ai.usage.input_tokens", end.prompt_tokens as i64),
                KeyValue::new("gen_ai.usage.output_tokens", end.completion_tokens as i64),
                KeyValue::new("agentd.tool_calls", end.tool_calls as i64),
            ];
            if let Some(cost) = end.cost_usd {
                attributes.push(KeyValue::new("agentd.cost_usd", cost));
            }
            if let Some(reason) = end.fail_reason {
                attributes.push(KeyValue::new("agentd.fail_reason", reason));
            }
            let status = match (end.status, &end.error) {
                ("failed", error) => Status::error(error.clone().unwrap_or_default()),
                _ => Status::Ok,
            };
            let mut span = self.tracer.build_with_context(
                self.tracer
                    .span_builder(format!("invoke_agent {}", self.task.agent_name))
                    .with_kind(SpanKind::Internal)
                    .with_trace_id(trace)
                    .with_span_id(root)
                    .with_start_time(system_time(self.task.created_at))
                    .with_attributes(attributes),
                &Context::new(),
            );
            span.set_status(status);
            span.end_with_timestamp(system_time(end.at));
        }
    }

    /// Starts a span under `parent` at `start`.
    fn start(
        &self,
        name: String,
        kind: SpanKind,
        parent: &Context,
        id: Option<SpanId>,
        start: DateTime<Utc>,
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        let mut builder = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(system_time(start))
            .with_attributes(attributes);
        if let Some(id) = id {
            builder = builder.with_span_id(id);
        }
        self.tracer.build_with_context(builder, parent)
    }

    /// A whole span: started, given its status, ended.
    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        name: String,
        kind: SpanKind,
        parent: &Context,
        id: Option<SpanId>,
        (start, end): (DateTime<Utc>, DateTime<Utc>),
        attributes: Vec<KeyValue>,
        status: Status,
    ) {
        let mut span = self.start(name, kind, parent, id, start, attributes);
        span.set_status(status);
        span.end_with_timestamp(system_time(end));
    }
}

/// A context whose parent is the span `span` of trace `trace`, made elsewhere.
fn remote(trace: TraceId, span: SpanId) -> Context {
    let parent = SpanContext::new(
        trace,
        span,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(parent)
}

fn system_time(at: DateTime<Utc>) -> SystemTime {
    let nanos = at.timestamp_nanos_opt().unwrap_or_default().max(0) as u64;
    SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_uuids() {
        let task = Uuid::now_v7();
        assert_eq!(trace_id(task).to_bytes(), *task.as_bytes());
        let bytes = task.as_bytes();
        assert_eq!(span_id(task).to_bytes()[0], bytes[0] ^ bytes[8]);
        assert_ne!(span_id(Uuid::nil()), SpanId::INVALID);
        // Two v7 ids made in a row (same millisecond) get different span ids.
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert_ne!(span_id(a), span_id(b));
    }

    #[test]
    fn times_keep_their_nanoseconds() {
        let at = DateTime::parse_from_rfc3339("2026-11-25T01:02:03.123456789Z").unwrap();
        let since = system_time(at.with_timezone(&Utc))
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        assert_eq!(since.subsec_nanos(), 123_456_789);
    }
}
