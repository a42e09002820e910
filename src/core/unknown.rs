//! Unknown outcomes held for a person (CONTRACT §14), pure: `agents.on_unknown`, and what
//! an operator's `resolve` of a held call makes of it.
//!
//! A side-effecting call that started but whose outcome was not committed when its worker
//! died is `unknown` (CONTRACT §7). With `on_unknown` = `tell_model` (the default) the model
//! gets an error result saying so; with `hold` the task waits (reason `unknown_outcome`)
//! until a person resolves the call: `succeeded` (with the result the call had), `failed`
//! (with its error), `retry` (run it again under the same idempotency key) or `skip` (an
//! error result saying an operator skipped it). The first resolution of a call wins.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::types::ToolCallResult;

/// `agents.on_unknown`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnUnknown {
    /// The model is told the call may or may not have taken effect (CONTRACT §7).
    #[default]
    TellModel,
    /// The task waits for a person's resolve.
    Hold,
}

impl OnUnknown {
    /// Reads the stored or sent value; `None` is the default.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("tell_model") => Ok(Self::TellModel),
            Some("hold") => Ok(Self::Hold),
            Some(other) => Err(format!(
                "on_unknown must be tell_model or hold, not {:?}",
                crate::core::limits::trim_text(other, 40)
            )),
        }
    }

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::TellModel => "tell_model",
            Self::Hold => "hold",
        }
    }
}

/// What an operator says about a held call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResolveOutcome {
    /// It took effect: the model gets `result`, the ledger records it succeeded.
    Succeeded,
    /// It did not: the model gets `error` (or the reason) as the call's error.
    Failed,
    /// Run it again under the same idempotency key.
    Retry,
    /// Do not run it: the model gets an error saying an operator skipped it.
    Skip,
}

impl ResolveOutcome {
    /// The wire name (`operator_actions.action`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Retry => "retry",
            Self::Skip => "skip",
        }
    }

    /// The outcome named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Succeeded, Self::Failed, Self::Retry, Self::Skip]
            .into_iter()
            .find(|outcome| outcome.as_str() == name)
    }
}

/// A resolution as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub outcome: ResolveOutcome,
    /// `succeeded`: the call's result (null when not given).
    pub result: Option<Value>,
    /// `failed`: the call's error (the reason when not given).
    pub error: Option<String>,
    /// Why; required.
    pub reason: String,
    pub by: Option<String>,
}

/// Longest reason or error accepted, in characters.
pub const MAX_REASON_CHARS: usize = 4000;

impl Resolution {
    /// Checks what a person sent: a reason that is not blank, and fields that fit the
    /// outcome (a `result` only with `succeeded`, an `error` only with `failed`).
    pub fn validate(&self) -> Result<(), String> {
        if self.reason.trim().is_empty() {
            return Err("reason must not be blank: say why the call is resolved so".into());
        }
        if self.reason.chars().count() > MAX_REASON_CHARS {
            return Err(format!(
                "reason is longer than {MAX_REASON_CHARS} characters"
            ));
        }
        if self.result.is_some() && self.outcome != ResolveOutcome::Succeeded {
            return Err(format!(
                "result is for outcome succeeded, not {}",
                self.outcome.as_str()
            ));
        }
        if self.error.is_some() && self.outcome != ResolveOutcome::Failed {
            return Err(format!(
                "error is for outcome failed, not {}",
                self.outcome.as_str()
            ));
        }
        if (self.error.as_ref()).is_some_and(|e| e.chars().count() > MAX_REASON_CHARS) {
            return Err(format!(
                "error is longer than {MAX_REASON_CHARS} characters"
            ));
        }
        Ok(())
    }

    /// The resolution with every text made storable (`core::storable`: NUL becomes
    /// U+FFFD), as it is recorded in `operator_actions` and `tool.resolved`.
    pub fn storable(&self) -> Self {
        use crate::core::storable;
        Self {
            outcome: self.outcome,
            result: self.result.clone().map(storable::json_owned),
            error: self.error.clone().map(storable::owned),
            reason: storable::owned(self.reason.clone()),
            by: self.by.clone().map(storable::owned),
        }
    }

    /// `operator_actions.payload`: what was given besides the reason.
    pub fn payload(&self) -> Value {
        let mut payload = serde_json::Map::new();
        if let Some(result) = &self.result {
            payload.insert("result".into(), result.clone());
        }
        if let Some(error) = &self.error {
            payload.insert("error".into(), Value::String(error.clone()));
        }
        Value::Object(payload)
    }

    /// Reads a recorded row back (`action`, `payload`, `reason`, `by`).
    pub fn from_row(action: &str, payload: &Value, reason: &str, by: Option<&str>) -> Option<Self> {
        Some(Self {
            outcome: ResolveOutcome::parse(action)?,
            result: payload.get("result").cloned(),
            error: payload
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_owned),
            reason: reason.to_owned(),
            by: by.map(str::to_owned),
        })
    }

    /// What the held call becomes: `None` for `retry` (it runs again), else the result the
    /// model gets with the ledger state (`succeeded` or `failed`).
    pub fn result_for(
        &self,
        tool_call_id: &str,
        name: &str,
        arguments: Value,
    ) -> Option<(ToolCallResult, &'static str)> {
        let who = self.by.as_deref().unwrap_or("an operator");
        let (success, result, error, state) = match self.outcome {
            ResolveOutcome::Retry => return None,
            ResolveOutcome::Succeeded => (
                true,
                Some(self.result.clone().unwrap_or(Value::Null)),
                None,
                "succeeded",
            ),
            ResolveOutcome::Failed => {
                let error = self.error.clone().unwrap_or_else(|| {
                    format!("the call failed (resolved by {who}: {})", self.reason)
                });
                (false, None, Some(error), "failed")
            }
            ResolveOutcome::Skip => {
                let error = format!(
                    "the call of '{name}' was skipped by {who} and did not run: {}",
                    self.reason
                );
                (false, None, Some(error), "failed")
            }
        };
        Some((
            ToolCallResult {
                tool_call_id: tool_call_id.to_owned(),
                name: name.to_owned(),
                arguments,
                success,
                result,
                error,
                memo: None,
                duration_ms: 0,
            },
            state,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolution(outcome: ResolveOutcome) -> Resolution {
        Resolution {
            outcome,
            result: None,
            error: None,
            reason: "checked the bank statement".into(),
            by: Some("ann".into()),
        }
    }

    #[test]
    fn on_unknown_defaults_to_tell_model_and_refuses_typos() {
        assert_eq!(OnUnknown::parse(None), Ok(OnUnknown::TellModel));
        assert_eq!(OnUnknown::parse(Some("hold")), Ok(OnUnknown::Hold));
        assert!(OnUnknown::parse(Some("hodl")).unwrap_err().contains("hodl"));
    }

    #[test]
    fn outcomes_have_wire_names() {
        for outcome in [
            ResolveOutcome::Succeeded,
            ResolveOutcome::Failed,
            ResolveOutcome::Retry,
            ResolveOutcome::Skip,
        ] {
            assert_eq!(ResolveOutcome::parse(outcome.as_str()), Some(outcome));
            assert_eq!(serde_json::to_value(outcome).unwrap(), outcome.as_str());
        }
        assert_eq!(ResolveOutcome::parse("success"), None);
    }

    #[test]
    fn a_resolution_needs_a_reason_and_fields_that_fit_its_outcome() {
        let mut blank = resolution(ResolveOutcome::Skip);
        blank.reason = "  ".into();
        assert!(blank.validate().unwrap_err().contains("reason"));
        let mut result_on_failed = resolution(ResolveOutcome::Failed);
        result_on_failed.result = Some(json!(1));
        assert!(result_on_failed.validate().is_err());
        let mut error_on_retry = resolution(ResolveOutcome::Retry);
        error_on_retry.error = Some("x".into());
        assert!(error_on_retry.validate().is_err());
        let mut ok = resolution(ResolveOutcome::Succeeded);
        ok.result = Some(json!({"charged": 5}));
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.payload(), json!({"result": {"charged": 5}}));
    }

    #[test]
    fn what_each_outcome_gives_the_model() {
        let args = json!({"amount": 5});
        let mut succeeded = resolution(ResolveOutcome::Succeeded);
        succeeded.result = Some(json!({"id": "ch_1"}));
        let (result, state) = succeeded.result_for("c1", "charge", args.clone()).unwrap();
        assert_eq!((result.success, state), (true, "succeeded"));
        assert_eq!(result.result, Some(json!({"id": "ch_1"})));
        let mut failed = resolution(ResolveOutcome::Failed);
        failed.error = Some("card declined".into());
        let (result, state) = failed.result_for("c1", "charge", args.clone()).unwrap();
        assert_eq!((result.success, state), (false, "failed"));
        assert_eq!(result.error.as_deref(), Some("card declined"));
        let (skipped, _) = resolution(ResolveOutcome::Skip)
            .result_for("c1", "charge", args.clone())
            .unwrap();
        let error = skipped.error.unwrap();
        assert!(error.contains("skipped by ann") && error.contains("bank statement"));
        assert!(
            resolution(ResolveOutcome::Retry)
                .result_for("c1", "charge", args)
                .is_none()
        );
    }

    #[test]
    fn a_row_reads_back_as_it_was_recorded() {
        let mut failed = resolution(ResolveOutcome::Failed);
        failed.error = Some("declined".into());
        let back = Resolution::from_row(
            "failed",
            &failed.payload(),
            &failed.reason,
            failed.by.as_deref(),
        );
        assert_eq!(back, Some(failed));
        assert_eq!(Resolution::from_row("maybe", &json!({}), "r", None), None);
    }
}
