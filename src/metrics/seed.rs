//! The series that exist at 0 from the first scrape, so that `rate()` and `increase()` over
//! a dashboard or an alert see the first event (a counter born at 1 has no increase): every
//! series without labels, and each labelled one for the label values known in advance.
//! Label values only known as they happen (an LLM error class other than `200`) appear
//! with their first event, as before.

use metrics::{counter, gauge, histogram};

use super::names::*;
use super::{KNOWN_LLM, KNOWN_TOOLS};
use crate::contract::events::EventType;
use crate::core::budget::{BreachAction, BudgetLimit};
use crate::core::stall::StallAction;

/// The series whose label values are fixed: called once the recorder is installed.
pub(super) fn fixed() {
    for name in [
        TASKS_STARTED,
        TASKS_RESUMED,
        LLM_RETRIES,
        COMPACTIONS,
        COMPACTION_TOKENS_SAVED,
        DEAD_LETTERS,
        PRUNED_TASKS,
    ] {
        counter!(name).increment(0);
    }
    gauge!(TASKS_IN_FLIGHT).increment(0.0);
    for name in [
        TASK_ITERATIONS,
        RECURSION_DURATION,
        COMPACTION_RATIO,
        PRUNE_DURATION,
    ] {
        let _ = histogram!(name);
    }
    for result in ["ok", "error"] {
        let _ = histogram!(LLM_DURATION, "result" => result);
        let _ = histogram!(PUBLISH_DURATION, "result" => result);
    }
    tasks_ended();
    let actions = ACTION_TYPES.iter().copied().chain(["other", "none"]);
    for action in actions {
        for status in ["done", "error"] {
            counter!(RECURSIONS, "action_type" => action, "status" => status).increment(0);
        }
    }
    counter!(LLM_ATTEMPTS, "status" => "200").increment(0);
    for kind in ["prompt", "completion"] {
        counter!(LLM_TOKENS, "kind" => kind).increment(0);
    }
    for event_type in EventType::ALL {
        counter!(EVENTS, "type" => event_type.as_str()).increment(0);
    }
    for limit in BudgetLimit::ALL {
        for action in [
            BreachAction::Answer,
            BreachAction::Fail,
            BreachAction::Pause,
        ] {
            let (limit, action) = (limit.as_str(), action.as_str());
            counter!(BUDGET_BREACHES, "limit" => limit, "action" => action).increment(0);
        }
    }
    for reason in crate::core::signing::Rejection::ALL {
        counter!(CONTROL_REJECTED, "reason" => reason.as_str()).increment(0);
    }
    for action in [
        StallAction::Nudge,
        StallAction::Answer,
        StallAction::Pause,
        StallAction::Fail,
    ] {
        counter!(TASK_STALLS, "action" => action.as_str()).increment(0);
    }
    for decision in crate::core::schedule::Decision::ALL {
        counter!(SCHEDULE_FIRES, "decision" => decision.as_str()).increment(0);
    }
    gauge!(SCHEDULER_HOLDER).set(0.0);
    tools();
    llm();
}

/// `agentd_tasks_ended_total` for every status and reason a task can end with.
fn tasks_ended() {
    let mut ended = vec![
        ("completed", "none"),
        ("cancelled", "none"),
        ("rejected", "rejected"),
    ];
    let failed = FAIL_REASONS.iter().copied().filter(|r| *r != "rejected");
    ended.extend(failed.chain(["other"]).map(|reason| ("failed", reason)));
    for (status, reason) in ended {
        counter!(TASKS_ENDED, "status" => status, "reason" => reason).increment(0);
    }
}

/// The tool series of every tool the worker offers, and of `unknown` (a name the model made
/// up).
pub(super) fn tools() {
    let mut names: Vec<String> = KNOWN_TOOLS
        .read()
        .map(|known| known.iter().flatten().cloned().collect())
        .unwrap_or_default();
    names.push("unknown".to_owned());
    for name in names {
        for success in ["true", "false"] {
            counter!(TOOL_CALLS, "tool" => name.clone(), "success" => success).increment(0);
        }
        let _ = histogram!(TOOL_CALL_DURATION, "tool" => name);
    }
}

/// The cost series of every priced model and the throttling series of every bucket.
pub(super) fn llm() {
    let (models, buckets) = KNOWN_LLM
        .read()
        .map(|known| known.clone())
        .unwrap_or_default();
    for model in models {
        counter!(LLM_COST, "model" => model).increment(0);
    }
    for bucket in buckets {
        counter!(LLM_THROTTLED, "bucket" => bucket).increment(0);
    }
}
