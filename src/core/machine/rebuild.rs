//! Rebuilding a machine from a task's recorded recursions (a fork, CONTRACT §10): the
//! recorded replies and tool results are fed through the same steps as when they happened,
//! so the new machine holds the plan, memory, history and spending the original had after
//! them, without calling the LLM or running a tool. Events of the replay are dropped.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Machine, Next, TaskInfo};
use crate::core::prompt::PromptTemplate;
use crate::core::types::{LlmReply, ToolCallResult};

/// One recorded recursion, as the trace tables hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct PastRecursion {
    pub trace_id: Uuid,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// The model's reply (content and native tool calls); `None` when the recursion ended
    /// without one (a timeout): `error_log` is then fed as its error.
    pub reply: Option<LlmReply>,
    pub error_log: Option<String>,
    /// Its tool calls' results, in the order of the reply's calls.
    pub tool_results: Vec<ToolCallResult>,
    /// Tokens and cost of its LLM attempts (cost `None` when unknown).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: Option<f64>,
}

impl Machine {
    /// A machine for `task` that has gone through `past` (recursions 1..=past.len(), in
    /// order). Fails when a recorded recursion does not lead where it led before (the task
    /// ended there, or the records are incomplete).
    pub fn rebuild(
        task: TaskInfo,
        past: &[PastRecursion],
        template: &PromptTemplate,
    ) -> Result<Machine, String> {
        // The replay repeats what happened; a stall it would find happened then too (a
        // fork starts with a fresh stall count).
        let stall = task.stall;
        let mut machine = Machine::new(super::TaskInfo {
            stall: crate::core::stall::StallSettings::OFF,
            ..task
        });
        for (index, recursion) in past.iter().enumerate() {
            let iteration = index + 1;
            match machine.begin_recursion(recursion.trace_id, recursion.started_at, template) {
                Next::CallLlm(_) => {}
                other => return Err(format!("recursion {iteration} could not begin: {other:?}")),
            }
            machine.on_llm_usage(
                recursion.prompt_tokens,
                recursion.completion_tokens,
                recursion.cost_usd,
            );
            let at = recursion.finished_at;
            let next = match (&recursion.reply, &recursion.error_log) {
                (Some(reply), _) => machine.on_llm_reply(reply, at),
                (None, Some(error)) => machine.on_recursion_error(error, at),
                (None, None) => return Err(format!("recursion {iteration} has no reply")),
            };
            let next = match next {
                Next::RunTools(_) => machine.on_tool_results(recursion.tool_results.clone(), at),
                other => other,
            };
            match next {
                Next::Continue => {}
                Next::Finished(_) => {
                    return Err(format!("the task ended at recursion {iteration}"));
                }
                other => return Err(format!("recursion {iteration} led to {other:?}")),
            }
            machine.take_events();
        }
        // What the recorded recursions spent is the original's, not the new task's.
        machine.budget = super::BudgetTrack::new(machine.task.budget.clone());
        machine.task.stall = stall;
        Ok(machine)
    }
}
