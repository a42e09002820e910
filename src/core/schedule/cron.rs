//! Parsing a 5-field cron expression (`minute hour day-of-month month day-of-week`) into
//! the sets of values each field allows. Evaluation over a time zone is in `zoned.rs`.
//!
//! Accepted in every field, comma-separated: `*`, a value, a range `a-b`, and a step after
//! `*` or a range (`*/5`, `1-10/2`). Months and days of week may be named (`jan`..`dec`,
//! `sun`..`sat`, any case, also inside ranges); day of week `0` and `7` are both Sunday.
//! Refused with a [`CronError`] naming the field: a wrong number of fields, an empty item,
//! a value out of the field's range, a range whose start is after its end, a step of 0 or
//! a step after a single value (`5/15`: write `5-59/15`), and an expression that can never
//! fire (`0 0 30 2 *`).
//!
//! Day of month and day of week combine as in Vixie cron (and crontab.guru): when either
//! field begins with `*` a day must match both (so the other alone decides), otherwise a
//! day matching either fires (`0 9 1 * mon` fires on the 1st and on every Monday).

use std::fmt;

/// One field of a cron expression, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronField {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl CronField {
    const ALL: [CronField; 5] = [
        Self::Minute,
        Self::Hour,
        Self::DayOfMonth,
        Self::Month,
        Self::DayOfWeek,
    ];

    /// The field's name as a person reads it in an error.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day of month",
            Self::Month => "month",
            Self::DayOfWeek => "day of week",
        }
    }

    /// The smallest and largest value the field accepts (day of week: 7 is Sunday too).
    fn bounds(&self) -> (u32, u32) {
        match self {
            Self::Minute => (0, 59),
            Self::Hour => (0, 23),
            Self::DayOfMonth => (1, 31),
            Self::Month => (1, 12),
            Self::DayOfWeek => (0, 7),
        }
    }

    /// The names the field accepts, index = value - first value.
    fn names(&self) -> (&'static [&'static str], u32) {
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        match self {
            Self::Month => (&MONTHS, 1),
            Self::DayOfWeek => (&DAYS, 0),
            _ => (&[], 0),
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a cron expression was refused; the Display text is what a CLI prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error(
        "a cron expression has 5 fields (minute hour day-of-month month day-of-week), \
         {found} given in {expression:?}"
    )]
    FieldCount { expression: String, found: usize },
    #[error("cron {field} field {text:?}: {problem}")]
    Field {
        field: CronField,
        /// The field as written.
        text: String,
        problem: String,
    },
    #[error("cron expression {expression:?} never fires: {why}")]
    NeverFires { expression: String, why: String },
}

/// A parsed cron expression: the set of values each field allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    /// Bit `m` set: minute `m` (0..=59).
    pub(super) minutes: u64,
    /// Bit `h` set: hour `h` (0..=23).
    pub(super) hours: u32,
    /// Bit `d` set: day of month `d` (1..=31).
    pub(super) days_of_month: u32,
    /// Bit `m` set: month `m` (1..=12).
    pub(super) months: u16,
    /// Bit `d` set: day of week `d` (0 = Sunday ..= 6).
    pub(super) days_of_week: u8,
    /// Day of month or day of week begins with `*`: a day must match both fields.
    pub(super) day_and: bool,
    /// The expression as given, fields separated by single spaces.
    source: String,
}

impl CronExpr {
    /// Parses `expression` (fields separated by any whitespace).
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        let fields: Vec<&str> = expression.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount {
                expression: expression.to_owned(),
                found: fields.len(),
            });
        }
        let mut sets = [0u64; 5];
        for ((set, field), text) in sets.iter_mut().zip(CronField::ALL).zip(&fields) {
            *set = parse_field(field, text)?;
        }
        // Day of week 7 is Sunday (0).
        let dow = sets[4];
        let days_of_week = ((dow | (dow >> 7)) & 0x7f) as u8;
        let expr = Self {
            minutes: sets[0],
            hours: sets[1] as u32,
            days_of_month: sets[2] as u32,
            months: sets[3] as u16,
            days_of_week,
            day_and: fields[2].starts_with('*') || fields[4].starts_with('*'),
            source: fields.join(" "),
        };
        expr.check_can_fire()?;
        Ok(expr)
    }

    /// The expression, fields separated by single spaces.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Refuses a day-of-month restriction (under the AND rule) that no allowed month has.
    fn check_can_fire(&self) -> Result<(), CronError> {
        if !self.day_and {
            // Under the OR rule an allowed weekday always comes.
            return Ok(());
        }
        // Under the AND rule an allowed day of month in an allowed month falls on every
        // weekday in some year, so only the day of month and the month can rule out a fire.
        // Longest each month can be (February in a leap year).
        const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let possible = (1..=12u32)
            .filter(|month| self.months & (1 << month) != 0)
            .any(|month| {
                let first_day = self.days_of_month.trailing_zeros();
                first_day <= LONGEST[month as usize - 1]
            });
        if possible {
            return Ok(());
        }
        Err(CronError::NeverFires {
            expression: self.source.clone(),
            why: "no allowed month has any of the allowed days of month".to_owned(),
        })
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Parses one field into a bit set of its allowed values.
fn parse_field(field: CronField, text: &str) -> Result<u64, CronError> {
    let error = |problem: String| CronError::Field {
        field,
        text: text.to_owned(),
        problem,
    };
    let mut set = 0u64;
    for item in text.split(',') {
        set |= parse_item(field, item).map_err(error)?;
    }
    Ok(set)
}

/// One comma-separated item: `*`, `v`, `a-b`, each optionally followed by `/step`
/// (a step only after `*` or a range).
fn parse_item(field: CronField, item: &str) -> Result<u64, String> {
    if item.is_empty() {
        return Err("an empty item (two commas in a row, or a comma at an end)".to_owned());
    }
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(parse_step(step)?)),
        None => (item, None),
    };
    let (low, high) = field.bounds();
    let (start, end) = if range == "*" {
        // Day of week `*` is 0-6: 7 would only repeat Sunday.
        let high = if field == CronField::DayOfWeek {
            6
        } else {
            high
        };
        (low, high)
    } else if let Some((a, b)) = range.split_once('-') {
        let (a, b) = (parse_value(field, a)?, parse_value(field, b)?);
        if a > b {
            return Err(format!(
                "the range {range} starts after it ends (ranges do not wrap around)"
            ));
        }
        (a, b)
    } else {
        let value = parse_value(field, range)?;
        if let Some(step) = step {
            return Err(format!(
                "a step needs * or a range before it: write {value}-{high}/{step} or */{step}"
            ));
        }
        (value, value)
    };
    let step = step.unwrap_or(1);
    Ok((start..=end)
        .step_by(step as usize)
        .fold(0u64, |set, value| set | (1 << value)))
}

fn parse_step(step: &str) -> Result<u32, String> {
    match step.parse::<u32>() {
        Ok(0) => Err("a step of 0 (a step is at least 1)".to_owned()),
        Ok(value) if step.bytes().all(|b| b.is_ascii_digit()) => Ok(value),
        _ => Err(format!("the step {step:?} is not a positive whole number")),
    }
}

/// A number or (month, day of week) a name, within the field's bounds.
fn parse_value(field: CronField, text: &str) -> Result<u32, String> {
    let (low, high) = field.bounds();
    if let Ok(value) = text.parse::<u32>()
        && text.bytes().all(|b| b.is_ascii_digit())
    {
        if value < low || value > high {
            return Err(format!("{value} is out of range ({low}-{high})"));
        }
        return Ok(value);
    }
    let (names, first) = field.names();
    let lower = text.to_ascii_lowercase();
    if let Some(index) = names.iter().position(|name| *name == lower) {
        return Ok(first + index as u32);
    }
    Err(if names.is_empty() {
        format!("{text:?} is not a number from {low} to {high}")
    } else {
        format!(
            "{text:?} is neither a number from {low} to {high} nor one of {}",
            names.join(", ")
        )
    })
}

impl CronExpr {
    /// Whether a fire may fall on `date` (month, and the day-of-month / day-of-week rule).
    pub(super) fn day_matches(&self, date: chrono::NaiveDate) -> bool {
        use chrono::Datelike;
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let dom = self.days_of_month & (1 << date.day()) != 0;
        let dow = self.days_of_week & (1 << date.weekday().num_days_from_sunday()) != 0;
        if self.day_and { dom && dow } else { dom || dow }
    }

    /// Whether a fire may fall at `hour:minute` of a matching day.
    pub(super) fn time_matches(&self, hour: u32, minute: u32) -> bool {
        self.hours & (1 << hour) != 0 && self.minutes & (1 << minute) != 0
    }
}
