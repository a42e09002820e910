//! One recursion's LLM call with retries: every attempt is an `llm_calls` row, every retry an
//! `llm.retry` event, waits follow the core's retry policy (backon's exponential sequence,
//! or the provider's Retry-After), and a cancel cuts an attempt or a wait at once.

use std::time::Instant;

use serde_json::json;

use super::interrupt::Interrupt;
use super::task_run::TaskRun;
use crate::core::machine::LlmCall;
use crate::core::retry::RetryDecision;
use crate::core::types::LlmReply;
use crate::ports::LlmRequest;
use crate::store::trace::LlmCallRow;

/// The reply, or the error that ends the task (retries exhausted or not retryable).
pub type LlmResult = Result<LlmReply, String>;

impl TaskRun<'_> {
    /// Calls the LLM until it answers, fails for good, or the task is interrupted.
    pub(super) async fn call_llm(
        &mut self,
        call: &LlmCall,
    ) -> anyhow::Result<Result<LlmResult, Interrupt>> {
        let mut retries = 0u32;
        loop {
            let attempt = retries + 1;
            let request = LlmRequest {
                model: &self.model,
                messages: &call.messages,
                tools: &self.tool_specs,
                stream: self.stream,
                on_delta: None,
            };
            let started = Instant::now();
            let result = match self.stops.guard(self.deps.llm.chat(request)).await {
                Ok(result) => result,
                Err(interrupt) => return Ok(Err(interrupt)),
            };
            let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.record_attempt(call, attempt, latency_ms, &result);
            let error = match result {
                Ok(reply) => return Ok(Ok(Ok(reply))),
                Err(error) => error,
            };
            match self.deps.retry.decide(error.class, retries) {
                RetryDecision::GiveUp => {
                    let message = format!("LLM call failed after {attempt} attempt(s): {error}");
                    tracing::warn!(attempt, error = %error, "LLM call failed for good");
                    return Ok(Ok(Err(message)));
                }
                RetryDecision::RetryIn(delay) => {
                    let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                    tracing::info!(attempt, delay_ms, error = %error, "LLM call failed, retrying");
                    self.log.push(
                        "llm.retry",
                        Some(call.trace_id),
                        Some(call.iteration),
                        json!({"attempt": attempt, "delay_ms": delay_ms,
                               "error": error.to_string(), "status": error.status}),
                    );
                    self.commit_step().await?;
                    if let Err(interrupt) = self.stops.guard(tokio::time::sleep(delay)).await {
                        return Ok(Err(interrupt));
                    }
                    retries += 1;
                }
            }
        }
    }

    /// Keeps the attempt's `llm_calls` row for the next commit.
    fn record_attempt(
        &mut self,
        call: &LlmCall,
        attempt: u32,
        latency_ms: u64,
        result: &Result<LlmReply, crate::ports::LlmError>,
    ) {
        let (status, usage, error) = match result {
            Ok(reply) => ("200".to_owned(), reply.usage, None),
            Err(error) => (
                error.label.clone(),
                Default::default(),
                Some(error.to_string()),
            ),
        };
        crate::metrics::observe_llm_attempt(&status, latency_ms, &usage);
        self.llm_rows.push(LlmCallRow {
            task_id: self.task_id(),
            trace_id: call.trace_id,
            iteration: call.iteration,
            attempt,
            status,
            latency_ms,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            error,
        });
    }
}
