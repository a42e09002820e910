//! Unknown outcomes held for a person in a task's run (CONTRACT §14): with `agents.on_unknown`
//! = `hold`, a side-effecting call the ledger finds cut short (`unknown`, CONTRACT §7) does
//! not become an error result: it is recorded `unknown` (without an outcome), `tool.unknown`
//! is published, and the task waits (reason `unknown_outcome`) with nothing of its reply
//! run. Resumed after a person's `resolve`, the resolutions apply: `succeeded`, `failed` and
//! `skip` give the model their result (the ledger records it), `retry` runs the call again
//! under the same idempotency key (`tool.started` again, its row `started` again).

use std::collections::HashMap;

use uuid::Uuid;

use super::task_run::{TaskRun, ToolsEnd};
use super::tool_plan::{Plan, parsed};
use crate::contract::events::{EventData, ToolUnknown};
use crate::core::types::{ToolCallRequest, ToolCallResult};
use crate::store::ledger::LedgerRow;
use crate::store::step::StartedCall;

/// A held call: the call, its effect and its idempotency key.
pub(super) struct Held {
    call: ToolCallRequest,
    effect: &'static str,
    key: Option<String>,
}

/// The calls of the reply whose plan says their outcome is unknown.
pub(super) fn held(calls: &[ToolCallRequest], plans: &[Plan]) -> Vec<Held> {
    calls
        .iter()
        .zip(plans)
        .filter_map(|(call, plan)| match plan {
            Plan::Known {
                state: "unknown",
                effect,
                key,
                ..
            } => Some(Held {
                call: call.clone(),
                effect: effect.as_str(),
                key: key.clone(),
            }),
            _ => None,
        })
        .collect()
}

impl TaskRun<'_> {
    /// Prepares the step that makes the task wait for resolutions: each held call recorded
    /// `unknown` (no outcome) with its `tool.unknown`.
    pub(super) fn hold(&mut self, trace_id: Uuid, held: Vec<Held>) -> ToolsEnd {
        let iteration = Some(self.machine.iteration());
        let mut ids = Vec::with_capacity(held.len());
        for Held { call, effect, key } in held {
            ids.push(call.id.clone());
            self.started.push(StartedCall {
                trace_id,
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: parsed(&call).to_string(),
                effect,
                idempotency_key: key.clone(),
                state: "unknown",
                approval_expires_at: None,
            });
            let unknown = ToolUnknown {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: parsed(&call),
                idempotency_key: key,
            };
            self.log
                .push(Some(trace_id), iteration, EventData::ToolUnknown(unknown));
        }
        tracing::warn!(calls = ?ids, "tool calls with unknown outcomes wait for a person");
        ToolsEnd::AwaitingResolution(ids)
    }

    /// Applies the resolutions recorded for the reply's calls cut short: a `retry` drops the
    /// call's ledger row (it runs again, announced anew), any other outcome is the call's
    /// result.
    pub(super) async fn apply_resolutions(
        &self,
        calls: &[ToolCallRequest],
        ledger: &mut Vec<LedgerRow>,
        decided: &mut HashMap<String, (ToolCallResult, &'static str)>,
    ) -> anyhow::Result<()> {
        let cut_short = |row: &LedgerRow| {
            !row.has_outcome() && row.state.as_deref() != Some("awaiting_approval")
        };
        if !ledger.iter().any(cut_short) {
            return Ok(());
        }
        let pool = &self.deps.fleet.pool;
        let resolutions = crate::store::operator_actions::of_task(pool, self.task_id()).await?;
        let mut retry = Vec::new();
        for call in calls {
            let Some(resolution) = resolutions.get(&call.id) else {
                continue;
            };
            if !ledger
                .iter()
                .any(|row| row.tool_call_id == call.id && cut_short(row))
            {
                continue;
            }
            match resolution.result_for(&call.id, &call.name, parsed(call)) {
                Some(known) => {
                    decided.insert(call.id.clone(), known);
                }
                None => retry.push(call.id.clone()),
            }
        }
        ledger.retain(|row| !retry.contains(&row.tool_call_id));
        Ok(())
    }
}
