//! Unit and property tests of schedules: cron parsing, evaluation over time zones and DST,
//! `every` intervals, fire ids and the fire decisions.

use chrono::{DateTime, Utc};

mod cron_parse;
mod decide;
mod decide_limits;
mod every;
mod props;
mod zoned;

/// An instant from RFC 3339 text.
fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("a valid test instant")
        .with_timezone(&Utc)
}
