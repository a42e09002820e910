//! `agents.stall` (CONTRACT §14): how many identical recursions in a row count as a stall,
//! and what then happens. `{"repeat": 3, "action": "nudge"}` by default, `{"repeat": 0}`
//! off; unknown keys, unknown actions and a `repeat` of 1 (every recursion would be a
//! stall) are refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::limits::trim_text;

/// `repeat` when none is given.
pub const DEFAULT_STALL_REPEAT: u32 = 3;
/// The largest `repeat` accepted (more than any sensible `max_iteration`).
pub const MAX_STALL_REPEAT: u32 = 1000;

/// What a stall does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StallAction {
    /// Warn the model (`context.stall_warning`); if it repeats `repeat` more times, act as
    /// `answer`.
    #[default]
    Nudge,
    /// One last recursion told to ANSWER; failed `no_progress` if it does not.
    Answer,
    /// The task waits, reason `stalled`, until a person resumes it.
    Pause,
    /// The task fails, reason `no_progress`, with its partial result.
    Fail,
}

impl StallAction {
    /// The wire name (`task.stalled`'s `action`, the metric's label).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Nudge => "nudge",
            Self::Answer => "answer",
            Self::Pause => "pause",
            Self::Fail => "fail",
        }
    }
}

/// Why `agents.stall` was refused; the Display text is what a CLI or the gateway shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agents.stall: {0}")]
pub struct StallSettingsError(String);

/// An agent's stall detection settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawStallSettings")]
pub struct StallSettings {
    /// Identical recursions in a row that make a stall; 0: detection is off.
    pub repeat: u32,
    pub action: StallAction,
}

impl Default for StallSettings {
    fn default() -> Self {
        Self {
            repeat: DEFAULT_STALL_REPEAT,
            action: StallAction::Nudge,
        }
    }
}

impl StallSettings {
    /// Detection turned off (`{"repeat": 0}`).
    pub const OFF: Self = Self {
        repeat: 0,
        action: StallAction::Nudge,
    };

    /// Reads `agents.stall` as stored (jsonb) or sent: an object; `null` gives the default.
    pub fn from_json(value: &Value) -> Result<Self, StallSettingsError> {
        if value.is_null() {
            return Ok(Self::default());
        }
        if !value.is_object() {
            // serde would also read a struct from an array (`[3, "nudge"]`).
            return Err(StallSettingsError(format!(
                "expected an object such as {{\"repeat\": 3, \"action\": \"nudge\"}}, \
                 not {}",
                trim_text(&value.to_string(), 100)
            )));
        }
        Self::deserialize(value).map_err(|error| StallSettingsError(error.to_string()))
    }

    /// Whether detection is off.
    pub fn is_off(&self) -> bool {
        self.repeat == 0
    }
}

/// The settings as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStallSettings {
    #[serde(default = "default_repeat")]
    repeat: u32,
    #[serde(default)]
    action: StallAction,
}

fn default_repeat() -> u32 {
    DEFAULT_STALL_REPEAT
}

impl TryFrom<RawStallSettings> for StallSettings {
    type Error = String;

    fn try_from(raw: RawStallSettings) -> Result<Self, Self::Error> {
        match raw.repeat {
            1 => Err(
                "repeat 1 would count every recursion as a stall: use 0 (off) or 2 \
                      or more"
                    .to_owned(),
            ),
            repeat if repeat > MAX_STALL_REPEAT => Err(format!(
                "repeat {repeat} is more than {MAX_STALL_REPEAT}; use 0 to turn detection off"
            )),
            repeat => Ok(Self {
                repeat,
                action: raw.action,
            }),
        }
    }
}
