//! The worker's Prometheus metrics (seed 003's monitoring points): tasks, recursions,
//! iterations, LLM attempts and retries, tool calls, compactions, dead letters, event
//! publishing and MCP servers. Nearly everything is derived from the progress events in one
//! place, [`observe_event`]; the driver adds LLM attempts, dead letters, deliveries in flight
//! and publish latency with one call each. Metric names and labels are listed in
//! [`names`]; every label value comes from a bounded set, never from free text.
//!
//! Every series exists from the first scrape, at 0 (Prometheus' "avoid missing metrics"), so
//! that `rate()` and `increase()` see the first event: the series without labels, and each
//! labelled one for its known label values (the bounded sets of [`names`], the tools
//! offered, the MCP servers, the priced models and rate-limit buckets) — [`seed`].
//!
//! The recorder is global and installed once per process ([`install`]); until then every
//! call here is a cheap no-op. `server` serves `/metrics`, `/healthz` and `/readyz`.

pub mod names;
mod seed;
pub mod server;

use std::collections::{BTreeSet, HashSet};
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::contract::events::{
    ContextCompacted, Event, EventData, RecursionCompleted, ToolCompleted,
};
use crate::core::types::Usage;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use names::*;

static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
static KNOWN_TOOLS: RwLock<Option<HashSet<String>>> = RwLock::new(None);
/// The priced models and rate-limit buckets of the configuration, whose series are seeded.
static KNOWN_LLM: RwLock<(BTreeSet<String>, BTreeSet<String>)> =
    RwLock::new((BTreeSet::new(), BTreeSet::new()));

/// Installs the global Prometheus recorder (once; later calls return the same handle).
pub fn install() -> anyhow::Result<PrometheusHandle> {
    HANDLE
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))
}

fn build() -> anyhow::Result<PrometheusHandle> {
    let seconds = [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    ];
    let iterations = [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 30.0, 50.0, 100.0];
    let ratio = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &seconds)?
        .set_buckets_for_metric(Matcher::Full(TASK_ITERATIONS.to_owned()), &iterations)?
        .set_buckets_for_metric(Matcher::Full(COMPACTION_RATIO.to_owned()), &ratio)?
        .install_recorder()?;
    describe();
    seed::fixed();
    Ok(handle)
}

/// Whether the recorder is installed (series recorded now are kept).
fn installed() -> bool {
    HANDLE.get().is_some_and(Result::is_ok)
}

/// Remembers the tool names the worker offers, so that tool metrics label a name the model
/// made up as `unknown` instead of creating a series per invented name.
pub fn register_tools(names: &[String]) {
    if let Ok(mut known) = KNOWN_TOOLS.write() {
        known
            .get_or_insert_with(HashSet::new)
            .extend(names.iter().cloned());
    }
    if installed() {
        seed::tools();
    }
}

/// Remembers the models with a price and the rate-limit buckets, so that their cost and
/// throttling series exist at 0 from the start.
pub fn register_llm(priced_models: &[String], buckets: &[String]) {
    if let Ok(mut known) = KNOWN_LLM.write() {
        known.0.extend(priced_models.iter().cloned());
        known.1.extend(buckets.iter().cloned());
    }
    if installed() {
        seed::llm();
    }
}

fn tool_label(name: &str) -> String {
    let known = KNOWN_TOOLS
        .read()
        .map(|known| known.as_ref().is_some_and(|set| set.contains(name)))
        .unwrap_or(false);
    if known {
        name.to_owned()
    } else {
        "unknown".to_owned()
    }
}

/// Records one committed progress event (called for every event, once).
pub fn observe_event(event: &Event) {
    counter!(EVENTS, "type" => event.event_type().as_str()).increment(1);
    match &event.body {
        EventData::TaskStarted(_) => counter!(TASKS_STARTED).increment(1),
        EventData::TaskResumed(_) => counter!(TASKS_RESUMED).increment(1),
        EventData::TaskCompleted(done) => task_ended("completed", "none", done.iterations),
        EventData::TaskCancelled(done) => task_ended("cancelled", "none", done.iterations),
        EventData::TaskFailed(failed) => {
            let reason = bounded(failed.reason.as_str(), &FAIL_REASONS);
            let status = if reason == "rejected" {
                "rejected"
            } else {
                "failed"
            };
            task_ended(status, reason, failed.iterations);
        }
        EventData::RecursionCompleted(recursion) => recursion_completed(recursion),
        EventData::LlmRetry(_) => counter!(LLM_RETRIES).increment(1),
        EventData::ToolCompleted(tool) => tool_completed(tool),
        EventData::ContextCompacted(compaction) => compacted(compaction),
        EventData::BudgetExceeded(breach) => counter!(
            BUDGET_BREACHES,
            "limit" => breach.limit.as_str(),
            "action" => breach.action.as_str()
        )
        .increment(1),
        EventData::TaskStalled(stalled) => {
            counter!(TASK_STALLS, "action" => stalled.action.as_str()).increment(1);
        }
        _ => {}
    }
}

fn task_ended(status: &'static str, reason: &'static str, iterations: u32) {
    counter!(TASKS_ENDED, "status" => status, "reason" => reason).increment(1);
    if status != "rejected" {
        histogram!(TASK_ITERATIONS).record(f64::from(iterations));
    }
}

fn recursion_completed(recursion: &RecursionCompleted) {
    let action = match recursion.action_type.as_deref() {
        None => "none",
        Some(action) => bounded(action, &ACTION_TYPES),
    };
    let status = recursion.status.as_str();
    counter!(RECURSIONS, "action_type" => action, "status" => status).increment(1);
    histogram!(RECURSION_DURATION).record(recursion.duration_ms.max(0) as f64 / 1000.0);
}

fn tool_completed(tool: &ToolCompleted) {
    let name = tool_label(&tool.name);
    let success = if tool.success { "true" } else { "false" };
    counter!(TOOL_CALLS, "tool" => name.clone(), "success" => success).increment(1);
    histogram!(TOOL_CALL_DURATION, "tool" => name).record(tool.duration_ms as f64 / 1000.0);
}

fn compacted(compaction: &ContextCompacted) {
    counter!(COMPACTIONS).increment(1);
    let (before, after) = (
        f64::from(compaction.before_tokens),
        f64::from(compaction.after_tokens),
    );
    if before > 0.0 {
        histogram!(COMPACTION_RATIO).record((after / before).clamp(0.0, 1.0));
        counter!(COMPACTION_TOKENS_SAVED).increment((before - after).max(0.0) as u64);
    }
}

/// Records one LLM attempt: `status` is the `llm_calls.status` value (`200`, `http_429`,
/// `timeout`, ...), the latency and the token usage.
pub fn observe_llm_attempt(status: &str, latency_ms: u64, usage: &Usage) {
    let status = llm_status_label(status);
    let result = if status == "200" { "ok" } else { "error" };
    counter!(LLM_ATTEMPTS, "status" => status).increment(1);
    histogram!(LLM_DURATION, "result" => result).record(latency_ms as f64 / 1000.0);
    let tokens = [
        ("prompt", usage.prompt_tokens),
        ("completion", usage.completion_tokens),
    ];
    for (kind, count) in tokens {
        if let Some(count) = count.and_then(|c| u64::try_from(c).ok()) {
            counter!(LLM_TOKENS, "kind" => kind).increment(count);
        }
    }
}

/// Counts an attempt's cost (USD) for its model.
pub fn observe_llm_cost(model: &str, cost_usd: f64) {
    let micro = (cost_usd * 1e6).round().max(0.0) as u64;
    counter!(LLM_COST, "model" => model.to_owned()).increment(micro);
}

/// Counts the time an LLM attempt waited for its rate-limit bucket (also when it did not
/// wait, so the series exists once a limit is configured).
pub fn observe_llm_throttled(bucket: &str, waited: std::time::Duration) {
    let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    counter!(LLM_THROTTLED, "bucket" => bucket.to_owned()).increment(ms);
}

/// `http_<3 digits>` and short lowercase classes pass; anything else is `other`.
fn llm_status_label(status: &str) -> String {
    let plain = status.len() <= 24
        && status
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        status.to_owned()
    } else {
        "other".to_owned()
    }
}

/// Records a task message moved to the dead-letter queue.
pub fn observe_dead_letter() {
    counter!(DEAD_LETTERS).increment(1);
}

/// Counts a control message dropped unapplied, by reason (`core::signing::Rejection`).
pub fn control_rejected(reason: &'static str) {
    counter!(CONTROL_REJECTED, "reason" => reason).increment(1);
}

/// Awaits an event publish and records how long it took and whether it was confirmed.
pub async fn time_publish<T, E>(publish: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let started = Instant::now();
    let result = publish.await;
    let outcome = if result.is_ok() { "ok" } else { "error" };
    histogram!(PUBLISH_DURATION, "result" => outcome).record(started.elapsed().as_secs_f64());
    result
}

/// Counts a task message being handled while the guard lives (`agentd_tasks_in_flight`).
#[must_use = "the delivery counts as in flight while the guard lives"]
pub struct InFlight(());

/// Starts counting one delivery in flight; dropping the guard ends it.
pub fn track_in_flight() -> InFlight {
    gauge!(TASKS_IN_FLIGHT).increment(1.0);
    InFlight(())
}

impl Drop for InFlight {
    fn drop(&mut self) {
        gauge!(TASKS_IN_FLIGHT).decrement(1.0);
    }
}

/// Records whether an MCP server is connected.
pub fn mcp_server_up(server: &str, up: bool) {
    gauge!(MCP_SERVER_UP, "server" => server.to_owned()).set(if up { 1.0 } else { 0.0 });
    // Its restarts exist at 0 from the first report (the recorder's start).
    counter!(MCP_RESTARTS, "server" => server.to_owned()).increment(0);
}

/// Counts a restart (reconnect) of an MCP server.
pub fn mcp_server_restarted(server: &str) {
    counter!(MCP_RESTARTS, "server" => server.to_owned()).increment(1);
}

/// Records a retention prune run and the tasks it removed.
pub fn observe_prune(tasks_removed: u64, took: Duration) {
    counter!(PRUNED_TASKS).increment(tasks_removed);
    histogram!(PRUNE_DURATION).record(took.as_secs_f64());
}

/// `value` when it is one of `allowed`, else `other`.
fn bounded(value: &str, allowed: &[&'static str]) -> &'static str {
    allowed
        .iter()
        .find(|known| **known == value)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::contract::events::TaskFailed;
    use crate::core::machine::FailReason;
    use crate::core::state::RecursionStatus;

    fn event(body: EventData) -> Event {
        Event {
            event_id: Uuid::now_v7(),
            task_id: Uuid::nil(),
            agent_id: None,
            seq: 1,
            trace_id: None,
            iteration: None,
            ts: chrono::Utc::now(),
            body,
        }
    }

    #[test]
    fn events_move_the_counters() {
        let handle = install().expect("the recorder installs");
        observe_event(&event(EventData::ContextCompacted(ContextCompacted {
            before_tokens: 1000,
            after_tokens: 250,
            folded_recursions: 3,
        })));
        observe_event(&event(EventData::TaskFailed(TaskFailed {
            reason: FailReason::MaxIteration,
            error: "e".into(),
            iterations: 30,
            partial: None,
            divergence: None,
        })));
        observe_event(&event(EventData::RecursionCompleted(RecursionCompleted {
            iteration: 1,
            step_id: None,
            action_type: Some("MAKE_COFFEE".into()),
            observe: String::new(),
            thought: String::new(),
            abstract_: String::new(),
            status: RecursionStatus::Done,
            error_log: None,
            duration_ms: 5,
        })));
        let text = handle.render();
        for expected in [
            "agentd_compactions_total ",
            "agentd_compaction_tokens_saved_total ",
            "agentd_compaction_ratio_bucket{le=\"0.3\"}",
            "agentd_tasks_ended_total{status=\"failed\",reason=\"max_iteration\"}",
            "agentd_recursions_total{action_type=\"other\",status=\"done\"}",
            "agentd_task_iterations_bucket{le=\"30\"}",
        ] {
            assert!(text.contains(expected), "{expected} missing in:\n{text}");
        }
    }

    #[test]
    fn labels_stay_bounded() {
        assert_eq!(bounded("ANSWER", &ACTION_TYPES), "ANSWER");
        assert_eq!(bounded("MAKE_COFFEE", &ACTION_TYPES), "other");
        assert_eq!(llm_status_label("http_429"), "http_429");
        assert_eq!(llm_status_label("timeout"), "timeout");
        assert_eq!(llm_status_label("Weird Label!"), "other");
        register_tools(&["calculate".to_owned()]);
        assert_eq!(tool_label("calculate"), "calculate");
        assert_eq!(tool_label("made_up_by_the_model"), "unknown");
    }
}
