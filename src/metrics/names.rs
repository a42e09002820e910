//! The names, labels and help texts of every metric agentd exports (docs/operations.md's
//! metrics table lists the same), and the bounded label values.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// Counter: tasks taken up fresh (`task.started`).
pub const TASKS_STARTED: &str = "agentd_tasks_started_total";
/// Counter: tasks resumed from a checkpoint after a redelivery (`task.resumed`).
pub const TASKS_RESUMED: &str = "agentd_tasks_resumed_total";
/// Counter {status, reason}: tasks ended (completed, failed, cancelled, rejected).
pub const TASKS_ENDED: &str = "agentd_tasks_ended_total";
/// Gauge: task messages being handled by this worker right now.
pub const TASKS_IN_FLIGHT: &str = "agentd_tasks_in_flight";
/// Histogram: recursions a task ran before it ended.
pub const TASK_ITERATIONS: &str = "agentd_task_iterations";
/// Counter {action_type, status}: recursions completed.
pub const RECURSIONS: &str = "agentd_recursions_total";
/// Histogram: duration of one recursion.
pub const RECURSION_DURATION: &str = "agentd_recursion_duration_seconds";
/// Counter {status}: LLM attempts by outcome (`200`, `http_429`, `timeout`, `connect`, ...).
pub const LLM_ATTEMPTS: &str = "agentd_llm_attempts_total";
/// Histogram {result}: latency of one LLM attempt (ok or error).
pub const LLM_DURATION: &str = "agentd_llm_call_duration_seconds";
/// Counter {kind}: tokens reported by the provider (prompt, completion).
pub const LLM_TOKENS: &str = "agentd_llm_tokens_total";
/// Counter {model}: cost of LLM attempts in millionths of a USD, from the price table.
pub const LLM_COST: &str = "agentd_llm_cost_microusd_total";
/// Counter {bucket}: milliseconds LLM attempts waited for a provider rate limit
/// (`[[llm.limits]]`).
pub const LLM_THROTTLED: &str = "agentd_llm_throttled_milliseconds_total";
/// Counter {limit, action}: budget limits reached (`budget.exceeded`).
pub const BUDGET_BREACHES: &str = "agentd_budget_exceeded_total";
/// Counter: LLM retries scheduled (`llm.retry`).
pub const LLM_RETRIES: &str = "agentd_llm_retries_total";
/// Counter {tool, success}: tool calls.
pub const TOOL_CALLS: &str = "agentd_tool_calls_total";
/// Histogram {tool}: duration of one tool call.
pub const TOOL_CALL_DURATION: &str = "agentd_tool_call_duration_seconds";
/// Counter: context compactions (`context.compacted`).
pub const COMPACTIONS: &str = "agentd_compactions_total";
/// Histogram: tokens after / tokens before, per compaction.
pub const COMPACTION_RATIO: &str = "agentd_compaction_ratio";
/// Counter: tokens removed by compactions.
pub const COMPACTION_TOKENS_SAVED: &str = "agentd_compaction_tokens_saved_total";
/// Counter {type}: progress events committed, by event type.
pub const EVENTS: &str = "agentd_events_total";
/// Histogram {result}: latency of one confirmed event publish.
pub const PUBLISH_DURATION: &str = "agentd_event_publish_duration_seconds";
/// Counter: task messages moved to the dead-letter queue.
pub const DEAD_LETTERS: &str = "agentd_dead_letters_total";
/// Gauge {server}: 1 while an MCP server is connected, 0 while it is being restarted.
pub const MCP_SERVER_UP: &str = "agentd_mcp_server_up";
/// Counter {server}: MCP server restarts after it died or stopped answering.
pub const MCP_RESTARTS: &str = "agentd_mcp_restarts_total";
/// Counter: ended tasks removed by the worker's periodic prune.
pub const PRUNED_TASKS: &str = "agentd_pruned_tasks_total";
/// Histogram: duration of one periodic prune.
pub const PRUNE_DURATION: &str = "agentd_prune_duration_seconds";

/// Counter {reason}: control messages dropped unapplied (unsigned, unknown_key,
/// bad_signature, wrong_tenant, invalid), counted once per message (CONTRACT v3 §15).
pub const CONTROL_REJECTED: &str = "agentd_control_rejected_total";
/// Counter: stalls detected (CONTRACT §14), by the action taken (`nudge`, `answer`,
/// `pause`, `fail`).
pub const TASK_STALLS: &str = "agentd_task_stalls_total";

/// Counter {decision}: schedule fires decided (CONTRACT §14), by the decision recorded in
/// `schedule_fires` (enqueued, triggered, skipped_overlap, skipped_missed, buffered, capped).
pub const SCHEDULE_FIRES: &str = "agentd_schedule_fires_total";
/// Gauge: 1 on the worker that holds the scheduler lock (runs the scheduler), 0 elsewhere.
pub const SCHEDULER_HOLDER: &str = "agentd_scheduler_holder";

/// The action types of seed 002 (anything else is labelled `other`, none is `none`).
pub const ACTION_TYPES: [&str; 4] = ["CALL_TOOL", "RE_PLAN", "REFLECT", "ANSWER"];
/// The `task.failed` reasons of CONTRACT §3.
pub const FAIL_REASONS: [&str; 8] = [
    "max_iteration",
    "llm_error",
    "rejected",
    "internal",
    "delivery_limit",
    "budget",
    "approval_expired",
    "no_progress",
];

/// Registers help texts and units with the recorder.
pub(super) fn describe() {
    describe_counter!(TASKS_STARTED, "Tasks taken up fresh");
    describe_counter!(TASKS_RESUMED, "Tasks resumed from a checkpoint");
    describe_counter!(TASKS_ENDED, "Tasks ended, by status and failure reason");
    describe_gauge!(TASKS_IN_FLIGHT, "Task messages being handled now");
    describe_histogram!(TASK_ITERATIONS, "Recursions per ended task");
    describe_counter!(
        RECURSIONS,
        "Recursions completed, by action type and status"
    );
    describe_histogram!(RECURSION_DURATION, Unit::Seconds, "Recursion duration");
    describe_counter!(LLM_ATTEMPTS, "LLM attempts, by status or error class");
    describe_histogram!(LLM_DURATION, Unit::Seconds, "LLM attempt latency");
    describe_counter!(LLM_TOKENS, "Tokens reported by the LLM provider");
    describe_counter!(LLM_RETRIES, "LLM retries scheduled");
    describe_counter!(
        LLM_COST,
        "Cost of LLM attempts in millionths of a USD, by model"
    );
    describe_counter!(
        LLM_THROTTLED,
        "Milliseconds LLM attempts waited for a shared provider rate limit, by bucket"
    );
    describe_counter!(
        BUDGET_BREACHES,
        "Budget limits reached, by limit and action"
    );
    describe_counter!(TOOL_CALLS, "Tool calls, by tool and success");
    describe_histogram!(TOOL_CALL_DURATION, Unit::Seconds, "Tool call duration");
    describe_counter!(COMPACTIONS, "Context compactions");
    describe_histogram!(COMPACTION_RATIO, "Tokens after / before a compaction");
    describe_counter!(COMPACTION_TOKENS_SAVED, "Tokens removed by compactions");
    describe_counter!(EVENTS, "Progress events committed, by type");
    describe_histogram!(PUBLISH_DURATION, Unit::Seconds, "Event publish latency");
    describe_counter!(DEAD_LETTERS, "Task messages dead-lettered");
    describe_gauge!(MCP_SERVER_UP, "1 while the MCP server is connected");
    describe_counter!(MCP_RESTARTS, "MCP server restarts");
    describe_counter!(PRUNED_TASKS, "Ended tasks removed by the periodic prune");
    describe_histogram!(PRUNE_DURATION, Unit::Seconds, "Periodic prune duration");
    describe_counter!(
        CONTROL_REJECTED,
        "Control messages dropped unapplied, by reason"
    );
    describe_counter!(TASK_STALLS, "Stalls detected, by the action taken");
    describe_counter!(SCHEDULE_FIRES, "Schedule fires decided, by decision");
    describe_gauge!(
        SCHEDULER_HOLDER,
        "1 while this worker holds the scheduler lock, else 0"
    );
}
