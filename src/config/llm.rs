//! The `[llm]` section: where the model is and how it is called, as plain data. The LLM
//! client takes its own settings from it (`llm::LlmSettings::from`).

use serde::Deserialize;

use super::secret::Secret;
use crate::core::retry::RetryPolicy;

/// The `[llm]` section.
#[derive(Debug, Clone, Deserialize)]
pub struct LlmConfig {
    pub base_url: String,
    #[serde(default)]
    pub api_key: Option<Secret>,
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Bounds on what one attempt reads (plain body / stream) and on the `llm.delta`
    /// events kept per recursion.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    #[serde(default = "default_max_stream_bytes")]
    pub max_stream_bytes: usize,
    #[serde(default = "default_max_delta_bytes")]
    pub max_delta_bytes: usize,
    #[serde(default = "default_max_delta_events")]
    pub max_delta_events: usize,
    pub retry: RetryPolicy,
    /// Provider rate limits shared by every worker (`[[llm.limits]]`, CONTRACT §10).
    #[serde(default)]
    pub limits: Vec<crate::core::rate_limit::RateLimit>,
    /// `llm.record` and `llm.record_redact`: the record of every model call (CONTRACT §12).
    #[serde(default)]
    pub record: crate::core::call_record::RecordMode,
    #[serde(default)]
    pub record_redact: Vec<String>,
}

/// 16 MiB: far above any real completion, far below what hurts a worker.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// 64 MiB: a stream carries some 200 bytes of framing per token.
pub const DEFAULT_MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;

/// `llm.max_response_bytes` when unset.
pub fn default_max_response_bytes() -> usize {
    DEFAULT_MAX_RESPONSE_BYTES
}

/// `llm.max_stream_bytes` when unset.
pub fn default_max_stream_bytes() -> usize {
    DEFAULT_MAX_STREAM_BYTES
}

/// `llm.max_delta_bytes` when unset: 1 MiB of streamed tokens kept as `llm.delta` events
/// per recursion.
pub fn default_max_delta_bytes() -> usize {
    1024 * 1024
}

/// `llm.max_delta_events` when unset: at one event per 100 ms, longer than any recursion
/// of the default settings.
pub fn default_max_delta_events() -> usize {
    1000
}
