//! Evaluation runs (CONTRACT v3 §13), the pure part: the rerun's deterministic task id, the
//! modes, how a rerun is compared with its source, and what `agentd eval report
//! --min-pass` exits with. No I/O: `store::evals` reads the rows, `lifecycle::evals`
//! publishes the reruns and fills the items.
//!
//! A rerun is compared with its source on what both tasks left in the trace:
//!
//! - `answer_equal`: both have an answer and they are equal after trimming whitespace.
//! - `actions_equal`: the same recursions in the same order, each with the same action type
//!   and the same tool calls (name and arguments, in order; the model's call ids differ
//!   between runs and are not compared).
//! - `first_divergence_iteration`: the first recursion whose action differs, or that only
//!   one of the two has; when every action is equal but the answers differ, the last
//!   recursion (where the answer was given); `None` when nothing differs.
//! - deltas: rerun minus source, of recursions, tokens (prompt + completion) and cost (none
//!   when either cost is unknown).
//! - `passed`: the rerun completed and `answer_equal`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The statuses of an ended task an evaluation may select (a `rejected` task never ran).
pub const SELECTABLE: [&str; 3] = ["completed", "failed", "cancelled"];

/// The statuses of an item whose rerun has ended: the rerun's own.
pub const FINAL: [&str; 4] = ["completed", "failed", "cancelled", "rejected"];

/// The longest `--where` condition accepted, in characters.
pub const MAX_WHERE_CHARS: usize = 10_000;

/// The rerun of `source` in `run`: UUIDv5 with the run's id as namespace, so that a run
/// published twice names the same task, which a worker runs once.
pub fn rerun_task_id(run: Uuid, source: Uuid) -> Uuid {
    Uuid::new_v5(&run, source.as_bytes())
}

/// Where a rerun's model replies and tool results come from (the task message's
/// `rerun.llm` and `rerun.tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// From the source's record.
    Recorded,
    /// From the provider or the tool itself.
    Live,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Recorded => "recorded",
            Mode::Live => "live",
        }
    }

    /// Reads `recorded` or `live`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "recorded" => Ok(Mode::Recorded),
            "live" => Ok(Mode::Live),
            other => Err(format!(
                "{} is not a mode: use recorded or live",
                crate::core::bounded::quote(other)
            )),
        }
    }
}

/// What one recursion did: its action type and its tool calls `(name, arguments)` in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub iteration: i32,
    pub action_type: Option<String>,
    pub calls: Vec<(String, Value)>,
}

impl Action {
    fn same_as(&self, other: &Action) -> bool {
        self.action_type == other.action_type && self.calls == other.calls
    }
}

/// What a task left in the trace that a comparison reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskFacts {
    pub status: String,
    pub answer: Option<String>,
    pub iterations: i32,
    /// Prompt plus completion tokens over every LLM attempt.
    pub tokens: i64,
    pub cost_usd: Option<f64>,
    /// Its recursions in order.
    pub actions: Vec<Action>,
}

/// An item's comparison columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub answer_equal: bool,
    pub actions_equal: bool,
    pub first_divergence_iteration: Option<i32>,
    pub iterations_delta: i32,
    pub tokens_delta: i64,
    pub cost_delta_usd: Option<f64>,
    pub passed: bool,
}

/// Compares an ended rerun with its source (see the module doc).
pub fn compare(source: &TaskFacts, rerun: &TaskFacts) -> Verdict {
    let answer_equal = match (&source.answer, &rerun.answer) {
        (Some(a), Some(b)) => a.trim() == b.trim(),
        _ => false,
    };
    let differs_at = source
        .actions
        .iter()
        .zip(&rerun.actions)
        .find(|(a, b)| !a.same_as(b))
        .map(|(a, _)| a.iteration);
    let shorter = source.actions.len().min(rerun.actions.len());
    let extra = (source.actions.len() != rerun.actions.len()).then(|| {
        let longer = if source.actions.len() > shorter {
            &source.actions
        } else {
            &rerun.actions
        };
        longer[shorter].iteration
    });
    let actions_equal = differs_at.is_none() && extra.is_none();
    let last = source.actions.last().map(|a| a.iteration);
    let first_divergence_iteration = differs_at
        .or(extra)
        .or_else(|| (!answer_equal).then_some(last).flatten());
    let cost_delta_usd = match (source.cost_usd, rerun.cost_usd) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    Verdict {
        answer_equal,
        actions_equal,
        first_divergence_iteration,
        iterations_delta: rerun.iterations - source.iterations,
        tokens_delta: rerun.tokens - source.tokens,
        cost_delta_usd,
        passed: rerun.status == "completed" && answer_equal,
    }
}

/// A run's status (`eval_runs.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    Completed,
    Cancelled,
}

impl RunStatus {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(RunStatus::Running),
            "completed" => Some(RunStatus::Completed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }
}

/// How many items a run has, how many are final and how many passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub items: u64,
    pub finished: u64,
    pub passed: u64,
}

impl Tally {
    /// Passed items over all items (0 for a run without items).
    pub fn pass_ratio(&self) -> f64 {
        if self.items == 0 {
            0.0
        } else {
            self.passed as f64 / self.items as f64
        }
    }
}

/// `agentd eval report`'s exit code: 2 while the run is still running; 1 when `min_pass`
/// is given and the run was cancelled (a gate never passes a run that did not finish) or
/// is over with a pass ratio below it; else 0.
pub fn report_exit(status: RunStatus, tally: Tally, min_pass: Option<f64>) -> u8 {
    match (status, min_pass) {
        (RunStatus::Running, _) => 2,
        (RunStatus::Cancelled, Some(_)) => 1,
        (_, Some(min)) if tally.pass_ratio() < min => 1,
        _ => 0,
    }
}

/// Reads `--min-pass`: a ratio from 0 to 1.
pub fn parse_min_pass(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!(
            "{} is not a ratio from 0 to 1 (such as 0.95)",
            crate::core::bounded::quote(text)
        )),
    }
}

/// Checks an operator's `--where` condition before it goes to PostgreSQL: not blank, no
/// NUL (PostgreSQL refuses it in a query), at most [`MAX_WHERE_CHARS`].
pub fn check_where(condition: &str) -> Result<(), String> {
    if condition.trim().is_empty() {
        return Err("the condition is empty (use --where true to select every task)".into());
    }
    if condition.contains('\0') {
        return Err("the condition holds a NUL character".into());
    }
    let chars = condition.chars().count();
    if chars > MAX_WHERE_CHARS {
        return Err(format!(
            "the condition is {chars} characters long; at most {MAX_WHERE_CHARS}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(iteration: i32, kind: &str, calls: &[(&str, Value)]) -> Action {
        Action {
            iteration,
            action_type: Some(kind.to_owned()),
            calls: calls
                .iter()
                .map(|(name, args)| ((*name).to_owned(), args.clone()))
                .collect(),
        }
    }

    fn task(status: &str, answer: Option<&str>, actions: Vec<Action>) -> TaskFacts {
        TaskFacts {
            status: status.into(),
            answer: answer.map(str::to_owned),
            iterations: actions.len() as i32,
            tokens: 100 * actions.len() as i64,
            cost_usd: Some(0.01 * actions.len() as f64),
            actions,
        }
    }

    fn two_steps(answer_kind: &str) -> Vec<Action> {
        vec![
            action(
                1,
                "call_tool",
                &[("calculate", json!({"expression": "6*7"}))],
            ),
            action(2, answer_kind, &[]),
        ]
    }

    #[test]
    fn rerun_ids_are_deterministic_per_run_and_source() {
        let (run, other_run) = (Uuid::now_v7(), Uuid::now_v7());
        let source = Uuid::now_v7();
        assert_eq!(rerun_task_id(run, source), rerun_task_id(run, source));
        assert_ne!(rerun_task_id(run, source), rerun_task_id(other_run, source));
        assert_ne!(
            rerun_task_id(run, source),
            rerun_task_id(run, Uuid::now_v7())
        );
        assert_eq!(rerun_task_id(run, source).get_version_num(), 5);
    }

    #[test]
    fn an_equal_rerun_passes_with_answers_equal_after_trimming() {
        let source = task("completed", Some("42"), two_steps("answer"));
        let rerun = task("completed", Some("  42\n"), two_steps("answer"));
        let verdict = compare(&source, &rerun);
        assert_eq!(
            verdict,
            Verdict {
                answer_equal: true,
                actions_equal: true,
                first_divergence_iteration: None,
                iterations_delta: 0,
                tokens_delta: 0,
                cost_delta_usd: Some(0.0),
                passed: true,
            }
        );
    }

    #[test]
    fn a_changed_answer_fails_and_diverges_at_the_last_recursion() {
        let source = task("completed", Some("42"), two_steps("answer"));
        let rerun = task("completed", Some("41"), two_steps("answer"));
        let verdict = compare(&source, &rerun);
        assert!(!verdict.answer_equal && !verdict.passed);
        assert!(verdict.actions_equal);
        assert_eq!(verdict.first_divergence_iteration, Some(2));
    }

    #[test]
    fn different_tool_arguments_diverge_at_their_recursion() {
        let source = task("completed", Some("42"), two_steps("answer"));
        let mut changed = two_steps("answer");
        changed[0].calls[0].1 = json!({"expression": "7*6"});
        let rerun = task("completed", Some("42"), changed);
        let verdict = compare(&source, &rerun);
        assert!(!verdict.actions_equal);
        assert!(verdict.answer_equal && verdict.passed, "the answer decides");
        assert_eq!(verdict.first_divergence_iteration, Some(1));
    }

    #[test]
    fn a_longer_or_shorter_rerun_diverges_where_one_ends() {
        let source = task("completed", Some("42"), two_steps("answer"));
        let mut longer = two_steps("re_plan");
        longer.push(action(3, "answer", &[]));
        let rerun = task("completed", Some("42"), longer);
        let verdict = compare(&source, &rerun);
        assert_eq!(verdict.first_divergence_iteration, Some(2));
        assert_eq!(verdict.iterations_delta, 1);
        assert_eq!(verdict.tokens_delta, 100);
        assert!((verdict.cost_delta_usd.unwrap() - 0.01).abs() < 1e-12);

        let cut = task("failed", None, two_steps("answer")[..1].to_vec());
        let verdict = compare(&source, &cut);
        assert_eq!(verdict.first_divergence_iteration, Some(2));
        assert!(!verdict.actions_equal && !verdict.answer_equal && !verdict.passed);
        assert_eq!(verdict.iterations_delta, -1);
    }

    #[test]
    fn a_rerun_that_did_not_complete_never_passes() {
        let source = task("completed", Some("42"), two_steps("answer"));
        let mut rerun = task("failed", Some("42"), two_steps("answer"));
        rerun.cost_usd = None;
        let verdict = compare(&source, &rerun);
        assert!(verdict.answer_equal && !verdict.passed);
        assert_eq!(verdict.cost_delta_usd, None, "unknown cost, unknown delta");
        let nothing = task("failed", None, Vec::new());
        let verdict = compare(&task("failed", None, Vec::new()), &nothing);
        assert!(!verdict.answer_equal, "no answer is never an equal answer");
        assert!(verdict.actions_equal);
        assert_eq!(verdict.first_divergence_iteration, None);
    }

    #[test]
    fn the_report_exits_2_while_running_and_1_below_the_ratio() {
        let tally = Tally {
            items: 4,
            finished: 4,
            passed: 3,
        };
        assert_eq!(report_exit(RunStatus::Running, tally, Some(0.5)), 2);
        assert_eq!(report_exit(RunStatus::Running, tally, None), 2);
        assert_eq!(report_exit(RunStatus::Completed, tally, Some(0.75)), 0);
        assert_eq!(report_exit(RunStatus::Completed, tally, Some(0.76)), 1);
        assert_eq!(report_exit(RunStatus::Cancelled, tally, Some(1.0)), 1);
        // A cancelled run fails any gate, even one its items would pass; unguarded it is 0.
        assert_eq!(report_exit(RunStatus::Cancelled, tally, Some(0.0)), 1);
        assert_eq!(report_exit(RunStatus::Cancelled, tally, None), 0);
        assert_eq!(report_exit(RunStatus::Completed, tally, None), 0);
        assert_eq!(
            report_exit(RunStatus::Completed, Tally::default(), Some(0.0)),
            0
        );
        assert_eq!(
            report_exit(RunStatus::Completed, Tally::default(), Some(0.1)),
            1
        );
    }

    #[test]
    fn min_pass_modes_and_conditions_are_checked() {
        assert_eq!(parse_min_pass("1.0"), Ok(1.0));
        assert_eq!(parse_min_pass(" 0.95 "), Ok(0.95));
        assert!(parse_min_pass("1.5").is_err());
        assert!(parse_min_pass("-0.1").is_err());
        assert!(parse_min_pass("NaN").is_err());
        assert!(parse_min_pass("most").is_err());
        assert_eq!(Mode::parse("live"), Ok(Mode::Live));
        assert_eq!(Mode::parse("recorded"), Ok(Mode::Recorded));
        assert!(Mode::parse("Live").is_err());
        assert!(check_where("status = 'completed'").is_ok());
        assert!(check_where("  ").is_err());
        assert!(check_where("a\0b").is_err());
        assert!(check_where(&"x".repeat(MAX_WHERE_CHARS + 1)).is_err());
    }
}
