//! The stall tracker: fed each finished recursion's signature, it counts identical
//! recursions in a row and says what to do when they reach `repeat` (CONTRACT §14).
//! Serialize + Deserialize: it is part of the machine's checkpoint.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::settings::{StallAction, StallSettings};
use super::signature::ProgressSignature;

/// What the model is told when it repeats itself (`nudge`), in `context.stall_warning`.
/// `{count}`, `{action}` and `{repeat}` are filled in.
const WARNING: &str = "Your last {count} recursions were the same ({action}) with the same \
result: this makes no progress. Do something different: use what you already know, change \
the arguments or the tool, RE_PLAN, or ANSWER. If the next {repeat} recursions repeat it \
again, you will have to ANSWER at once.";

/// What the last recursion is told after a stall with `answer` (or an ignored nudge), in
/// `context.stall_warning`.
pub const STALL_ANSWER_NOW: &str = "You have repeated the same action with the same result \
without progress: reply with action ANSWER now, giving the best answer you can from what \
you already know. No tool calls or further recursions will run.";

/// What the driver does after a recursion, per [`StallTracker::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StallVerdict {
    /// Go on as usual.
    Continue,
    /// A stall with `nudge`: the next snapshots carry `context.stall_warning` = `text`.
    Warn { count: u32, text: String },
    /// The next recursion is the last: it must ANSWER (`context.stall_warning` =
    /// [`STALL_ANSWER_NOW`]), else the task fails `no_progress`.
    ForceAnswer { count: u32 },
    /// The task waits, reason `stalled`.
    Pause { count: u32 },
    /// The task fails, reason `no_progress`, with its partial result: a stall with `fail`,
    /// or a recursion after [`StallVerdict::ForceAnswer`] that did not ANSWER.
    Fail { count: u32 },
}

impl StallVerdict {
    /// `task.stalled`'s `{"count", "action"}` for this verdict; `None` when nothing happened.
    pub fn event(&self) -> Option<(u32, StallAction)> {
        match self {
            Self::Continue => None,
            Self::Warn { count, .. } => Some((*count, StallAction::Nudge)),
            Self::ForceAnswer { count } => Some((*count, StallAction::Answer)),
            Self::Pause { count } => Some((*count, StallAction::Pause)),
            Self::Fail { count } => Some((*count, StallAction::Fail)),
        }
    }
}

/// Where the tracker is in the escalation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "stage")]
enum Stage {
    /// Counting.
    #[default]
    Watching,
    /// The model was warned; the text stays in the snapshot until it does something else.
    Warned { text: String },
    /// The next recursion must ANSWER.
    MustAnswer,
}

/// Identical recursions in a row, and the escalation so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallTracker {
    /// The signature of the latest recursion.
    #[serde(default)]
    last: Option<Uuid>,
    /// How many recursions in a row had it.
    #[serde(default)]
    count: u32,
    #[serde(default)]
    stage: Stage,
}

impl StallTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a finished recursion that did not end the task (an ANSWER is never fed).
    pub fn observe(
        &mut self,
        settings: &StallSettings,
        signature: &ProgressSignature,
    ) -> StallVerdict {
        if settings.is_off() {
            *self = Self::default();
            return StallVerdict::Continue;
        }
        if self.stage == Stage::MustAnswer {
            // The one recursion left did not ANSWER.
            self.count += 1;
            return StallVerdict::Fail { count: self.count };
        }
        if self.last == Some(signature.hash) {
            self.count = self.count.saturating_add(1);
        } else {
            *self = Self {
                last: Some(signature.hash),
                count: 1,
                stage: Stage::Watching,
            };
        }
        let repeat = settings.repeat;
        match (&self.stage, settings.action) {
            (Stage::Watching, _) if self.count < repeat => StallVerdict::Continue,
            (Stage::Watching, StallAction::Nudge) => {
                let text = WARNING
                    .replace("{count}", &self.count.to_string())
                    .replace("{action}", &signature.summary)
                    .replace("{repeat}", &repeat.to_string());
                self.stage = Stage::Warned { text: text.clone() };
                StallVerdict::Warn {
                    count: self.count,
                    text,
                }
            }
            (Stage::Warned { .. }, _) if self.count < repeat.saturating_mul(2) => {
                StallVerdict::Continue
            }
            (Stage::Warned { .. }, _) | (Stage::Watching, StallAction::Answer) => {
                self.stage = Stage::MustAnswer;
                StallVerdict::ForceAnswer { count: self.count }
            }
            (Stage::Watching, StallAction::Pause) => {
                let count = self.count;
                // A person resumes the task: it gets `repeat` fresh recursions.
                self.count = 0;
                StallVerdict::Pause { count }
            }
            (Stage::Watching, StallAction::Fail) => StallVerdict::Fail { count: self.count },
            (Stage::MustAnswer, _) => StallVerdict::Fail { count: self.count },
        }
    }

    /// What goes in the next snapshot's `context.stall_warning`, if anything: the warning
    /// while the model keeps repeating after a nudge, [`STALL_ANSWER_NOW`] when it must
    /// answer.
    pub fn warning(&self) -> Option<&str> {
        match &self.stage {
            Stage::Watching => None,
            Stage::Warned { text } => Some(text),
            Stage::MustAnswer => Some(STALL_ANSWER_NOW),
        }
    }

    /// Whether the next recursion must ANSWER (anything else fails the task `no_progress`).
    pub fn must_answer(&self) -> bool {
        self.stage == Stage::MustAnswer
    }

    /// Identical recursions in a row so far.
    pub fn count(&self) -> u32 {
        self.count
    }
}
