//! Listing tasks across agents (CONTRACT v3 §14 "Listing"), pure: what a filter may say
//! and the cursor of a page. `agentd tasks` and `GET /v1/tasks` read tasks newest first by
//! the keyset `(created_at, task_id)`; a page's cursor is the key of its last task, so a
//! task recorded meanwhile never shifts the next page (it is newer than the cursor, or it
//! lands where it belongs).
//!
//! The cursor is opaque to clients: 48 lowercase hex digits (the creation time in
//! microseconds since the Unix epoch, then the task id). Anything else is refused with
//! [`ListingError::Cursor`].

use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

/// Tasks per page when none is asked for.
pub const DEFAULT_LIMIT: i64 = 50;
/// The most tasks one page holds.
pub const MAX_LIMIT: i64 = 500;

/// Every task status (CONTRACT §4), in the order a task goes through them.
pub const STATUSES: [&str; 7] = [
    "pending",
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
    "rejected",
];

/// Why a listing request was refused; the text names the parameter, for a 400 or a CLI
/// message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    #[error("status: unknown status {0} (expected one or more of {list}, comma-separated)", list = STATUSES.join(", "))]
    Status(String),
    #[error(
        "since: {0} is neither an age (a whole number and s, m, h, d or w: 30m, 2h, 7d) \
         nor an RFC 3339 time (2026-03-29T02:30:00Z)"
    )]
    Since(String),
    #[error("limit: {0} is out of range (1 to {MAX_LIMIT})")]
    Limit(i64),
    #[error(
        "cursor: {0} is not a cursor of this listing (pass next_cursor of the previous \
         page as it is)"
    )]
    Cursor(String),
}

/// The position after which the next page starts: the last task of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskCursor {
    pub created_at: DateTime<Utc>,
    pub task_id: Uuid,
}

impl TaskCursor {
    /// The cursor's text: 16 hex digits of microseconds, then the task id's 32.
    pub fn encode(&self) -> String {
        let micros = self.created_at.timestamp_micros() as u64;
        format!("{micros:016x}{}", self.task_id.simple())
    }

    /// Reads a cursor [`TaskCursor::encode`] wrote.
    pub fn decode(text: &str) -> Result<Self, ListingError> {
        let refuse = || ListingError::Cursor(crate::core::bounded::quote(text));
        let ok = text.len() == 48 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !ok {
            return Err(refuse());
        }
        let micros = u64::from_str_radix(&text[..16], 16).map_err(|_| refuse())?;
        let micros = i64::try_from(micros).map_err(|_| refuse())?;
        let created_at = DateTime::from_timestamp_micros(micros).ok_or_else(refuse)?;
        let task_id = Uuid::try_parse(&text[16..]).map_err(|_| refuse())?;
        Ok(Self {
            created_at,
            task_id,
        })
    }
}

/// The statuses of `text`: one or more of [`STATUSES`], comma-separated; blanks around
/// them are ignored, repeats kept once.
pub fn parse_statuses(text: &str) -> Result<Vec<String>, ListingError> {
    let mut statuses: Vec<String> = Vec::new();
    for part in text.split(',').map(str::trim) {
        if !STATUSES.contains(&part) {
            return Err(ListingError::Status(crate::core::bounded::quote(part)));
        }
        if !statuses.iter().any(|known| known == part) {
            statuses.push(part.to_owned());
        }
    }
    Ok(statuses)
}

/// The earliest creation time `since` allows at `now`: an age (`30m`, `2h`, `7d`, `1w`) or
/// an RFC 3339 time.
pub fn parse_since(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, ListingError> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let refuse = || ListingError::Since(crate::core::bounded::quote(text));
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let amount: i64 = number.parse().map_err(|_| refuse())?;
    let age = match unit {
        "s" => TimeDelta::try_seconds(amount),
        "m" => TimeDelta::try_minutes(amount),
        "h" => TimeDelta::try_hours(amount),
        "d" => TimeDelta::try_days(amount),
        "w" => TimeDelta::try_weeks(amount),
        _ => None,
    };
    age.filter(|age| *age > TimeDelta::zero())
        .and_then(|age| now.checked_sub_signed(age))
        .ok_or_else(refuse)
}

/// The page size: [`DEFAULT_LIMIT`] when none is asked for, else 1 to [`MAX_LIMIT`].
pub fn check_limit(limit: Option<i64>) -> Result<i64, ListingError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        Some(limit) => Err(ListingError::Limit(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_cursor_reads_back_to_the_same_position() {
        let cursor = TaskCursor {
            created_at: at("2026-03-29T02:30:00.123456Z"),
            task_id: Uuid::now_v7(),
        };
        let text = cursor.encode();
        assert_eq!(text.len(), 48);
        assert_eq!(TaskCursor::decode(&text), Ok(cursor));
    }

    #[test]
    fn anything_else_is_not_a_cursor() {
        let good = TaskCursor {
            created_at: at("2026-03-29T02:30:00Z"),
            task_id: Uuid::nil(),
        }
        .encode();
        let upper = good.to_uppercase();
        let negative = format!("ffffffffffffffff{}", Uuid::nil().simple());
        for bad in [
            "",
            "abc",
            &good[1..],
            &upper,
            &negative,
            "\0",
            &format!("{good}0"),
        ] {
            let err = TaskCursor::decode(bad).unwrap_err();
            assert!(err.to_string().starts_with("cursor: "), "{bad:?}: {err}");
        }
    }

    #[test]
    fn statuses_are_checked_and_kept_once() {
        assert_eq!(
            parse_statuses("failed, rejected,failed").unwrap(),
            ["failed", "rejected"]
        );
        let err = parse_statuses("failed,done").unwrap_err();
        assert_eq!(err, ListingError::Status("\"done\"".into()));
        assert!(err.to_string().starts_with("status: "));
        assert!(parse_statuses("").is_err());
    }

    #[test]
    fn since_is_an_age_or_a_time() {
        let now = at("2026-05-01T12:00:00Z");
        assert_eq!(parse_since("2h", now), Ok(at("2026-05-01T10:00:00Z")));
        assert_eq!(parse_since("1w", now), Ok(at("2026-04-24T12:00:00Z")));
        assert_eq!(
            parse_since("2026-04-30T00:00:00+02:00", now),
            Ok(at("2026-04-29T22:00:00Z"))
        );
        for bad in [
            "0h",
            "2",
            "h",
            "2y",
            "-1h",
            "yesterday",
            "99999999999999999999w",
        ] {
            let err = parse_since(bad, now).unwrap_err();
            assert!(err.to_string().starts_with("since: "), "{bad}: {err}");
        }
    }

    #[test]
    fn the_limit_is_bounded() {
        assert_eq!(check_limit(None), Ok(DEFAULT_LIMIT));
        assert_eq!(check_limit(Some(MAX_LIMIT)), Ok(MAX_LIMIT));
        assert_eq!(check_limit(Some(0)), Err(ListingError::Limit(0)));
        assert_eq!(
            check_limit(Some(MAX_LIMIT + 1)),
            Err(ListingError::Limit(MAX_LIMIT + 1))
        );
    }
}
