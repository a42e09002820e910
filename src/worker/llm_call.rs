//! One recursion's LLM call with retries: every attempt is an `llm_calls` row, every retry an
//! `llm.retry` event, waits follow the core's retry policy (backon's exponential sequence,
//! or the provider's Retry-After), and a cancel cuts an attempt or a wait at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::interrupt::Interrupt;
use super::task_run::TaskRun;
use crate::contract::events::{EventData, LlmDelta, LlmRetry};
use crate::core::machine::LlmCall;
use crate::core::retry::RetryDecision;
use crate::core::types::LlmReply;
use crate::ports::{LlmError, LlmRequest};
use crate::store::trace::LlmCallRow;

/// Streamed tokens are published at least this often while they arrive...
const DELTA_FLUSH_EVERY: Duration = Duration::from_millis(100);
/// ...or as soon as this many bytes are waiting.
const DELTA_FLUSH_BYTES: usize = 1024;

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
            let started = Instant::now();
            let result = match self.attempt(call, attempt).await? {
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
                    let retry = LlmRetry {
                        attempt,
                        delay_ms,
                        error: error.to_string(),
                        status: error.status,
                    };
                    self.log.push(
                        Some(call.trace_id),
                        Some(call.iteration),
                        EventData::LlmRetry(retry),
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

    /// One attempt. With `stream`, the tokens are published as `llm.delta` events while they
    /// arrive, batched by time and size so that a token is not an AMQP message each.
    async fn attempt(
        &mut self,
        call: &LlmCall,
        attempt: u32,
    ) -> anyhow::Result<Result<Result<LlmReply, LlmError>, Interrupt>> {
        let (deps, stops) = (self.deps, self.stops.clone());
        let (model, tools) = (self.model.clone(), Arc::clone(&self.tool_specs));
        let (sender, mut deltas) = mpsc::unbounded_channel::<String>();
        let on_delta = move |text: &str| {
            let _ = sender.send(text.to_owned());
        };
        let request = LlmRequest {
            model: &model,
            messages: &call.messages,
            tools: &tools,
            stream: self.stream,
            on_delta: self.stream.then_some(&on_delta as _),
        };
        let chat = stops.guard(deps.llm.chat(request));
        tokio::pin!(chat);
        let mut pending = String::new();
        let mut tick = tokio::time::interval(DELTA_FLUSH_EVERY);
        loop {
            tokio::select! {
                result = &mut chat => {
                    while let Ok(text) = deltas.try_recv() {
                        pending.push_str(&text);
                    }
                    self.publish_delta(call, attempt, &mut pending).await?;
                    return Ok(result);
                }
                Some(text) = deltas.recv() => {
                    pending.push_str(&text);
                    if pending.len() >= DELTA_FLUSH_BYTES {
                        self.publish_delta(call, attempt, &mut pending).await?;
                    }
                }
                _ = tick.tick() => self.publish_delta(call, attempt, &mut pending).await?,
            }
        }
    }

    /// Commits and publishes the buffered tokens as one `llm.delta` event, if any.
    async fn publish_delta(
        &mut self,
        call: &LlmCall,
        attempt: u32,
        pending: &mut String,
    ) -> anyhow::Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let content = std::mem::take(pending);
        self.log.push(
            Some(call.trace_id),
            Some(call.iteration),
            EventData::LlmDelta(LlmDelta { content, attempt }),
        );
        self.commit_step().await
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
        let (prompt, completion) = (
            usage.prompt_tokens.map_or(0, |t| t.max(0) as u64),
            usage.completion_tokens.map_or(0, |t| t.max(0) as u64),
        );
        let price = self.deps.prices.get(&self.model);
        let reported = usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
        let cost_usd = price
            .filter(|_| reported)
            .map(|price| price.cost(prompt, completion));
        // The task's cost is unknown once its model has no price; an attempt that
        // reported no usage (a failed one) costs nothing known.
        let task_cost = price.map(|_| cost_usd.unwrap_or(0.0));
        self.machine.on_llm_usage(prompt, completion, task_cost);
        if let Some(cost) = cost_usd {
            crate::metrics::observe_llm_cost(&self.model, cost);
        }
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
            model: self.model.clone(),
            cost_usd,
        });
    }
}
