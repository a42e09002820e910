//! The exactly-once ledger's decision for each call of a reply (CONTRACT §7), as pure
//! functions of the reply, the ledger rows a resumed task finds, the approval decisions and
//! the budget: a committed outcome is used as is, a read-only or idempotent call runs (again)
//! under its key, a side-effecting call that started without a committed outcome is not run
//! again (`unknown`, with an error result that says so), and calls past `max_tool_calls`
//! are not run. [`super::tool_calls`] carries the plan out.

use std::collections::HashMap;

use serde_json::Value;
use uuid::Uuid;

use crate::core::types::{ToolCallRequest, ToolCallResult, ToolEffect};
use crate::store::ledger::LedgerRow;
use crate::store::step::StartedCall;

/// The error result of a side-effecting call cut short by a crash.
fn unknown_outcome(name: &str) -> String {
    format!(
        "the call of '{name}' may or may not have taken effect: the worker running it stopped \
         before its outcome was recorded, and it was not run again because it has side effects; \
         check its effect before calling it again"
    )
}

/// The error result of a call past the budget's tool-call limit.
fn over_budget(name: &str, left: Option<u64>) -> String {
    let left = left.unwrap_or(0);
    format!(
        "the call of '{name}' was not run: the task's budget (max_tool_calls) allowed {left} \
         more tool call(s) in this reply"
    )
}

/// A call that did not run, with the error the model sees.
fn failed_result(call: &ToolCallRequest, error: String) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: parsed(call),
        success: false,
        result: None,
        error: Some(error),
        memo: None,
        duration_ms: 0,
    }
}

/// What to do about one call of the reply.
#[derive(Debug)]
pub(super) enum Plan {
    /// Run it; `announce`: its `tool.started` is not stored yet.
    Run {
        effect: ToolEffect,
        key: Option<String>,
        announce: bool,
    },
    /// Its outcome is known already (committed, or `unknown`).
    Known {
        result: ToolCallResult,
        state: &'static str,
        effect: ToolEffect,
        key: Option<String>,
    },
}

/// Decides, per call, whether it runs and under which key (see the module doc).
pub(super) fn plan_calls(
    effect_of: impl Fn(&str) -> ToolEffect,
    task_id: Uuid,
    calls: &[ToolCallRequest],
    ledger: &[LedgerRow],
    decided: &HashMap<String, (ToolCallResult, &'static str)>,
    left: Option<u64>,
) -> Vec<Plan> {
    let rows: HashMap<&str, &LedgerRow> = ledger
        .iter()
        .map(|row| (row.tool_call_id.as_str(), row))
        .collect();
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let effect = effect_of(&call.name);
            let key = (effect != ToolEffect::ReadOnly).then(|| format!("{task_id}:{}", call.id));
            if left.is_some_and(|left| index as u64 >= left) {
                // Past the budget's max_tool_calls: not run (CONTRACT §8).
                return Plan::Known {
                    result: failed_result(call, over_budget(&call.name, left)),
                    state: "failed",
                    effect,
                    key,
                };
            }
            match rows.get(call.id.as_str()) {
                Some(row) if row.has_outcome() => Plan::Known {
                    result: stored_result(call, row),
                    state: if row.success == Some(true) {
                        "succeeded"
                    } else {
                        "failed"
                    },
                    effect,
                    key,
                },
                // Decided not to run (rejected, expired, answered by a person).
                _ if decided.contains_key(&call.id) => {
                    let (result, state) = decided[&call.id].clone();
                    Plan::Known {
                        result,
                        state,
                        effect,
                        key,
                    }
                }
                Some(_) if !effect.is_retryable() => Plan::Known {
                    result: failed_result(call, unknown_outcome(&call.name)),
                    state: "unknown",
                    effect,
                    key,
                },
                started => Plan::Run {
                    effect,
                    key,
                    announce: started.is_none(),
                },
            }
        })
        .collect()
}

/// The calls to record `started` (every call of the reply not recorded yet).
pub(super) fn started_rows(
    trace_id: Uuid,
    calls: &[ToolCallRequest],
    plans: &[Plan],
) -> Vec<StartedCall> {
    calls
        .iter()
        .zip(plans)
        .filter_map(|(call, plan)| match plan {
            Plan::Run {
                effect,
                key,
                announce: true,
            } => Some(StartedCall {
                trace_id,
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: parsed(call).to_string(),
                effect: effect.as_str(),
                idempotency_key: key.clone(),
                state: "started",
                approval_expires_at: None,
            }),
            _ => None,
        })
        .collect()
}

/// A committed outcome as the result the machine is fed.
fn stored_result(call: &ToolCallRequest, row: &LedgerRow) -> ToolCallResult {
    let success = row.success == Some(true);
    ToolCallResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: parsed(call),
        success,
        result: if success { row.result.clone() } else { None },
        error: row.error.clone(),
        memo: None,
        duration_ms: row
            .duration_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(0),
    }
}

/// The call's arguments as JSON, or as the raw string when they are not JSON.
pub(super) fn parsed(call: &ToolCallRequest) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: name.into(),
            arguments: r#"{"x":1}"#.into(),
        }
    }

    fn effect_of(name: &str) -> ToolEffect {
        match name {
            "charge" => ToolEffect::SideEffect,
            "upsert" => ToolEffect::Idempotent,
            _ => ToolEffect::ReadOnly,
        }
    }

    /// A ledger row as a resumed task reads it: `started` only, or with its outcome.
    fn row(id: &str, outcome: Option<Value>) -> LedgerRow {
        LedgerRow {
            tool_call_id: id.into(),
            state: Some(
                if outcome.is_some() {
                    "succeeded"
                } else {
                    "started"
                }
                .into(),
            ),
            success: outcome.as_ref().map(|_| true),
            duration_ms: outcome.as_ref().map(|_| 7),
            result: outcome,
            error: None,
        }
    }

    fn started(id: &str) -> LedgerRow {
        row(id, None)
    }

    fn finished(id: &str, result: Value) -> LedgerRow {
        row(id, Some(result))
    }

    fn plan(calls: &[ToolCallRequest], ledger: &[LedgerRow], left: Option<u64>) -> Vec<Plan> {
        plan_calls(effect_of, Uuid::nil(), calls, ledger, &HashMap::new(), left)
    }

    #[test]
    fn a_fresh_reply_runs_every_call_and_keys_only_calls_with_effects() {
        let calls = [
            call("a", "lookup"),
            call("b", "charge"),
            call("c", "upsert"),
        ];
        let plans = plan(&calls, &[], None);
        let keys: Vec<Option<String>> = plans
            .iter()
            .map(|plan| match plan {
                Plan::Run {
                    key,
                    announce: true,
                    ..
                } => key.clone(),
                other => panic!("expected a run to announce, got {other:?}"),
            })
            .collect();
        let nil = Uuid::nil();
        assert_eq!(
            keys,
            [None, Some(format!("{nil}:b")), Some(format!("{nil}:c"))]
        );
        let rows = started_rows(Uuid::nil(), &calls, &plans);
        assert_eq!(
            rows.len(),
            3,
            "every call is recorded started before it runs"
        );
        assert_eq!(rows[1].effect, "side_effect");
        assert_eq!(rows[1].state, "started");
    }

    #[test]
    fn a_committed_outcome_is_used_and_never_run_again() {
        let calls = [call("b", "charge")];
        let plans = plan(
            &calls,
            &[finished("b", serde_json::json!({"ok": true}))],
            None,
        );
        match &plans[0] {
            Plan::Known { result, state, .. } => {
                assert_eq!(*state, "succeeded");
                assert!(result.success);
                assert_eq!(result.result, Some(serde_json::json!({"ok": true})));
                assert_eq!(result.duration_ms, 7);
            }
            other => panic!("a committed outcome must not run again: {other:?}"),
        }
        assert!(started_rows(Uuid::nil(), &calls, &plans).is_empty());
    }

    #[test]
    fn a_side_effect_cut_short_becomes_unknown_and_the_model_is_told() {
        let plans = plan(&[call("b", "charge")], &[started("b")], None);
        match &plans[0] {
            Plan::Known { result, state, .. } => {
                assert_eq!(*state, "unknown");
                assert!(!result.success);
                assert!(
                    result
                        .error
                        .as_deref()
                        .unwrap()
                        .contains("may or may not have taken effect")
                );
            }
            other => panic!("a side effect cut short must not run again: {other:?}"),
        }
    }

    #[test]
    fn idempotent_and_read_only_calls_cut_short_run_again_under_the_same_key() {
        let calls = [call("a", "lookup"), call("c", "upsert")];
        let plans = plan(&calls, &[started("a"), started("c")], None);
        for plan in &plans {
            assert!(
                matches!(
                    plan,
                    Plan::Run {
                        announce: false,
                        ..
                    }
                ),
                "run again, already announced: {plan:?}"
            );
        }
        assert!(matches!(&plans[1], Plan::Run { key: Some(key), .. } if key.ends_with(":c")));
    }

    #[test]
    fn calls_past_the_budget_are_not_run() {
        let calls = [
            call("a", "lookup"),
            call("b", "lookup"),
            call("c", "lookup"),
        ];
        let plans = plan(&calls, &[], Some(2));
        assert!(matches!(plans[0], Plan::Run { .. }));
        assert!(matches!(plans[1], Plan::Run { .. }));
        match &plans[2] {
            Plan::Known { result, state, .. } => {
                assert_eq!(*state, "failed");
                assert!(result.error.as_deref().unwrap().contains("max_tool_calls"));
            }
            other => panic!("past the budget: {other:?}"),
        }
    }

    #[test]
    fn a_decision_not_to_run_is_the_result() {
        let calls = [call("b", "charge")];
        let rejected = failed_result(&calls[0], "rejected by alice".into());
        let decided = HashMap::from([("b".to_string(), (rejected, "rejected"))]);
        let plans = plan_calls(
            effect_of,
            Uuid::nil(),
            &calls,
            &[started("b")],
            &decided,
            None,
        );
        assert!(matches!(
            &plans[0],
            Plan::Known {
                state: "rejected",
                ..
            }
        ));
    }

    #[test]
    fn arguments_that_are_not_json_stay_a_string() {
        let mut bad = call("a", "lookup");
        bad.arguments = "{not json".into();
        assert_eq!(parsed(&bad), Value::String("{not json".into()));
    }
}
