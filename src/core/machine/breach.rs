//! The budget check before each LLM call (CONTRACT §8): warnings at 80 %, and on a breach
//! the agent's `on_breach` — one last recursion told to ANSWER, a failure, or a wait for a
//! larger budget.

use chrono::{DateTime, Utc};

use super::Machine;
use crate::core::budget::{BreachAction, BudgetLimit};
use crate::core::outcome::{DomainEvent, FailReason, Next, WaitReason};

/// What the last recursion after an `answer` breach is told (in `global.budget`).
pub const ANSWER_NOW: &str = "The task's budget is used up: reply with action ANSWER now, \
giving the best answer you can from what you already know. No tool calls or further \
recursions will run.";

impl Machine {
    /// Reads the budget before recursion `iteration + 1`; `Some(next)` when it may not start
    /// normally: the task fails, or waits. An `answer` breach lets one recursion start,
    /// marked in `global.budget`; when that recursion did not ANSWER the task fails here.
    pub(super) fn check_budget(&mut self, now: DateTime<Utc>) -> Option<Next> {
        let action = self.budget.budget.as_ref()?.on_breach;
        if let Some(limit) = self.budget.final_recursion {
            let error = format!(
                "the budget's {limit} limit was reached and the last recursion did not ANSWER"
            );
            return Some(self.fail(FailReason::Budget, error, now));
        }
        let verdict = self.budget.check(now);
        let iteration = self.iteration + 1;
        for reading in verdict.warnings {
            self.events
                .push(DomainEvent::BudgetWarning { iteration, reading });
        }
        let reading = verdict.exceeded?;
        if self.budget.announce_breach(reading.limit) {
            self.events.push(DomainEvent::BudgetExceeded {
                iteration,
                reading,
                action,
            });
        }
        match action {
            BreachAction::Answer => {
                self.budget.final_recursion = Some(reading.limit);
                None
            }
            BreachAction::Fail => {
                let error = breach_text(reading.limit, reading.used, reading.max);
                Some(self.fail(FailReason::Budget, error, now))
            }
            BreachAction::Pause => Some(self.wait(WaitReason::Budget, now)),
        }
    }

    /// The task stops between recursions and waits for someone (`task.waiting`): the
    /// budget's wall clock stops until it runs again.
    pub fn wait(&mut self, reason: WaitReason, now: DateTime<Utc>) -> Next {
        if let Some(outcome) = &self.outcome {
            return Next::Finished(outcome.clone());
        }
        self.budget.stop_clock(now);
        Next::Wait(reason)
    }

    /// A `resume` with a budget: it replaces the task's budget.
    pub fn replace_budget(&mut self, budget: crate::core::budget::Budget) {
        self.budget.replace(budget);
    }
}

fn breach_text(limit: BudgetLimit, used: f64, max: f64) -> String {
    format!("the budget's {limit} limit is reached ({used} of {max})")
}
