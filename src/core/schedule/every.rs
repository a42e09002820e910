//! `every` schedules: a fixed interval such as `30s`, `5m`, `1h`, `1d` or `1h30m`.
//!
//! They ignore time zones and are **anchored at the Unix epoch**: an interval of `n`
//! seconds fires at every instant whose Unix time is a multiple of `n`. So every worker,
//! before and after any restart, computes the same fire times from the interval alone (no
//! creation time needed), `every 1h` fires on the hour UTC, `every 1d` at 00:00 UTC, and
//! `every 7d` on Thursdays 00:00 UTC (1970-01-01 was a Thursday).

use std::fmt;

use chrono::{DateTime, Utc};

/// The shortest interval accepted.
pub const MIN_EVERY_SECS: u32 = 1;
/// The longest interval accepted: what `schedules.every_secs` (a PostgreSQL `int`) holds.
pub const MAX_EVERY_SECS: u32 = i32::MAX as u32;

/// Why an interval was refused; the Display text is what a CLI prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EveryError {
    #[error(
        "interval {text:?}: {problem} (write a number and a unit s, m, h or d, largest unit \
         first, e.g. 30s, 5m, 1h30m, 1d)"
    )]
    Syntax { text: String, problem: String },
    #[error("interval of {secs} s is out of range ({MIN_EVERY_SECS} s to {MAX_EVERY_SECS} s)")]
    OutOfRange { secs: i64 },
}

/// A positive interval in whole seconds, anchored at the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Every {
    secs: u32,
}

impl Every {
    /// Parses `30s`, `5m`, `1h`, `1d` and combinations with the largest unit first
    /// (`1d12h`, `1h30m`, `2m30s`); each unit at most once, no sign, no spaces inside.
    pub fn parse(text: &str) -> Result<Self, EveryError> {
        let syntax = |problem: &str| EveryError::Syntax {
            text: text.to_owned(),
            problem: problem.to_owned(),
        };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(syntax("it is empty"));
        }
        let mut total: i64 = 0;
        let mut last_unit = u64::MAX;
        let mut rest = trimmed;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(syntax("expected a number"));
            }
            let (number, tail) = rest.split_at(digits);
            let mut chars = tail.chars();
            let unit = match chars.next().map(|c| c.to_ascii_lowercase()) {
                Some('s') => 1,
                Some('m') => 60,
                Some('h') => 3_600,
                Some('d') => 86_400,
                Some(_) => return Err(syntax("unknown unit")),
                None => return Err(syntax("a number without a unit")),
            };
            if unit >= last_unit {
                return Err(syntax("units repeat or are not largest first"));
            }
            last_unit = unit;
            let count: i64 = number.parse().map_err(|_| syntax("a number too large"))?;
            total = count
                .checked_mul(unit as i64)
                .and_then(|secs| total.checked_add(secs))
                .ok_or_else(|| syntax("a number too large"))?;
            rest = chars.as_str();
        }
        Self::from_secs(total)
    }

    /// An interval of `secs` seconds, as stored in `schedules.every_secs`.
    pub fn from_secs(secs: i64) -> Result<Self, EveryError> {
        match u32::try_from(secs) {
            Ok(secs) if (MIN_EVERY_SECS..=MAX_EVERY_SECS).contains(&secs) => Ok(Self { secs }),
            _ => Err(EveryError::OutOfRange { secs }),
        }
    }

    /// The interval in seconds (what `schedules.every_secs` stores).
    pub fn secs(&self) -> u32 {
        self.secs
    }

    /// The first fire strictly after `after`: the next multiple of the interval since the
    /// Unix epoch.
    pub fn next_fire(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let secs = i64::from(self.secs);
        // The next multiple after the whole second `after` falls in is a whole second
        // later at least, so strictly after `after` whatever its fraction.
        let whole = after.timestamp();
        let next = (whole.div_euclid(secs) + 1).checked_mul(secs)?;
        DateTime::from_timestamp(next, 0)
    }
}

impl fmt::Display for Every {
    /// The interval in the largest units that add up to it: `1h30m`, `1d`, `45s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.secs;
        for (unit, name) in [(86_400, 'd'), (3_600, 'h'), (60, 'm'), (1, 's')] {
            if rest >= unit {
                write!(f, "{}{name}", rest / unit)?;
                rest %= unit;
            }
        }
        Ok(())
    }
}
