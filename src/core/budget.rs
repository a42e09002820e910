//! Budgets and cost of CONTRACT §8: what a task may spend (tokens, USD, tool calls, wall
//! seconds), what it has spent, and what a reading of the two means before the next LLM
//! call (a warning at 80 %, a breach at 100 %). Prices turn token usage into USD. Pure:
//! the machine keeps a [`BudgetTrack`] in its checkpoint; the driver feeds it usage.

use std::fmt;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Share of a limit at which `budget.warning` is published (once per limit).
pub const WARN_AT: f64 = 0.8;

/// What a task may spend: from the task message's `budget`, else `agents.budget`. Unknown
/// keys are refused, so that a misspelt limit is not silently no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Prompt + completion tokens over every LLM attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// USD from the price table (`[prices."MODEL"]`); refused at intake without a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Tool calls run; a call beyond the limit is not run (the model gets an error result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// Seconds since `task.started`, time spent `waiting` excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_secs: Option<u64>,
    /// What a breach does; `answer` when absent.
    #[serde(default)]
    pub on_breach: BreachAction,
}

/// What happens when a limit is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreachAction {
    /// One last recursion told to ANSWER now; the task fails (reason `budget`) if it does not.
    #[default]
    Answer,
    /// The task fails at once (reason `budget`).
    Fail,
    /// The task waits (reason `budget`) until a `resume` brings a larger budget.
    Pause,
}

impl BreachAction {
    /// The wire name: `answer`, `fail` or `pause`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Answer => "answer",
            Self::Fail => "fail",
            Self::Pause => "pause",
        }
    }
}

/// One limit of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLimit {
    Tokens,
    CostUsd,
    ToolCalls,
    WallSecs,
}

impl BudgetLimit {
    pub const ALL: [Self; 4] = [Self::Tokens, Self::CostUsd, Self::ToolCalls, Self::WallSecs];

    /// The wire name: `tokens`, `cost_usd`, `tool_calls` or `wall_secs`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::CostUsd => "cost_usd",
            Self::ToolCalls => "tool_calls",
            Self::WallSecs => "wall_secs",
        }
    }
}

impl fmt::Display for BudgetLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a budget is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error("budget.{0} must be a positive number")]
    NotPositive(&'static str),
    #[error(
        "budget.max_cost_usd needs a price for model {0:?} ([prices.\"{0}\"] in the configuration)"
    )]
    NoPrice(String),
}

impl Budget {
    /// The limit's maximum, when set.
    pub fn max(&self, limit: BudgetLimit) -> Option<f64> {
        match limit {
            BudgetLimit::Tokens => self.max_tokens.map(|v| v as f64),
            BudgetLimit::CostUsd => self.max_cost_usd,
            BudgetLimit::ToolCalls => self.max_tool_calls.map(|v| v as f64),
            BudgetLimit::WallSecs => self.max_wall_secs.map(|v| v as f64),
        }
    }

    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        BudgetLimit::ALL.iter().any(|l| self.max(*l).is_some())
    }

    /// Refuses limits that are zero, negative or not finite, and a cost limit for a model
    /// without a price.
    pub fn validate(&self, price: Option<&Price>, model: &str) -> Result<(), BudgetError> {
        for limit in BudgetLimit::ALL {
            if let Some(max) = self.max(limit)
                && !(max.is_finite() && max > 0.0)
            {
                let name = match limit {
                    BudgetLimit::Tokens => "max_tokens",
                    BudgetLimit::CostUsd => "max_cost_usd",
                    BudgetLimit::ToolCalls => "max_tool_calls",
                    BudgetLimit::WallSecs => "max_wall_secs",
                };
                return Err(BudgetError::NotPositive(name));
            }
        }
        if self.max_cost_usd.is_some() && price.is_none() {
            return Err(BudgetError::NoPrice(model.to_owned()));
        }
        Ok(())
    }
}

/// USD per million tokens of one model (`[prices."MODEL"]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    /// The cost of one attempt's tokens.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input_per_mtok
            + completion_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// What a task has spent so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None` once an attempt's price was unknown.
    pub cost_usd: Option<f64>,
    pub tool_calls: u64,
    /// Running time before `running_since` (time spent waiting is not counted).
    pub wall_ms: u64,
}

impl Default for Spent {
    fn default() -> Self {
        Self {
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: Some(0.0),
            tool_calls: 0,
            wall_ms: 0,
        }
    }
}

impl Spent {
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

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
    fn a_budget_reads_its_wire_form_and_refuses_unknown_keys() {
        let budget: Budget =
            serde_json::from_str(r#"{"max_tokens": 100, "on_breach": "fail"}"#).unwrap();
        assert_eq!(budget.max_tokens, Some(100));
        assert_eq!(budget.on_breach, BreachAction::Fail);
        let default: Budget = serde_json::from_str(r#"{"max_wall_secs": 5}"#).unwrap();
        assert_eq!(default.on_breach, BreachAction::Answer);
        assert!(serde_json::from_str::<Budget>(r#"{"max_token": 100}"#).is_err());
        assert!(serde_json::from_str::<Budget>(r#"{"on_breach": "explode"}"#).is_err());
    }

    #[test]
    fn validation_refuses_non_positive_limits_and_cost_without_price() {
        let price = Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
        };
        let zero = Budget {
            max_tokens: Some(0),
            ..Budget::default()
        };
        assert_eq!(
            zero.validate(Some(&price), "m"),
            Err(BudgetError::NotPositive("max_tokens"))
        );
        let cost = Budget {
            max_cost_usd: Some(0.5),
            ..Budget::default()
        };
        assert_eq!(
            cost.validate(None, "gpt-x"),
            Err(BudgetError::NoPrice("gpt-x".into()))
        );
        assert_eq!(cost.validate(Some(&price), "gpt-x"), Ok(()));
        let negative = Budget {
            max_cost_usd: Some(-1.0),
            ..Budget::default()
        };
        assert!(negative.validate(Some(&price), "m").is_err());
    }

    #[test]
    fn prices_are_per_million_tokens() {
        let price = Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
        };
        assert!((price.cost(1_000_000, 0) - 3.0).abs() < 1e-12);
        assert!((price.cost(2_000, 1_000) - 0.021).abs() < 1e-12);
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
