//! A task's budget against what it spent: readings per limit, the 80 % warnings and the
//! first breach before each LLM call (announced once each), the wall clock that excludes
//! waiting, the children's spending, and the view the state snapshot shows.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Budget, BudgetLimit, Spent, WARN_AT};

/// A limit measured: how much of it is used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub limit: BudgetLimit,
    pub used: f64,
    pub max: f64,
}

/// What the budget says before an LLM call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Limits past 80 % for the first time.
    pub warnings: Vec<Reading>,
    /// The first limit reached, if any.
    pub exceeded: Option<Reading>,
}

/// A task's budget, what it spent, and what was already announced: part of the machine's
/// checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetTrack {
    pub budget: Option<Budget>,
    pub spent: Spent,
    /// The limits a warning was published for.
    #[serde(default)]
    pub warned: Vec<BudgetLimit>,
    /// The limits a breach was published for.
    #[serde(default)]
    pub exceeded: Vec<BudgetLimit>,
    /// Set while the last recursion granted by an `answer` breach runs: the limit reached.
    #[serde(default)]
    pub final_recursion: Option<BudgetLimit>,
    /// Since when the wall clock counts (the first recursion, or the last resume).
    #[serde(default)]
    pub running_since: Option<DateTime<Utc>>,
    /// What the task's delegated children spent (CONTRACT §10): it counts toward this
    /// budget, but is the children's own in their rows.
    #[serde(default)]
    pub delegated: Delegated,
}

/// Tokens and cost spent by a task's children.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Delegated {
    pub tokens: u64,
    pub cost_usd: f64,
}

impl BudgetTrack {
    pub fn new(budget: Option<Budget>) -> Self {
        Self {
            budget: budget.filter(Budget::is_limited),
            ..Self::default()
        }
    }

    /// Adds one LLM attempt's usage; `cost` is `None` when its model has no price.
    pub fn add_llm(&mut self, prompt_tokens: u64, completion_tokens: u64, cost: Option<f64>) {
        self.spent.prompt_tokens = self.spent.prompt_tokens.saturating_add(prompt_tokens);
        self.spent.completion_tokens = self
            .spent
            .completion_tokens
            .saturating_add(completion_tokens);
        self.spent.cost_usd = match (self.spent.cost_usd, cost) {
            (Some(sum), Some(cost)) => Some(sum + cost),
            _ => None,
        };
    }

    /// Adds tool calls that ran.
    pub fn add_tool_calls(&mut self, count: u64) {
        self.spent.tool_calls = self.spent.tool_calls.saturating_add(count);
    }

    /// How many more tool calls may run; `None` without a tool-call limit.
    pub fn tool_calls_left(&self) -> Option<u64> {
        let max = self.budget.as_ref()?.max_tool_calls?;
        Some(max.saturating_sub(self.spent.tool_calls))
    }

    /// Starts the wall clock if it is not running.
    pub fn run_from(&mut self, now: DateTime<Utc>) {
        self.running_since.get_or_insert(now);
    }

    /// Stops the wall clock (the task starts waiting), keeping the time run so far.
    pub fn stop_clock(&mut self, now: DateTime<Utc>) {
        if let Some(since) = self.running_since.take() {
            let ran = (now - since).num_milliseconds().max(0) as u64;
            self.spent.wall_ms = self.spent.wall_ms.saturating_add(ran);
        }
    }

    /// Milliseconds run so far, the current stretch included.
    pub fn wall_ms(&self, now: DateTime<Utc>) -> u64 {
        let current = self
            .running_since
            .map(|since| (now - since).num_milliseconds().max(0) as u64)
            .unwrap_or(0);
        self.spent.wall_ms.saturating_add(current)
    }

    fn used(&self, limit: BudgetLimit, now: DateTime<Utc>) -> f64 {
        match limit {
            BudgetLimit::Tokens => self.spent.tokens().saturating_add(self.delegated.tokens) as f64,
            BudgetLimit::CostUsd => self.spent.cost_usd.unwrap_or(0.0) + self.delegated.cost_usd,
            BudgetLimit::ToolCalls => self.spent.tool_calls as f64,
            BudgetLimit::WallSecs => self.wall_ms(now) as f64 / 1000.0,
        }
    }

    /// Counts a child's spending toward this budget.
    pub fn add_delegated(&mut self, tokens: u64, cost_usd: f64) {
        self.delegated.tokens = self.delegated.tokens.saturating_add(tokens);
        self.delegated.cost_usd += cost_usd;
    }

    /// The budget a child gets: what is left of this one's token, cost and tool-call limits
    /// (at least one of each), the same wall time and breach action. `None` without a budget.
    pub fn left_for_child(&self, now: DateTime<Utc>) -> Option<Budget> {
        let budget = self.budget.as_ref()?;
        let left = |limit: BudgetLimit| budget.max(limit).map(|max| max - self.used(limit, now));
        Some(Budget {
            max_tokens: left(BudgetLimit::Tokens).map(|v| v.max(1.0) as u64),
            max_cost_usd: left(BudgetLimit::CostUsd).map(|v| v.max(1e-6)),
            max_tool_calls: left(BudgetLimit::ToolCalls).map(|v| v.max(1.0) as u64),
            max_wall_secs: budget.max_wall_secs,
            on_breach: budget.on_breach,
        })
    }

    /// Every limit set, measured now.
    pub fn readings(&self, now: DateTime<Utc>) -> Vec<Reading> {
        let Some(budget) = &self.budget else {
            return Vec::new();
        };
        BudgetLimit::ALL
            .iter()
            .filter_map(|&limit| {
                let max = budget.max(limit)?;
                Some(Reading {
                    limit,
                    used: self.used(limit, now),
                    max,
                })
            })
            .collect()
    }

    /// Reads the budget before an LLM call and remembers what it announces: a warning per
    /// limit past 80 % (once), the first limit reached (once per limit).
    pub fn check(&mut self, now: DateTime<Utc>) -> Verdict {
        let mut verdict = Verdict::default();
        for reading in self.readings(now) {
            if reading.used >= reading.max {
                if verdict.exceeded.is_none() {
                    verdict.exceeded = Some(reading);
                }
            } else if reading.used >= WARN_AT * reading.max && !self.warned.contains(&reading.limit)
            {
                self.warned.push(reading.limit);
                verdict.warnings.push(reading);
            }
        }
        verdict
    }

    /// Replaces the budget (a `resume` with a budget): limits breached before may be
    /// announced again against the new maxima.
    pub fn replace(&mut self, budget: Budget) {
        self.budget = Some(budget).filter(Budget::is_limited);
        self.warned.clear();
        self.exceeded.clear();
        self.final_recursion = None;
    }

    /// Records that a breach of `limit` was announced; false if it already was.
    pub fn announce_breach(&mut self, limit: BudgetLimit) -> bool {
        if self.exceeded.contains(&limit) {
            return false;
        }
        self.exceeded.push(limit);
        true
    }
}

/// `global.budget` of the state snapshot: what each limit allows and what is used; on the
/// last recursion an `answer` breach allows, which limit was reached and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetView {
    pub used: serde_json::Map<String, serde_json::Value>,
    pub max: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exceeded: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<BudgetLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instruction: Option<&'static str>,
}

/// A reading as a JSON number: whole counts for tokens and tool calls.
pub fn amount(limit: BudgetLimit, value: f64) -> serde_json::Value {
    match limit {
        BudgetLimit::Tokens | BudgetLimit::ToolCalls => serde_json::Value::from(value as u64),
        BudgetLimit::CostUsd => serde_json::Value::from((value * 1e6).round() / 1e6),
        BudgetLimit::WallSecs => serde_json::Value::from((value * 10.0).round() / 10.0),
    }
}

impl BudgetTrack {
    /// The snapshot's view, when a budget is set; `instruction` is shown on the last
    /// recursion an `answer` breach allows.
    pub fn view(&self, now: DateTime<Utc>, instruction: &'static str) -> Option<BudgetView> {
        self.budget.as_ref()?;
        let mut view = BudgetView {
            used: serde_json::Map::new(),
            max: serde_json::Map::new(),
            exceeded: None,
            limit: None,
            instruction: None,
        };
        for reading in self.readings(now) {
            let name = reading.limit.as_str().to_owned();
            view.used
                .insert(name.clone(), amount(reading.limit, reading.used));
            view.max.insert(name, amount(reading.limit, reading.max));
        }
        if let Some(limit) = self.final_recursion {
            view.exceeded = Some(true);
            view.limit = Some(limit);
            view.instruction = Some(instruction);
        }
        Some(view)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn warns_once_at_eighty_percent_and_reports_the_first_limit_reached() {
        let mut track = BudgetTrack::new(Some(Budget {
            max_tokens: Some(100),
            max_tool_calls: Some(2),
            ..Budget::default()
        }));
        track.add_llm(50, 20, None);
        assert_eq!(track.check(at(0)), Verdict::default());
        track.add_llm(5, 5, None);
        let verdict = track.check(at(0));
        assert_eq!(verdict.warnings.len(), 1);
        assert_eq!(verdict.warnings[0].limit, BudgetLimit::Tokens);
        assert_eq!(verdict.warnings[0].used, 80.0);
        assert!(verdict.exceeded.is_none());
        assert!(track.check(at(0)).warnings.is_empty(), "warned once");
        track.add_tool_calls(2);
        let verdict = track.check(at(0));
        let exceeded = verdict.exceeded.unwrap();
        assert_eq!(exceeded.limit, BudgetLimit::ToolCalls);
        assert_eq!((exceeded.used, exceeded.max), (2.0, 2.0));
        assert_eq!(track.tool_calls_left(), Some(0));
    }

    #[test]
    fn cost_becomes_unknown_once_a_price_is_missing() {
        let mut track = BudgetTrack::new(None);
        track.add_llm(1000, 0, Some(0.25));
        track.add_llm(1000, 0, Some(0.25));
        assert_eq!(track.spent.cost_usd, Some(0.5));
        track.add_llm(1000, 0, None);
        assert_eq!(track.spent.cost_usd, None);
        assert_eq!(track.spent.tokens(), 3000);
    }

    #[test]
    fn the_wall_clock_excludes_time_spent_waiting() {
        let mut track = BudgetTrack::new(Some(Budget {
            max_wall_secs: Some(10),
            ..Budget::default()
        }));
        track.run_from(at(0));
        track.stop_clock(at(4));
        assert_eq!(track.wall_ms(at(100)), 4000, "the clock is stopped");
        track.run_from(at(100));
        assert_eq!(track.wall_ms(at(103)), 7000);
        assert!(track.check(at(105)).exceeded.is_none());
        let exceeded = track.check(at(106)).exceeded.unwrap();
        assert_eq!(exceeded.limit, BudgetLimit::WallSecs);
    }

    #[test]
    fn a_replaced_budget_starts_its_announcements_again() {
        let mut track = BudgetTrack::new(Some(Budget {
            max_tokens: Some(10),
            ..Budget::default()
        }));
        track.add_llm(10, 0, None);
        assert!(track.check(at(0)).exceeded.is_some());
        assert!(track.announce_breach(BudgetLimit::Tokens));
        assert!(!track.announce_breach(BudgetLimit::Tokens));
        track.replace(Budget {
            max_tokens: Some(100),
            ..Budget::default()
        });
        assert!(track.check(at(0)).exceeded.is_none());
        assert!(track.announce_breach(BudgetLimit::Tokens));
    }

    #[test]
    fn an_empty_budget_limits_nothing() {
        let track = BudgetTrack::new(Some(Budget::default()));
        assert!(track.budget.is_none());
        assert_eq!(track.tool_calls_left(), None);
    }
}
