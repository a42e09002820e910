//! Reading a provider's response within bounds, so that no answer can make a worker hold
//! more than the configured bytes: a plain JSON body up to `llm.max_response_bytes` (a
//! `Content-Length` above it is refused before reading), an SSE body up to
//! `llm.max_stream_bytes` counted on the wire before the event parser buffers anything, and
//! an error body only as far as its message is quoted.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt as _};

use super::errors::{too_large, transport_error};
use crate::ports::LlmError;

/// The most of a non-2xx body that is read: its message is quoted in 500 characters, and a
/// JSON error object is never this large.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A 2xx JSON body, whole, or `too_large` past `max` bytes.
pub(crate) async fn body(response: reqwest::Response, max: usize) -> Result<Bytes, LlmError> {
    let status = response.status().as_u16();
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(too_large(
            status,
            "response body",
            "max_response_bytes",
            max,
        ));
    }
    let mut chunks = response.bytes_stream();
    let mut body = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(transport_error)?;
        if body.len() + chunk.len() > max {
            return Err(too_large(
                status,
                "response body",
                "max_response_bytes",
                max,
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// The start of an error body (at most [`MAX_ERROR_BODY`] bytes); the rest is not read. A
/// body cut by the network yields what arrived.
pub(crate) async fn error_body(response: reqwest::Response) -> Vec<u8> {
    let mut chunks = response.bytes_stream();
    let mut body = Vec::new();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = MAX_ERROR_BODY - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    body
}

/// Why a bounded stream stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamFailure {
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
    #[error("the stream exceeded {0} bytes")]
    TooLarge(usize),
}

impl StreamFailure {
    /// The error of the attempt.
    pub(crate) fn into_llm_error(self) -> LlmError {
        match self {
            Self::Transport(error) => transport_error(error),
            Self::TooLarge(max) => too_large(200, "event stream", "max_stream_bytes", max),
        }
    }
}

/// The body's chunks, failing with [`StreamFailure::TooLarge`] once more than `max` bytes
/// came in.
pub(crate) fn bounded_stream(
    response: reqwest::Response,
    max: usize,
) -> impl Stream<Item = Result<Bytes, StreamFailure>> + Send {
    Bounded {
        inner: Box::pin(response.bytes_stream()),
        read: 0,
        max,
        failed: false,
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

struct Bounded {
    inner: ByteStream,
    read: usize,
    max: usize,
    failed: bool,
}

impl Stream for Bounded {
    type Item = Result<Bytes, StreamFailure>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.read = self.read.saturating_add(chunk.len());
                if self.read > self.max {
                    self.failed = true;
                    return Poll::Ready(Some(Err(StreamFailure::TooLarge(self.max))));
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
