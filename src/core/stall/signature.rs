//! A recursion's progress signature (CONTRACT §14): two recursions with the same signature
//! made no progress between them.
//!
//! What it covers, as canonical JSON hashed into a UUIDv5 (stable across builds, so a
//! checkpoint resumed by another worker still compares):
//! - the action type (`null` when the reply could not be used);
//! - CALL_TOOL: each call's name, arguments in canonical form (object keys sorted, no
//!   whitespace, so `{"b":1, "a":2}` and `{"a":2,"b":1}` are the same call) and its result
//!   (success, result, error), ignoring call ids and durations, and ignoring the calls'
//!   order within the recursion. Because results are part of it, a poll whose result
//!   changes between calls never stalls;
//! - RE_PLAN: the plan (step ids, descriptions, statuses), not the notes: the same plan
//!   again is no progress however it is explained;
//! - REFLECT: the summary, so only the very same reflection repeats;
//! - the error_log: a reply that fails to parse the same way again (its error quotes the
//!   reply's start) repeats; a different failure does not.
//!
//! Observe, thought, abstract, step updates and memory appends are left out: the model
//! rephrasing its thoughts around the same call is the stall this detects.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::core::limits::trim_text;
use crate::core::storable;
use crate::core::types::ToolCallResult;

/// The namespace of signature UUIDs (a fixed, random UUID).
const SIGNATURE_NAMESPACE: Uuid = Uuid::from_u128(0x5c1e_7a1d_3b0f_4e2a_9d6c_8f41_2b7e_90a3);

/// How long the description shown in a warning may be.
const MAX_SUMMARY_CHARS: usize = 200;

/// What a finished recursion recorded, as the machine holds it when the recursion closes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecursionFacts<'a> {
    /// `CALL_TOOL`, `RE_PLAN`, `REFLECT` or `ANSWER`; `None` when there was no usable reply.
    pub action_type: Option<&'a str>,
    /// The action's output (`{plan, notes?}`, `{summary}`, ...); `{}` for CALL_TOOL.
    pub action_output: Option<&'a Value>,
    /// CALL_TOOL's results, untrimmed, in call order.
    pub tool_results: Option<&'a [ToolCallResult]>,
    pub error_log: Option<&'a str>,
}

/// The signature of one recursion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressSignature {
    /// UUIDv5 of the canonical JSON described in the module doc.
    pub hash: Uuid,
    /// What was repeated, for the warning: `CALL_TOOL search`, `RE_PLAN`, `no usable reply`.
    pub summary: String,
}

impl ProgressSignature {
    /// The signature of the recursion described by `facts`.
    pub fn of(facts: &RecursionFacts<'_>) -> Self {
        let mut calls: Vec<String> = facts
            .tool_results
            .unwrap_or_default()
            .iter()
            .map(|r| {
                canonical(&json!({
                    "name": r.name,
                    "arguments": r.arguments,
                    "success": r.success,
                    "result": r.result,
                    "error": r.error,
                }))
            })
            .collect();
        calls.sort();
        let output = facts
            .action_output
            .and_then(|output| match facts.action_type {
                Some("RE_PLAN") => output.get("plan"),
                Some("REFLECT") => output.get("summary"),
                Some("ANSWER") => output.get("answer"),
                _ => None,
            });
        let text = canonical(&json!({
            "action_type": facts.action_type,
            "output": output,
            "calls": calls,
            "error_log": facts.error_log,
        }));
        Self {
            hash: Uuid::new_v5(&SIGNATURE_NAMESPACE, text.as_bytes()),
            summary: summary(facts),
        }
    }
}

/// A short description of the action, storable and bounded.
fn summary(facts: &RecursionFacts<'_>) -> String {
    let text = match (facts.action_type, facts.tool_results) {
        (Some(action), Some(results)) if !results.is_empty() => {
            let mut names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
            names.dedup();
            format!("{action} {}", names.join(", "))
        }
        (Some(action), _) => action.to_owned(),
        (None, _) => "no usable reply".to_owned(),
    };
    trim_text(&storable::owned(text), MAX_SUMMARY_CHARS)
}

/// `value` as JSON text with object keys sorted and no whitespace, whatever the map's
/// iteration order.
pub(crate) fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}
