//! Tool approvals (CONTRACT §7), the pure part: which calls of a reply an agent gates
//! (tool names or globs), what a person may decide about one, and what each decision makes
//! of the call: run it (as asked, or with edited arguments) or hand the model a result
//! without running it (a rejection, an expiry, a given result).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::types::{ToolCallRequest, ToolCallResult};

/// How long a request waits for a decision when the agent names no timeout.
pub const DEFAULT_TIMEOUT_SECS: i64 = 86_400;

/// What an expired request does (`agents.on_approval_expiry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExpiry {
    /// The model gets an error result saying the request expired (the default).
    #[default]
    Reject,
    /// The task fails with reason `approval_expired`.
    Fail,
}

impl OnExpiry {
    /// Reads `agents.on_approval_expiry` (`None`: the default).
    pub fn parse(text: Option<&str>) -> Result<Self, String> {
        match text {
            None | Some("reject") => Ok(Self::Reject),
            Some("fail") => Ok(Self::Fail),
            Some(other) => Err(format!(
                "unknown on_approval_expiry {other:?} (expected reject or fail)"
            )),
        }
    }
}

/// An agent's approval rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Tool names or globs (`*` any run of characters, `?` one character).
    pub tools: Vec<String>,
}

impl ApprovalPolicy {
    /// Whether a call of `name` needs a decision.
    pub fn gates(&self, name: &str) -> bool {
        self.tools.iter().any(|pattern| glob_matches(pattern, name))
    }

    /// Whether the agent gates anything at all.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// `*` matches any run of characters (also none), `?` exactly one; everything else itself.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (pattern, name): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point (the last `*`): linear in practice.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((star_p, star_n)) => {
                    p = star_p + 1;
                    n = star_n + 1;
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// The decision kinds of CONTRACT §7 (`approval.decided`'s `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Run the call as asked.
    Approve,
    /// Run the call with other arguments.
    Edit,
    /// Do not run it; the model gets an error result with the reason.
    Reject,
    /// Do not run it; the model gets the given result.
    Respond,
    /// Nobody decided in time (`on_approval_expiry` applies).
    Expired,
}

impl DecisionKind {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Edit => "edit",
            Self::Reject => "reject",
            Self::Respond => "respond",
            Self::Expired => "expired",
        }
    }

    /// Reads a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Approve,
            Self::Edit,
            Self::Reject,
            Self::Respond,
            Self::Expired,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }
}

/// A decision about one gated call, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub kind: DecisionKind,
    /// `edit`: the arguments to run the call with.
    pub arguments: Option<Value>,
    /// `respond`: the result the model gets.
    pub result: Option<Value>,
    /// `reject`: why.
    pub reason: Option<String>,
    /// Who decided.
    pub by: Option<String>,
}

impl Decision {
    /// Checks that the decision carries what its kind needs: `edit` an arguments object,
    /// `respond` a result. `expired` is never sent by a person.
    pub fn validate(&self) -> Result<(), String> {
        match self.kind {
            DecisionKind::Edit => match &self.arguments {
                Some(Value::Object(_)) => Ok(()),
                _ => Err("an edit needs `arguments`, a JSON object".into()),
            },
            DecisionKind::Respond if self.result.is_none() => {
                Err("a respond needs `result`".into())
            }
            DecisionKind::Expired => Err("`expired` is not a decision a person sends".into()),
            _ => Ok(()),
        }
    }
}

/// What a decision makes of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// Run this call (the original, or with the edited arguments).
    Run(ToolCallRequest),
    /// Do not run it: the model gets this result; `state` is the ledger's.
    Result {
        result: ToolCallResult,
        state: &'static str,
    },
}

/// Applies `decision` to `call` (see [`Decided`]). `arguments` are the call's parsed
/// arguments, for the result the model sees.
pub fn apply(decision: &Decision, call: &ToolCallRequest, arguments: Value) -> Decided {
    let by = decision.by.as_deref().unwrap_or("someone");
    let not_run =
        |success: bool, result: Option<Value>, error: Option<String>, state| Decided::Result {
            result: ToolCallResult {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: arguments.clone(),
                success,
                result,
                error,
                memo: None,
                duration_ms: 0,
            },
            state,
        };
    match decision.kind {
        DecisionKind::Approve => Decided::Run(call.clone()),
        DecisionKind::Edit => match &decision.arguments {
            Some(edited) => Decided::Run(ToolCallRequest {
                arguments: edited.to_string(),
                ..call.clone()
            }),
            None => Decided::Run(call.clone()),
        },
        DecisionKind::Reject => {
            let reason = decision.reason.as_deref().unwrap_or("no reason given");
            let error = format!(
                "the call of '{}' was rejected by {by} and did not run: {reason}",
                call.name
            );
            not_run(false, None, Some(error), "rejected")
        }
        DecisionKind::Expired => {
            let error = format!(
                "the call of '{}' did not run: nobody approved it before its approval request expired",
                call.name
            );
            not_run(false, None, Some(error), "rejected")
        }
        DecisionKind::Respond => {
            let result = decision.result.clone().unwrap_or(Value::Null);
            not_run(true, Some(result), None, "succeeded")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call() -> ToolCallRequest {
        ToolCallRequest {
            id: "c1".into(),
            name: "mail__send".into(),
            arguments: r#"{"to":"a"}"#.into(),
        }
    }

    fn decision(kind: DecisionKind) -> Decision {
        Decision {
            kind,
            arguments: None,
            result: None,
            reason: None,
            by: Some("ana".into()),
        }
    }

    #[test]
    fn globs_match_names() {
        assert!(glob_matches("mail__send", "mail__send"));
        assert!(!glob_matches("mail__send", "mail__sendx"));
        assert!(glob_matches("everything__*", "everything__echo"));
        assert!(glob_matches("everything__*", "everything__"));
        assert!(!glob_matches("everything__*", "every__echo"));
        assert!(glob_matches("*", "calculate"));
        assert!(glob_matches("*__delete_*", "files__delete_all"));
        assert!(!glob_matches("*__delete_*", "files__remove_all"));
        assert!(glob_matches("take_mem?", "take_memo"));
        assert!(!glob_matches("take_mem?", "take_mem"));
        assert!(glob_matches("a*b*c", "aXbYbZc"));
        assert!(!glob_matches("a*b*c", "aXbYbZ"));
        let policy = ApprovalPolicy {
            tools: vec!["calculate".into(), "mail__*".into()],
        };
        assert!(policy.gates("mail__send"));
        assert!(policy.gates("calculate"));
        assert!(!policy.gates("current_time"));
        assert!(!ApprovalPolicy::default().gates("calculate"));
    }

    #[test]
    fn approve_runs_the_call_as_asked_and_edit_with_new_arguments() {
        let approve = decision(DecisionKind::Approve);
        assert_eq!(apply(&approve, &call(), json!({})), Decided::Run(call()));
        let mut edit = decision(DecisionKind::Edit);
        edit.arguments = Some(json!({"to": "b"}));
        let Decided::Run(edited) = apply(&edit, &call(), json!({})) else {
            panic!("an edit runs the call");
        };
        assert_eq!(edited.id, "c1");
        assert_eq!(
            serde_json::from_str::<Value>(&edited.arguments).unwrap(),
            json!({"to": "b"})
        );
    }

    #[test]
    fn reject_expired_and_respond_do_not_run_the_call() {
        let mut reject = decision(DecisionKind::Reject);
        reject.reason = Some("not today".into());
        let Decided::Result { result, state } = apply(&reject, &call(), json!({"to": "a"})) else {
            panic!("a rejection does not run the call");
        };
        assert_eq!(state, "rejected");
        assert!(!result.success);
        let error = result.error.unwrap();
        assert!(
            error.contains("rejected by ana") && error.contains("not today"),
            "{error}"
        );
        let Decided::Result { result, state } =
            apply(&decision(DecisionKind::Expired), &call(), json!({}))
        else {
            panic!("an expiry does not run the call");
        };
        assert_eq!(state, "rejected");
        assert!(result.error.unwrap().contains("expired"));
        let mut respond = decision(DecisionKind::Respond);
        respond.result = Some(json!({"sent": false}));
        let Decided::Result { result, state } = apply(&respond, &call(), json!({})) else {
            panic!("a respond does not run the call");
        };
        assert_eq!(state, "succeeded");
        assert!(result.success);
        assert_eq!(result.result, Some(json!({"sent": false})));
    }

    #[test]
    fn decisions_carry_what_their_kind_needs() {
        assert!(decision(DecisionKind::Approve).validate().is_ok());
        assert!(decision(DecisionKind::Reject).validate().is_ok());
        assert!(decision(DecisionKind::Edit).validate().is_err());
        let mut edit = decision(DecisionKind::Edit);
        edit.arguments = Some(json!("text"));
        assert!(edit.validate().is_err());
        edit.arguments = Some(json!({"a": 1}));
        assert!(edit.validate().is_ok());
        assert!(decision(DecisionKind::Respond).validate().is_err());
        assert!(decision(DecisionKind::Expired).validate().is_err());
        for kind in ["approve", "edit", "reject", "respond", "expired"] {
            assert_eq!(DecisionKind::parse(kind).unwrap().as_str(), kind);
            let value = serde_json::to_value(DecisionKind::parse(kind).unwrap()).unwrap();
            assert_eq!(value, kind);
        }
        assert_eq!(DecisionKind::parse("maybe"), None);
        assert_eq!(OnExpiry::parse(None), Ok(OnExpiry::Reject));
        assert_eq!(OnExpiry::parse(Some("fail")), Ok(OnExpiry::Fail));
        assert!(OnExpiry::parse(Some("explode")).is_err());
    }
}
