//! A budget a gateway request brings (a new task's, a resume's, a fork's copy), refused at
//! once where the worker would refuse it later (CONTRACT §8): a cost limit for a model
//! without a price. Without this the request was accepted (202) and the task rejected
//! after, where the client was no longer looking.

use crate::config::Settings;
use crate::core::budget::{Budget, BudgetError};
use crate::gateway::errors::ApiError;
use crate::store::agents::Agent;

/// Refuses (400 `no_price`) `budget` when it limits cost and `agent`'s model has no price;
/// `whose` names the budget in the message ("the request's", "the agent's").
pub(super) fn check_price(
    settings: &Settings,
    budget: &Budget,
    agent: &Agent,
    whose: &str,
) -> Result<(), ApiError> {
    match budget.validate(settings.prices.get(&agent.model), &agent.model) {
        Ok(()) => Ok(()),
        Err(err @ BudgetError::NoPrice(_)) => Err(no_price(&format!("{whose} {err}"))),
        Err(err) => Err(ApiError::invalid_body(format!("{whose} {err}"))),
    }
}

/// 400 `no_price`: a cost limit that no price lets agentd count.
pub(super) fn no_price(problem: &str) -> ApiError {
    ApiError::bad_request(
        "no_price",
        format!("{problem}; without a price the cost cannot be counted, so the limit is refused"),
    )
}

/// The budget a new task of `agent` runs under: the request's, else the agent's own
/// (`agents.budget`), checked as above. An agent budget the worker cannot read is the
/// worker's to report.
pub(super) fn check_task_budget(
    settings: &Settings,
    requested: Option<&Budget>,
    agent: &Agent,
) -> Result<(), ApiError> {
    if let Some(budget) = requested {
        return check_price(settings, budget, agent, "the request's");
    }
    let stored = agent.budget.as_ref().map(|json| json.0.clone());
    match crate::contract::intake::parse_budget(stored) {
        Ok(Some(budget)) => check_price(settings, &budget, agent, "the agent's"),
        _ => Ok(()),
    }
}
