//! Budgets and cost of CONTRACT §8: what a task may spend (tokens, USD, tool calls, wall
//! seconds), what it has spent, and what a reading of the two means before the next LLM
//! call (a warning at 80 %, a breach at 100 %). Prices turn token usage into USD. Pure:
//! the machine keeps a [`BudgetTrack`] in its checkpoint; the driver feeds it usage. This
//! module holds the wire types (the budget, its limits and breach actions, prices, what was
//! spent); [`track`] reads them against each other.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod track;

pub use track::{BudgetTrack, BudgetView, Delegated, Reading, Verdict, amount};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
