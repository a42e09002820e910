//! A schedule's rules for fires that cannot simply run (CONTRACT §14): overlap, catch-up
//! with its window, the daily cap, and the decisions `schedule_fires` records.

use serde::{Deserialize, Serialize};

/// `schedules.catch_up_window_secs` when none is given.
pub const DEFAULT_CATCH_UP_WINDOW_SECS: u32 = 3600;

/// What a fire does while the schedule's previous task has not ended (pending, running
/// or waiting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// No task: the fire is recorded `skipped_overlap`.
    #[default]
    Skip,
    /// The first such fire is kept (`buffered`) and runs when the previous task ends;
    /// further ones while one is kept are `skipped_overlap`.
    BufferOne,
    /// The fire runs anyway.
    Allow,
}

/// What happens to fires missed while no worker ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// One run, for the latest fire; the others `skipped_missed`.
    #[default]
    Latest,
    /// Every missed fire `skipped_missed`.
    None,
    /// Every missed fire within the window runs.
    All,
}

/// What was decided for one fire (`schedule_fires.decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A task was made for the fire.
    Enqueued,
    /// A task was made for a manual trigger.
    Triggered,
    /// No task: the previous task had not ended.
    SkippedOverlap,
    /// No task: the fire was missed and catch-up does not run it.
    SkippedMissed,
    /// Kept by `buffer_one` until the previous task ends (then recorded `enqueued`).
    Buffered,
    /// No task: `max_fires_per_day` was reached for the fire's UTC day.
    Capped,
}

impl Decision {
    /// Every decision, in the contract's order.
    pub const ALL: [Decision; 6] = [
        Self::Enqueued,
        Self::Triggered,
        Self::SkippedOverlap,
        Self::SkippedMissed,
        Self::Buffered,
        Self::Capped,
    ];

    /// The wire name, as stored in `schedule_fires.decision`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Enqueued => "enqueued",
            Self::Triggered => "triggered",
            Self::SkippedOverlap => "skipped_overlap",
            Self::SkippedMissed => "skipped_missed",
            Self::Buffered => "buffered",
            Self::Capped => "capped",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == text)
    }

    /// Whether the fire makes a task now.
    pub fn makes_task(&self) -> bool {
        matches!(self, Self::Enqueued | Self::Triggered)
    }

    /// Whether the fire counts toward `max_fires_per_day`: the clock's fires that run or
    /// will run (`enqueued`, `buffered`). A manual trigger neither counts nor is capped.
    pub fn counts_toward_cap(&self) -> bool {
        matches!(self, Self::Enqueued | Self::Buffered)
    }
}

/// Why a schedule's rules were refused; the Display text is what a CLI prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown overlap {0:?}: expected skip, buffer_one or allow")]
    Overlap(String),
    #[error("unknown catch-up {0:?}: expected latest, none or all")]
    CatchUp(String),
    #[error("catch_up_window_secs {0} is out of range (0 to {max})", max = i32::MAX)]
    Window(i64),
    #[error(
        "max_fires_per_day {0} is out of range (1 to {max}; pause a schedule to stop its fires)",
        max = i32::MAX
    )]
    MaxFires(i64),
}

/// How a schedule treats overlapping, missed and surplus fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    /// How old a missed fire may be and still run (`latest`, `all`).
    pub catch_up_window_secs: u32,
    /// At most this many fires counted per UTC day ([`Decision::counts_toward_cap`]).
    pub max_fires_per_day: Option<u32>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            overlap: Overlap::Skip,
            catch_up: CatchUp::Latest,
            catch_up_window_secs: DEFAULT_CATCH_UP_WINDOW_SECS,
            max_fires_per_day: None,
        }
    }
}

impl Overlap {
    /// The wire name: `skip`, `buffer_one` or `allow`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::BufferOne => "buffer_one",
            Self::Allow => "allow",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        [Self::Skip, Self::BufferOne, Self::Allow]
            .into_iter()
            .find(|o| o.as_str() == text)
            .ok_or_else(|| PolicyError::Overlap(text.to_owned()))
    }
}

impl CatchUp {
    /// The wire name: `latest`, `none` or `all`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Latest => "latest",
            Self::None => "none",
            Self::All => "all",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        [Self::Latest, Self::None, Self::All]
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| PolicyError::CatchUp(text.to_owned()))
    }
}

impl Policy {
    /// The rules as a `schedules` row (or a CLI / gateway request) gives them.
    pub fn from_row(
        overlap: &str,
        catch_up: &str,
        catch_up_window_secs: i64,
        max_fires_per_day: Option<i64>,
    ) -> Result<Self, PolicyError> {
        let in_range = |value: i64, low: i64| (low..=i64::from(i32::MAX)).contains(&value);
        if !in_range(catch_up_window_secs, 0) {
            return Err(PolicyError::Window(catch_up_window_secs));
        }
        if let Some(max) = max_fires_per_day.filter(|max| !in_range(*max, 1)) {
            return Err(PolicyError::MaxFires(max));
        }
        Ok(Self {
            overlap: Overlap::parse(overlap)?,
            catch_up: CatchUp::parse(catch_up)?,
            catch_up_window_secs: catch_up_window_secs as u32,
            max_fires_per_day: max_fires_per_day.map(|max| max as u32),
        })
    }
}
