//! The OpenAI-compatible Chat Completions adapter behind [`crate::ports::Llm`]: settings
//! (the API key a redacting [`Secret`] of `config`), lenient wire types, and the mapping of
//! HTTP statuses and transport failures to the retry policy's error classes.
//!
//! - `client`: [`OpenAiClient`] and [`LlmSettings`]; request building and one attempt.
//! - `wire`: the provider's JSON, private to this module; `body`: the request body
//!   assembled from shared pieces.
//! - `read`: reading a response within `max_response_bytes` / `max_stream_bytes`.
//! - `stream`: assembling an SSE stream of chunks into the same reply.
//! - `recorded`: a rerun's answers from the record (CONTRACT v3 §13), nothing sent.
//! - `errors`: status / `Retry-After` / transport classification into [`crate::ports::LlmError`].

mod body;
mod client;
mod errors;
mod read;
mod recorded;
mod stream;
mod wire;

pub use crate::config::Secret;
pub use crate::config::{DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STREAM_BYTES};
pub use client::{LlmSettings, OpenAiClient};
pub use recorded::{SERVED_FROM_RECORD, recorded_exchange};
