//! Provider rate limits shared by every worker (CONTRACT §10), the pure part: which limit
//! a model falls under (`[[llm.limits]] model = "glob"`), and whether one more request of an
//! estimated size fits in the sliding window given what was sent in it, or how long to wait
//! until it does. The log of sent requests lives in PostgreSQL, so all workers draw from
//! the same buckets.

use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;

use crate::core::approval::glob_matches;

/// One `[[llm.limits]]` entry: at most `rpm` requests and `tpm` tokens in any window of
/// `window_secs` (60 by default, as the names say; shorter windows scale both).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RateLimit {
    /// The models it covers: a name or a glob (`gpt-4o*`). The first matching entry applies.
    pub model: String,
    /// Requests per window.
    #[serde(default)]
    pub rpm: Option<u32>,
    /// Tokens (prompt + completion) per window.
    #[serde(default)]
    pub tpm: Option<u64>,
    /// The window, in seconds.
    #[serde(default = "default_window")]
    pub window_secs: f64,
}

fn default_window() -> f64 {
    60.0
}

impl RateLimit {
    /// The bucket's name, shared by every worker with the same configuration.
    pub fn bucket(&self) -> &str {
        &self.model
    }

    /// The window as a duration.
    pub fn window(&self) -> Duration {
        Duration::milliseconds((self.window_secs * 1000.0).round() as i64)
    }

    /// The window a slot stays taken for: the window and a margin (2.5 % of it, between
    /// 250 ms and 1 s) for the time between taking a slot and the request reaching the
    /// provider, which varies from one request to the next. Without it a request sent
    /// exactly one window after another can reach the provider a little less than a window
    /// after it, and be refused.
    pub fn held_for(&self) -> Duration {
        let margin = (self.window_secs * 25.0).clamp(250.0, 1000.0);
        self.window() + Duration::milliseconds(margin.round() as i64)
    }

    /// Checks the entry: a model pattern, a positive window, and at least one limit.
    pub fn validate(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("llm.limits: model must not be empty".into());
        }
        if !(self.window_secs.is_finite() && self.window_secs > 0.0) {
            return Err(format!(
                "llm.limits {:?}: window_secs must be positive",
                self.model
            ));
        }
        if self.rpm.is_none() && self.tpm.is_none() {
            return Err(format!("llm.limits {:?}: set rpm, tpm or both", self.model));
        }
        if self.rpm == Some(0) || self.tpm == Some(0) {
            return Err(format!(
                "llm.limits {:?}: rpm and tpm must be positive",
                self.model
            ));
        }
        Ok(())
    }
}

/// The limit `model` falls under, if any: the first entry whose pattern matches.
pub fn limit_for<'a>(limits: &'a [RateLimit], model: &str) -> Option<&'a RateLimit> {
    limits
        .iter()
        .find(|limit| glob_matches(&limit.model, model))
}

/// A request sent in the window: when, and its tokens (estimated until it is answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub at: DateTime<Utc>,
    pub tokens: i64,
}

/// Whether a request of `tokens` may go at `now`: `Ok` or the wait until it may. `sent`
/// holds the requests of the last window (any order); `blocked_until` is a 429's
/// Retry-After for the whole bucket. A request larger than the whole token limit goes once
/// the window is empty (it could never fit otherwise).
pub fn admit(
    limit: &RateLimit,
    now: DateTime<Utc>,
    sent: &[Sent],
    blocked_until: Option<DateTime<Utc>>,
    tokens: i64,
) -> Result<(), Duration> {
    if let Some(until) = blocked_until.filter(|until| *until > now) {
        return Err(until - now);
    }
    let window = limit.held_for();
    let mut in_window: Vec<Sent> = sent
        .iter()
        .copied()
        .filter(|s| s.at > now - window)
        .collect();
    in_window.sort_by_key(|s| s.at);
    let mut wait = Duration::zero();
    if let Some(rpm) = limit.rpm {
        let rpm = rpm as usize;
        if in_window.len() >= rpm {
            // The oldest requests must leave the window until one slot is free.
            let leaving = in_window[in_window.len() - rpm];
            wait = wait.max(leaving.at + window - now);
        }
    }
    if let Some(tpm) = limit.tpm {
        let tpm = i64::try_from(tpm).unwrap_or(i64::MAX);
        let used: i64 = in_window.iter().map(|s| s.tokens.max(0)).sum();
        let needed = tokens.clamp(0, tpm);
        if used + needed > tpm {
            // Wait until enough of the oldest requests have left the window.
            let mut freed = 0;
            for s in &in_window {
                freed += s.tokens.max(0);
                if used - freed + needed <= tpm {
                    wait = wait.max(s.at + window - now);
                    break;
                }
            }
        }
    }
    if wait > Duration::zero() {
        Err(wait)
    } else {
        Ok(())
    }
}

/// A rough token count of a request's messages (4 characters a token), for the `tpm`
/// bucket before the provider reports the real usage.
pub fn estimate_tokens(chars: usize) -> i64 {
    i64::try_from(chars.div_ceil(4)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(rpm: Option<u32>, tpm: Option<u64>) -> RateLimit {
        RateLimit {
            model: "gpt-*".into(),
            rpm,
            tpm,
            window_secs: 60.0,
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn sent(secs: i64, tokens: i64) -> Sent {
        Sent {
            at: at(secs),
            tokens,
        }
    }

    #[test]
    fn the_first_matching_pattern_applies() {
        let limits = vec![limit(Some(1), None), {
            let mut all = limit(Some(2), None);
            all.model = "*".into();
            all
        }];
        assert_eq!(limit_for(&limits, "gpt-4o").unwrap().rpm, Some(1));
        assert_eq!(limit_for(&limits, "claude").unwrap().rpm, Some(2));
        assert!(limit_for(&limits[..1], "claude").is_none());
    }

    #[test]
    fn requests_wait_until_the_oldest_leaves_the_window() {
        // A 60 s window holds a slot for 61 s (the margin for the way to the provider).
        let rpm = limit(Some(2), None);
        assert_eq!(rpm.held_for(), Duration::seconds(61));
        let sent = [sent(0, 1), sent(10, 1)];
        assert_eq!(admit(&rpm, at(20), &sent[..1], None, 1), Ok(()));
        assert_eq!(
            admit(&rpm, at(20), &sent, None, 1),
            Err(Duration::seconds(41))
        );
        assert_eq!(admit(&rpm, at(61), &sent, None, 1), Ok(()));
        // Entries older than the window do not count.
        assert_eq!(admit(&rpm, at(75), &sent, None, 1), Ok(()));
        let mut short = limit(Some(1), None);
        short.window_secs = 2.0;
        assert_eq!(short.held_for(), Duration::milliseconds(2_250));
    }

    #[test]
    fn tokens_wait_until_enough_have_left_the_window() {
        let tpm = limit(None, Some(100));
        let sent = [sent(0, 60), sent(30, 30)];
        assert_eq!(admit(&tpm, at(40), &sent, None, 10), Ok(()));
        assert_eq!(
            admit(&tpm, at(40), &sent, None, 20),
            Err(Duration::seconds(21))
        );
        assert_eq!(
            admit(&tpm, at(40), &sent, None, 80),
            Err(Duration::seconds(51))
        );
        // Larger than the whole limit: goes once the window is empty.
        assert_eq!(
            admit(&tpm, at(40), &sent, None, 500),
            Err(Duration::seconds(51))
        );
        assert_eq!(admit(&tpm, at(100), &sent, None, 500), Ok(()));
    }

    #[test]
    fn a_block_holds_the_whole_bucket() {
        let rpm = limit(Some(100), None);
        assert_eq!(
            admit(&rpm, at(0), &[], Some(at(3)), 1),
            Err(Duration::seconds(3))
        );
        assert_eq!(admit(&rpm, at(3), &[], Some(at(3)), 1), Ok(()));
    }

    #[test]
    fn entries_are_checked() {
        assert!(limit(Some(10), None).validate().is_ok());
        assert!(limit(None, None).validate().is_err());
        assert!(limit(Some(0), None).validate().is_err());
        let mut short = limit(Some(1), None);
        short.window_secs = 0.0;
        assert!(short.validate().is_err());
        assert_eq!(estimate_tokens(9), 3);
    }
}
