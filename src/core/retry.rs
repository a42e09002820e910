//! The LLM retry policy as a pure function: (error class, retries so far) -> wait or give up.
//! Seed 003: network errors, timeouts, 429, 500/502/503/504 are retried with exponential
//! backoff (1 s, doubling, capped at 10 s, 3 retries); 400/401/403/404 are fatal.
//!
//! The exponential delay sequence comes from backon's [`ExponentialBuilder`] (no jitter), so
//! the numbers here are the ones a backon-driven retry loop would use; the sleeping itself
//! belongs to the driver.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use serde::{Deserialize, Serialize};

/// How an LLM failure should be handled, decided by the adapter that saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth another attempt after the policy's backoff delay.
    Retryable,
    /// Worth another attempt after the delay the provider asked for (Retry-After).
    RetryAfter(Duration),
    /// Retrying cannot help (bad request, authentication, unknown model...).
    Fatal,
}

/// The backoff configuration (`[llm.retry]` in config/default.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    /// Delay before the first retry, in milliseconds.
    pub initial_delay_ms: u64,
    /// Multiplier applied to the delay after each retry.
    pub factor: f32,
    /// Upper bound of the exponential delay, in milliseconds.
    pub max_delay_ms: u64,
    /// Retries after the first attempt (at most `max_retries + 1` attempts).
    pub max_retries: u32,
    /// Upper bound on a provider's Retry-After that is honoured, in milliseconds.
    pub max_retry_after_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_delay_ms: 1_000,
            factor: 2.0,
            max_delay_ms: 10_000,
            max_retries: 3,
            max_retry_after_ms: 60_000,
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Sleep this long, then try again.
    RetryIn(Duration),
    /// Stop: the failure is final.
    GiveUp,
}

impl RetryPolicy {
    /// Decides what follows a failure of class `class` when `retries_so_far` retries have
    /// already been made (0 after the first attempt failed).
    pub fn decide(&self, class: ErrorClass, retries_so_far: u32) -> RetryDecision {
        if retries_so_far >= self.max_retries {
            return RetryDecision::GiveUp;
        }
        match class {
            ErrorClass::Fatal => RetryDecision::GiveUp,
            ErrorClass::RetryAfter(asked) => {
                RetryDecision::RetryIn(asked.min(Duration::from_millis(self.max_retry_after_ms)))
            }
            ErrorClass::Retryable => match self.backoff_delay(retries_so_far) {
                Some(delay) => RetryDecision::RetryIn(delay),
                None => RetryDecision::GiveUp,
            },
        }
    }

    /// The `retry`-th (0-based) delay of the exponential sequence, rounded to milliseconds
    /// (backon multiplies in f32 seconds) and capped at `max_delay_ms`.
    fn backoff_delay(&self, retry: u32) -> Option<Duration> {
        let max_delay = Duration::from_millis(self.max_delay_ms);
        let delay = ExponentialBuilder::new()
            .with_min_delay(Duration::from_millis(self.initial_delay_ms))
            .with_factor(self.factor)
            .with_max_delay(max_delay)
            .with_max_times(self.max_retries as usize)
            .build()
            .nth(retry as usize)?;
        let millis = (delay.as_secs_f64() * 1000.0).round();
        // `as` saturates for floats; the cap below keeps the result within the policy.
        Some(Duration::from_millis(millis as u64).min(max_delay))
    }
}

/// Classifies an HTTP status of a failed LLM call. 408, 429 and every 5xx (seed 003 names
/// 500/502/503/504; other 5xx such as 520–529 from proxies are transient too) are
/// retryable; everything else (400, 401, 403, 404, 422, ...) is fatal.
pub fn classify_status(status: u16) -> ErrorClass {
    match status {
        408 | 429 | 500..=599 => ErrorClass::Retryable,
        _ => ErrorClass::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> RetryDecision {
        RetryDecision::RetryIn(Duration::from_secs(s))
    }

    #[test]
    fn default_policy_waits_1_2_4_seconds_then_gives_up() {
        let policy = RetryPolicy::default();
        let decisions: Vec<_> = (0..4)
            .map(|n| policy.decide(ErrorClass::Retryable, n))
            .collect();
        assert_eq!(
            decisions,
            vec![secs(1), secs(2), secs(4), RetryDecision::GiveUp]
        );
    }

    #[test]
    fn delay_is_capped_at_max_delay_with_more_retries() {
        let policy = RetryPolicy {
            max_retries: 6,
            ..RetryPolicy::default()
        };
        let decisions: Vec<_> = (0..7)
            .map(|n| policy.decide(ErrorClass::Retryable, n))
            .collect();
        assert_eq!(
            decisions,
            vec![
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(10),
                secs(10),
                RetryDecision::GiveUp
            ]
        );
    }

    #[test]
    fn fatal_is_never_retried() {
        let policy = RetryPolicy::default();
        for n in 0..5 {
            assert_eq!(policy.decide(ErrorClass::Fatal, n), RetryDecision::GiveUp);
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = RetryPolicy::default();
        let asked = ErrorClass::RetryAfter(Duration::from_secs(7));
        assert_eq!(policy.decide(asked, 0), secs(7));
        let too_long = ErrorClass::RetryAfter(Duration::from_secs(3600));
        assert_eq!(policy.decide(too_long, 1), secs(60));
        assert_eq!(policy.decide(asked, 3), RetryDecision::GiveUp);
    }

    #[test]
    fn zero_retries_gives_up_at_once() {
        let policy = RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        };
        assert_eq!(
            policy.decide(ErrorClass::Retryable, 0),
            RetryDecision::GiveUp
        );
    }

    #[test]
    fn odd_delays_are_rounded_to_milliseconds() {
        let policy = RetryPolicy {
            initial_delay_ms: 100,
            factor: 1.5,
            ..RetryPolicy::default()
        };
        let ms = |n| match policy.decide(ErrorClass::Retryable, n) {
            RetryDecision::RetryIn(d) => d.as_millis(),
            RetryDecision::GiveUp => 0,
        };
        assert_eq!((ms(0), ms(1), ms(2)), (100, 150, 225));
    }

    #[test]
    fn statuses_are_classified() {
        for status in [408, 429, 500, 502, 503, 504, 520] {
            assert_eq!(classify_status(status), ErrorClass::Retryable, "{status}");
        }
        for status in [400, 401, 403, 404, 422, 200, 302] {
            assert_eq!(classify_status(status), ErrorClass::Fatal, "{status}");
        }
    }

    #[test]
    fn policy_deserializes_with_defaults_for_missing_keys() {
        let policy: RetryPolicy = serde_json::from_str(r#"{"max_retries": 5}"#).unwrap();
        assert_eq!(policy.max_retries, 5);
        assert_eq!(policy.initial_delay_ms, 1_000);
    }
}
