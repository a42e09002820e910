//! Stall detection (CONTRACT v3 §14), pure: a model that repeats the same recursion with
//! the same result makes no progress, and after `agents.stall.repeat` of them in a row the
//! agent's `agents.stall.action` happens instead of burning the rest of `max_iteration`.
//!
//! - [`StallSettings`]: `agents.stall`, `{"repeat": 3, "action": "nudge"}` by default,
//!   `{"repeat": 0}` off ([`StallSettings::from_json`] refuses unknown keys and actions).
//! - [`ProgressSignature`]: what makes two recursions the same (see `signature.rs`: action
//!   type, tool calls with canonical arguments and their results, the RE_PLAN plan, the
//!   REFLECT summary, the error_log), hashed.
//! - [`StallTracker`]: counts identical recursions in a row; part of the checkpoint.
//!
//! # How the machine uses it (not wired yet)
//!
//! 1. `Machine` holds a `#[serde(default)] stall: StallTracker` (old checkpoints load with
//!    an empty one) and the task's [`StallSettings`] (in `TaskInfo`, from `agents.stall`).
//! 2. Where a recursion closes without ending the task (`steps.rs`, `close`), compute
//!    [`ProgressSignature::of`] from the `Closed` value (`action_type` and `output` of its
//!    `action`, `tool_call_results`, `error_log`) and call [`StallTracker::observe`]. For
//!    any verdict but `Continue`, queue `task.stalled {"count", "action"}`
//!    ([`StallVerdict::event`]; the driver counts `agentd_task_stalls_total{action}`), then:
//!    - `Warn`: nothing else; the snapshot shows the warning (below);
//!    - `ForceAnswer`: the next recursion starts as usual, told to ANSWER;
//!    - `Pause`: after the recursion, `Next::Wait(WaitReason::Stalled)` (wire `stalled`, a
//!      new `WaitReason`); a `resume` runs it again with `repeat` fresh recursions;
//!    - `Fail`: the task fails with a new `FailReason::NoProgress` (`no_progress`), its
//!      partial being the latest REFLECT summary as for any failure.
//! 3. In `on_llm_reply`, when [`StallTracker::must_answer`] and the parsed reply is not
//!    ANSWER, fail `no_progress` without running its tools, as the budget's `answer`
//!    breach does (`breach.rs`); an unusable reply closes the recursion and `observe`
//!    answers `Fail`.
//! 4. The snapshot (`state.rs`, `Context`) gets `#[serde(skip_serializing_if =
//!    "Option::is_none")] stall_warning: Option<Cow<str>>` = [`StallTracker::warning`],
//!    rendered after `user_guidance`: the nudge's text while the model keeps repeating (it
//!    disappears as soon as a recursion differs), [`STALL_ANSWER_NOW`] for the last one.
//!
//! A recursion ended by the driver (a per-recursion timeout, a tool batch timeout) is fed
//! like any other: the same timeout again and again is no progress either.

mod settings;
mod signature;
mod tracker;

#[cfg(test)]
mod tests;

pub use settings::{
    DEFAULT_STALL_REPEAT, MAX_STALL_REPEAT, StallAction, StallSettings, StallSettingsError,
};
pub use signature::{ProgressSignature, RecursionFacts};
pub use tracker::{STALL_ANSWER_NOW, StallTracker, StallVerdict};
