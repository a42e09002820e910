//! One recursion's LLM call with retries: every attempt is an `llm_calls` row, every retry an
//! `llm.retry` event, waits follow the core's retry policy (backon's exponential sequence,
//! or the provider's Retry-After), and a cancel cuts an attempt or a wait at once.
//!
//! Under a provider rate limit (`[[llm.limits]]`, CONTRACT §10) every attempt first takes a
//! slot in its model's bucket, shared by every worker through PostgreSQL, waiting (as long
//! as needed, cancellable) until one is free; the whole wait is the attempt's `queued_ms`.
//! The recursion's clock (`worker.recursion_timeout_ms`) stops while it waits: the queue is
//! the provider's limit, not a slow call, and cutting it would only make the next recursion
//! queue again. A 429 with Retry-After holds the whole bucket for that long, for every worker.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::mpsc;

use super::llm_deltas::DeltaBudget;
use super::task_run::TaskRun;
use crate::contract::events::{EventData, LlmRetry};
use crate::core::machine::LlmCall;
use crate::core::rate_limit::{RateLimit, estimate_tokens, limit_for};
use crate::core::request_key::request_key_with;
use crate::core::retry::{ErrorClass, RetryDecision};
use crate::core::storable;
use crate::core::types::LlmReply;
use crate::lifecycle::interrupt::Interrupt;
use crate::ports::{LlmError, LlmRequest};
use crate::store::trace::LlmCallRow;

/// Streamed tokens are published at least this often while they arrive (or once
/// `DELTA_FLUSH_BYTES` wait), within the recursion's [`DeltaBudget`].
const DELTA_FLUSH_EVERY: Duration = Duration::from_millis(100);
/// A throttled attempt looks at its bucket again at least this often.
const MAX_THROTTLE_NAP: Duration = Duration::from_secs(1);

/// `error` with storable text (its label and message may quote what a provider sent).
fn storable_error(error: LlmError) -> LlmError {
    LlmError {
        label: storable::owned(error.label),
        message: storable::owned(error.message),
        ..error
    }
}

/// When an attempt started, how long it took and how long it waited for a rate limit;
/// `served_from`: `recorded` for a rerun's answer from its source's record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub latency_ms: u64,
    pub queued_ms: Option<u64>,
    pub served_from: Option<&'static str>,
}

/// The reply, or the error that ends the task (retries exhausted or not retryable).
pub type LlmResult = Result<LlmReply, String>;

/// How a recursion's LLM call ended, short of an interrupt.
pub(super) enum LlmEnd {
    /// Answered, or failed for good.
    Done(LlmResult),
    /// The recursion's deadline passed during an attempt or a retry's wait.
    TimedOut,
    /// A rerun's request that its source's record cannot answer (CONTRACT v3 §13): the
    /// task fails with this reason (`rerun_diverged`, `rerun_unrecorded`).
    Parted(
        crate::core::outcome::FailReason,
        crate::core::rerun::Divergence,
    ),
}

impl TaskRun<'_> {
    /// Calls the LLM until it answers, fails for good, the recursion's `deadline` passes, or
    /// the task is interrupted. Time spent waiting for a rate-limit slot moves `deadline`
    /// on by as much.
    pub(super) async fn call_llm(
        &mut self,
        call: &LlmCall,
        deadline: &mut Instant,
    ) -> anyhow::Result<Result<LlmEnd, Interrupt>> {
        if self.replays_llm() {
            // A rerun answered from its source's record: no provider, no retries.
            return Ok(Ok(self.answer_from_record(call)));
        }
        let mut retries = 0u32;
        let mut deltas = DeltaBudget::new(self.deps.max_delta_bytes, self.deps.max_delta_events);
        loop {
            let attempt = retries + 1;
            let (slot, queued_ms) = match self.throttle(call).await? {
                Ok(slot) => slot,
                Err(interrupt) => return Ok(Err(interrupt)),
            };
            *deadline += Duration::from_millis(queued_ms.unwrap_or(0));
            let started = std::time::Instant::now();
            let started_at = chrono::Utc::now();
            let attempted = self.attempt(call, attempt, &mut deltas);
            let result = match tokio::time::timeout_at(*deadline, attempted).await {
                Err(_) => return Ok(Ok(LlmEnd::TimedOut)),
                Ok(result) => match result? {
                    // A provider's error text enters agentd here: `llm_calls.error`, the
                    // `llm.retry` event and the error_log the model sees agree on it.
                    Ok(result) => result.map_err(storable_error),
                    Err(interrupt) => return Ok(Err(interrupt)),
                },
            };
            let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            if let Some(slot) = slot {
                self.settle_slot(slot, &result).await;
            }
            let timing = Timing {
                started_at,
                latency_ms,
                queued_ms,
                served_from: None,
            };
            self.record_attempt(call, attempt, timing, &result);
            let error = match result {
                Ok(reply) => return Ok(Ok(LlmEnd::Done(Ok(reply)))),
                Err(error) => error,
            };
            match self.deps.retry.decide(error.class, retries) {
                RetryDecision::GiveUp => {
                    let message = format!("LLM call failed after {attempt} attempt(s): {error}");
                    tracing::warn!(attempt, error = %error, "LLM call failed for good");
                    return Ok(Ok(LlmEnd::Done(Err(message))));
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
                    let nap = self.stops.guard(tokio::time::sleep(delay));
                    match tokio::time::timeout_at(*deadline, nap).await {
                        Err(_) => return Ok(Ok(LlmEnd::TimedOut)),
                        Ok(Err(interrupt)) => return Ok(Err(interrupt)),
                        Ok(Ok(())) => {}
                    }
                    retries += 1;
                }
            }
        }
    }

    /// Waits for a slot in the model's rate-limit bucket, if it has one: the slot (its
    /// limit and log row) and how long the wait took, in milliseconds.
    async fn throttle(
        &mut self,
        call: &LlmCall,
    ) -> anyhow::Result<Result<(Option<(RateLimit, i64)>, Option<u64>), Interrupt>> {
        let Some(limit) = limit_for(&self.deps.rate_limits, &self.model).cloned() else {
            return Ok(Ok((None, None)));
        };
        let chars: usize = call
            .messages
            .iter()
            .flat_map(|m| m.content.chunks())
            .map(str::len)
            .sum();
        let tokens = estimate_tokens(chars);
        // Waiters of one bucket spread their retries a little, per task.
        let jitter =
            Duration::from_millis(u64::try_from(self.task_id().as_u128() % 25).unwrap_or(0));
        // From wanting a slot to having one: every nap and every look at the bucket.
        let started = std::time::Instant::now();
        loop {
            match crate::store::rate_limit::try_take(&self.deps.fleet.pool, &limit, tokens).await? {
                Ok(id) => {
                    let waited = started.elapsed();
                    crate::metrics::observe_llm_throttled(limit.bucket(), waited);
                    let queued_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                    return Ok(Ok((Some((limit, id)), Some(queued_ms))));
                }
                Err(wait) => {
                    let wait = wait.to_std().unwrap_or_default().min(MAX_THROTTLE_NAP) + jitter;
                    if let Err(interrupt) = self.stops.guard(tokio::time::sleep(wait)).await {
                        return Ok(Err(interrupt));
                    }
                }
            }
        }
    }

    /// After an attempt under a rate limit: its real token count replaces the estimate, and
    /// a 429 holds the whole bucket for its Retry-After (or the policy's first delay).
    async fn settle_slot(
        &self,
        (limit, id): (RateLimit, i64),
        result: &Result<LlmReply, crate::ports::LlmError>,
    ) {
        let pool = &self.deps.fleet.pool;
        let settled = match result {
            Ok(reply) => {
                let usage = reply.usage;
                let tokens =
                    usage.prompt_tokens.unwrap_or(0) + usage.completion_tokens.unwrap_or(0);
                if tokens > 0 {
                    crate::store::rate_limit::settle(pool, id, tokens).await
                } else {
                    Ok(())
                }
            }
            Err(error) if error.status == Some(429) => {
                let hold = match error.class {
                    ErrorClass::RetryAfter(delay) => delay,
                    _ => Duration::from_millis(self.deps.retry.initial_delay_ms),
                };
                let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
                tracing::warn!(
                    bucket = limit.bucket(),
                    hold_ms,
                    "429: the whole bucket waits"
                );
                crate::store::rate_limit::block(pool, &limit, hold_ms).await
            }
            Err(_) => Ok(()),
        };
        if let Err(err) = settled {
            tracing::warn!(bucket = limit.bucket(), error = %err, "rate-limit bucket not updated");
        }
    }

    /// One attempt. With `stream`, the tokens are published as `llm.delta` events while they
    /// arrive, batched by time and size so that a token is not an AMQP message each, as
    /// far as the recursion's `deltas` budget goes.
    async fn attempt(
        &mut self,
        call: &LlmCall,
        attempt: u32,
        deltas: &mut DeltaBudget,
    ) -> anyhow::Result<Result<Result<LlmReply, LlmError>, Interrupt>> {
        let (deps, stops) = (self.deps, self.stops.clone());
        let (model, tools) = (self.model.clone(), Arc::clone(&self.tool_specs));
        let params = self.params.clone();
        let (sender, mut received) = mpsc::unbounded_channel::<String>();
        let on_delta = move |text: &str| {
            let _ = sender.send(text.to_owned());
        };
        let request = LlmRequest {
            model: &model,
            messages: &call.messages,
            tools: &tools,
            stream: self.stream,
            on_delta: self.stream.then_some(&on_delta as _),
            params: params.as_deref(),
        };
        let chat = stops.guard(deps.llm.exchange(request, deps.record.bodies()));
        tokio::pin!(chat);
        let mut tick = tokio::time::interval(DELTA_FLUSH_EVERY);
        loop {
            tokio::select! {
                exchange = &mut chat => {
                    while let Ok(text) = received.try_recv() {
                        deltas.push(&text);
                    }
                    self.publish_delta(call, attempt, deltas).await?;
                    return Ok(exchange.map(|exchange| {
                        let mode = (self.deps.record, &*self.deps.redactor);
                        let key = |head: &mut _| {
                            request_key_with(head, &self.model, &call.messages, &self.tool_specs)
                        };
                        self.recording.keep(mode, key, &exchange.sent, exchange.response);
                        exchange.result
                    }));
                }
                Some(text) = received.recv() => {
                    deltas.push(&text);
                    if deltas.is_full() {
                        self.publish_delta(call, attempt, deltas).await?;
                    }
                }
                _ = tick.tick() => self.publish_delta(call, attempt, deltas).await?,
            }
        }
    }

    /// Commits and publishes the buffered tokens as one `llm.delta` event, if any (and if
    /// the recursion's budget allows).
    async fn publish_delta(
        &mut self,
        call: &LlmCall,
        attempt: u32,
        deltas: &mut DeltaBudget,
    ) -> anyhow::Result<()> {
        let Some(delta) = deltas.take(attempt) else {
            return Ok(());
        };
        self.log.push(
            Some(call.trace_id),
            Some(call.iteration),
            EventData::LlmDelta(delta),
        );
        self.commit_step().await
    }

    /// Keeps the attempt's `llm_calls` row for the next commit.
    pub(super) fn record_attempt(
        &mut self,
        call: &LlmCall,
        attempt: u32,
        timing: Timing,
        result: &Result<LlmReply, crate::ports::LlmError>,
    ) {
        let Timing {
            started_at,
            latency_ms,
            queued_ms,
            served_from,
        } = timing;
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
            queued_ms,
            started_at,
            record: self.recording.take(),
            served_from,
        });
    }
}
