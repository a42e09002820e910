//! The OpenAI-compatible Chat Completions adapter behind [`crate::ports::Llm`]: settings
//! (with a redacting [`Secret`] for the API key), lenient wire types, and the mapping of
//! HTTP statuses and transport failures to the retry policy's error classes.
//!
//! - `client`: [`OpenAiClient`] and [`LlmSettings`]; request building and one attempt.
//! - `wire`: the provider's JSON, private to this module; `body`: the request body
//!   assembled from shared pieces.
//! - `read`: reading a response within `max_response_bytes` / `max_stream_bytes`.
//! - `stream`: assembling an SSE stream of chunks into the same reply.
//! - `errors`: status / `Retry-After` / transport classification into [`crate::ports::LlmError`].
//! - `secret`: [`Secret`].

mod body;
mod client;
mod errors;
mod read;
pub mod secret;
mod stream;
mod wire;

pub use client::{
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STREAM_BYTES, LlmSettings, OpenAiClient,
    default_max_delta_bytes, default_max_delta_events, default_max_response_bytes,
    default_max_stream_bytes,
};
pub use secret::Secret;
