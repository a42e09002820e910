//! Turning what went wrong into an [`LlmError`] the retry policy can act on. The rule
//! (seed 003): 408, 429 and 5xx are retryable; a 429 or 503 carrying `Retry-After`
//! (seconds or an HTTP date) asks for that exact delay; every other status is fatal.
//! Transport failures are always retryable. Nothing here ever sees the API key.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::core::retry::ErrorClass;
use crate::ports::LlmError;

use super::wire::error_text;
use crate::config::redact_userinfo;

/// The longest provider body quoted in an error message, in characters.
const MAX_QUOTED_BODY: usize = 500;

/// Classifies an HTTP status, honouring `Retry-After` on 429 and 503.
pub(crate) fn classify_status(status: u16, retry_after: Option<Duration>) -> ErrorClass {
    match (status, retry_after) {
        (429 | 503, Some(delay)) => ErrorClass::RetryAfter(delay),
        _ => crate::core::retry::classify_status(status),
    }
}

/// Parses a `Retry-After` value: delta-seconds or an HTTP date (a date in the past means
/// "now"). `None` when it is neither.
pub(crate) fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&Utc) - now;
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// The error for a non-2xx answer: label `http_<code>`, the provider's message.
pub(crate) fn http_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> LlmError {
    LlmError {
        class: classify_status(status, retry_after),
        status: Some(status),
        label: format!("http_{status}"),
        message: provider_message(status, body),
    }
}

/// A 2xx answer we could not use. Classified Retryable on purpose: a truncated or garbled
/// body, or one without choices, is far more often a provider or gateway hiccup than a
/// permanent condition, and the retry policy bounds the cost of being wrong.
pub(crate) fn decode_error(status: u16, detail: impl Into<String>) -> LlmError {
    LlmError {
        class: ErrorClass::Retryable,
        status: Some(status),
        label: "decode".to_owned(),
        message: detail.into(),
    }
}

/// A response larger than the configured bound (`llm.max_response_bytes` or
/// `llm.max_stream_bytes`): the call is stopped without reading further. Fatal on purpose:
/// asking again would make the provider generate (and bill) the same runaway answer again,
/// and the bound is a setting, not a hiccup. The recursion fails with this message.
pub(crate) fn too_large(status: u16, what: &str, key: &str, max: usize) -> LlmError {
    LlmError {
        class: ErrorClass::Fatal,
        status: Some(status),
        label: "too_large".to_owned(),
        message: format!(
            "the provider's {what} exceeded llm.{key} ({max} bytes); the call was stopped \
             (raise llm.{key} if such answers are expected)"
        ),
    }
}

/// A 3xx answer. Redirects are never followed (the body and the API key would go to
/// whatever host the provider names): the error names the status and the `Location`, with
/// any userinfo hidden, and never the body. Fatal, like every 3xx.
pub(crate) fn redirect_error(status: u16, location: Option<&str>) -> LlmError {
    let target = match location {
        Some(location) => truncate_chars(&redact_userinfo(location.trim()), MAX_QUOTED_BODY),
        None => "no Location header".to_owned(),
    };
    LlmError {
        class: classify_status(status, None),
        status: Some(status),
        label: format!("http_{status}"),
        message: format!(
            "the provider answered {status} redirecting to {target}; redirects are not \
             followed: set llm.base_url to the final URL"
        ),
    }
}

/// A transport failure: `timeout`, `connect` or `network`, all retryable. The URL is left
/// out of the message (it could carry credentials); the cause chain is kept.
pub(crate) fn transport_error(error: reqwest::Error) -> LlmError {
    let label = if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else {
        "network"
    };
    LlmError {
        class: ErrorClass::Retryable,
        status: None,
        label: label.to_owned(),
        message: cause_chain(&error.without_url()),
    }
}

/// The provider's message: OpenAI's `{"error": {"message": ..}}` (or a few common
/// variants), else the raw body truncated, else the status alone.
fn provider_message(status: u16, body: &[u8]) -> String {
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        let message = json.get("error").and_then(error_text).or_else(|| {
            json.get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        if let Some(message) = message {
            return message;
        }
    }
    let raw = String::from_utf8_lossy(body);
    let raw = raw.trim();
    if raw.is_empty() {
        return format!("HTTP {status} with an empty body");
    }
    truncate_chars(raw, MAX_QUOTED_BODY)
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn cause_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn statuses_follow_the_seed_rule() {
        let wait = Some(Duration::from_secs(3));
        for status in [408, 429, 500, 502, 503, 504, 599] {
            assert_eq!(
                classify_status(status, None),
                ErrorClass::Retryable,
                "{status}"
            );
        }
        for status in [400, 401, 403, 404, 409, 422, 302] {
            assert_eq!(classify_status(status, None), ErrorClass::Fatal, "{status}");
        }
        let after = ErrorClass::RetryAfter(Duration::from_secs(3));
        assert_eq!(classify_status(429, wait), after);
        assert_eq!(classify_status(503, wait), after);
        assert_eq!(classify_status(500, wait), ErrorClass::Retryable);
        assert_eq!(classify_status(400, wait), ErrorClass::Fatal);
    }

    #[test]
    fn retry_after_seconds_and_http_dates() {
        let now = Utc.with_ymd_and_hms(2015, 10, 21, 7, 28, 0).unwrap();
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        let date = "Wed, 21 Oct 2015 07:28:30 GMT";
        assert_eq!(parse_retry_after(date, now), Some(Duration::from_secs(30)));
        let past = "Wed, 21 Oct 2015 07:00:00 GMT";
        assert_eq!(parse_retry_after(past, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn provider_messages_are_extracted_or_quoted() {
        let openai = br#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#;
        assert_eq!(provider_message(400, openai), "bad model");
        assert_eq!(provider_message(400, br#"{"error":"flat"}"#), "flat");
        assert_eq!(provider_message(400, br#"{"message":"top"}"#), "top");
        assert_eq!(
            provider_message(502, b"  <html>bad gateway</html> "),
            "<html>bad gateway</html>"
        );
        assert_eq!(provider_message(502, b""), "HTTP 502 with an empty body");
        let long = "é".repeat(600);
        let quoted = provider_message(500, long.as_bytes());
        assert_eq!(quoted.chars().count(), MAX_QUOTED_BODY + 1);
    }

    #[test]
    fn http_errors_carry_label_status_and_class() {
        let error = http_error(
            429,
            Some(Duration::from_secs(2)),
            br#"{"error":{"message":"slow"}}"#,
        );
        assert_eq!(error.label, "http_429");
        assert_eq!(error.status, Some(429));
        assert_eq!(error.class, ErrorClass::RetryAfter(Duration::from_secs(2)));
        assert_eq!(error.to_string(), "http_429: slow");
        let decode = decode_error(200, "no choices");
        assert_eq!(
            (decode.class, decode.label.as_str()),
            (ErrorClass::Retryable, "decode")
        );
    }
}
