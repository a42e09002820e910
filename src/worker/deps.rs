//! What the driver needs from the outside world, built once per worker process and shared
//! by every task it runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::committer::Committer;
use crate::core::budget::Price;
use crate::core::limits::Limits;
use crate::core::prompt::PromptTemplate;
use crate::core::retry::RetryPolicy;
use crate::lifecycle::Fleet;
use crate::outbox::ConfirmedMarks;
use crate::outbox::replies::Replies;
use crate::ports::Llm;
use crate::tools::ToolRegistry;

/// Shared dependencies of every task run.
#[derive(Clone)]
pub struct WorkerDeps {
    /// The database, the broker, the topology's names, this worker's id and the control
    /// keys: what a task's life between runs needs too (`lifecycle`).
    pub fleet: Fleet,
    pub llm: Arc<dyn Llm>,
    pub tools: Arc<ToolRegistry>,
    pub template: Arc<PromptTemplate>,
    pub retry: RetryPolicy,
    /// How long a lease lasts without renewal, in seconds.
    pub lease_secs: f64,
    /// worker.max_message_bytes.
    pub max_message_bytes: usize,
    /// Tool calls of one reply run at once, at most this many.
    pub tool_concurrency: usize,
    /// Timeout of one tool call.
    pub tool_timeout: Duration,
    /// Timeout of one recursion (LLM call with retries, then tools).
    pub recursion_timeout: Duration,
    /// How long a conversation turn recorded from its message waits before admission.
    pub turn_settle: Duration,
    /// The global request limits (an agent may override the context budget).
    pub limits: Limits,
    /// Where finished tasks report their events confirmed (clears the outbox flag).
    pub marks: ConfirmedMarks,
    /// Writes the steps of all tasks, several per statement (group commit).
    pub committer: Committer,
    /// Where a task's end is reported, to send the reply its producer asked for (§9).
    pub replies: Replies,
    /// USD per million tokens, by model (`[prices."MODEL"]`).
    pub prices: Arc<HashMap<String, Price>>,
    /// Provider rate limits shared with every worker (`[[llm.limits]]`).
    pub rate_limits: Arc<[crate::core::rate_limit::RateLimit]>,
    /// Where the spans of committed steps go (`[otel]`; off by default).
    pub telemetry: crate::otel::Telemetry,
    /// `llm.max_delta_bytes` and `llm.max_delta_events`: the `llm.delta` events one
    /// recursion keeps.
    pub max_delta_bytes: usize,
    pub max_delta_events: usize,
    /// `llm.record` and the compiled `llm.record_redact` (CONTRACT §12).
    pub record: crate::core::call_record::RecordMode,
    pub redactor: Arc<crate::core::call_record::Redactor>,
}
