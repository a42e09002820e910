//! `agentd trace TASK_ID`: the full trace of a task from PostgreSQL, for people, with the
//! tool calls it waits for a decision on and the commands that decide them. With
//! `database.read_url`, read from the read replica (the primary when it lacks the task).

use std::process::ExitCode;

use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::out::{errln, outln};
use crate::config::Settings;
use crate::store;
use crate::store::readers::Readers;
use crate::store::tasks::TaskRow;
use crate::store::trace::{LlmCallRecord, RecursionRow, ToolCallRow};

/// Prints the task, the approvals it waits for, its plan, and every recursion with its
/// tool calls and LLM attempts.
pub async fn run(settings: &Settings, task_id: Uuid) -> anyhow::Result<ExitCode> {
    let pool = store::connect(&settings.database.url, 2).await?;
    // From the read replica when one is configured and has the task (store::readers).
    let readers = Readers::new(pool, &settings.database, 2)?;
    let found = readers.find(|pool| read(pool, task_id)).await;
    readers.close().await;
    let Some(Trace {
        task,
        pending,
        recursions,
        tool_calls,
        llm_calls,
    }) = found?
    else {
        errln!("agentd: no task {task_id}");
        return Ok(ExitCode::FAILURE);
    };
    print_task(&task)?;
    if !pending.is_empty() {
        outln!(
            "pending   {} tool call(s) wait for a decision:",
            pending.len()
        )?;
        for approval in &pending {
            for line in super::approvals::describe_pending(approval) {
                outln!("  {line}")?;
            }
        }
    }
    print_plan(task.plan.as_ref())?;
    for recursion in &recursions {
        print_recursion(recursion, &tool_calls, &llm_calls)?;
    }
    match (&task.answer, &task.error) {
        (Some(answer), _) => outln!("\nanswer\n{answer}")?,
        (None, Some(error)) => outln!(
            "\nerror ({})\n{error}",
            task.fail_reason.as_deref().unwrap_or("")
        )?,
        (None, None) => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Pending approvals shown by a trace (a task rarely waits for more).
const PENDING_SHOWN: i64 = 100;

/// What a trace shows, read from one server.
struct Trace {
    task: TaskRow,
    pending: Vec<store::approvals::ApprovalRow>,
    recursions: Vec<RecursionRow>,
    tool_calls: Vec<ToolCallRow>,
    llm_calls: Vec<LlmCallRecord>,
}

/// The task and its trace, or None when `pool` has no such task.
async fn read(pool: PgPool, task_id: Uuid) -> sqlx::Result<Option<Trace>> {
    let Some(task) = store::tasks::get(&pool, task_id).await? else {
        return Ok(None);
    };
    Ok(Some(Trace {
        task,
        pending: store::approvals::pending(&pool, Some(task_id), PENDING_SHOWN).await?,
        recursions: store::trace::recursions(&pool, task_id).await?,
        tool_calls: store::trace::tool_calls(&pool, task_id).await?,
        llm_calls: store::trace::llm_calls(&pool, task_id).await?,
    }))
}

fn print_task(task: &TaskRow) -> std::io::Result<()> {
    outln!("task      {}", task.task_id)?;
    outln!(
        "agent     {}",
        task.agent_id.map(|id| id.to_string()).unwrap_or_default()
    )?;
    outln!(
        "status    {} after {} recursion(s)",
        task.status,
        task.iterations
    )?;
    outln!("input     {}", task.input.as_deref().unwrap_or(""))?;
    if let (Some(started), Some(finished)) = (task.started_at, task.finished_at) {
        outln!("took      {} ms", (finished - started).num_milliseconds())?;
    }
    let cost = task.cost_usd.map_or_else(
        || "cost unknown (no price)".to_owned(),
        |c| format!("${c:.6}"),
    );
    outln!(
        "spent     {}+{} tokens · {cost} · {} tool call(s)",
        task.prompt_tokens,
        task.completion_tokens,
        task.tool_call_count
    )?;
    if let Some(reason) = &task.wait_reason {
        outln!("waiting   {reason}")?;
    }
    Ok(())
}

fn print_recursion(
    recursion: &RecursionRow,
    tool_calls: &[ToolCallRow],
    llm_calls: &[LlmCallRecord],
) -> std::io::Result<()> {
    outln!(
        "\n#{} [{}] step {} · {} ms · trace {}",
        recursion.iteration,
        recursion.status,
        recursion.step_id.as_deref().unwrap_or("-"),
        (recursion.finished_at - recursion.started_at).num_milliseconds(),
        recursion.trace_id
    )?;
    outln!(
        "  action   {}",
        recursion.action_type.as_deref().unwrap_or("(none)")
    )?;
    outln!("  abstract {}", recursion.abstract_)?;
    outln!("  observe  {}", recursion.observe)?;
    outln!("  thought  {}", recursion.thought)?;
    if let Some(error) = &recursion.error_log {
        outln!("  error    {error}")?;
    }
    let ours = |trace_id: Uuid| trace_id == recursion.trace_id;
    for call in tool_calls.iter().filter(|call| ours(call.trace_id)) {
        outln!("  tool     {}", describe_tool(call))?;
    }
    for call in llm_calls.iter().filter(|call| ours(call.trace_id)) {
        outln!("  llm      {}", describe_llm(call))?;
    }
    Ok(())
}

fn print_plan(plan: Option<&Value>) -> std::io::Result<()> {
    let steps = plan.and_then(Value::as_array).cloned().unwrap_or_default();
    if steps.is_empty() {
        return Ok(());
    }
    outln!("plan")?;
    for step in steps {
        outln!(
            "  [{}] {} {}",
            step["status"].as_str().unwrap_or(""),
            step["step_id"].as_str().unwrap_or(""),
            step["description"].as_str().unwrap_or("")
        )?;
    }
    Ok(())
}

fn describe_tool(call: &ToolCallRow) -> String {
    let arguments = call
        .arguments
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    let took = call
        .duration_ms
        .map(|ms| format!(" · {ms} ms"))
        .unwrap_or_default();
    let effect = match call.effect.as_deref() {
        Some("read_only") | None => String::new(),
        Some(effect) => format!(" [{effect}]"),
    };
    let name = &call.name;
    match (call.success, &call.result, &call.error) {
        (Some(true), Some(result), _) => format!("{name}({arguments}) = {result}{took}{effect}"),
        (_, _, Some(error)) => format!("{name}({arguments}) failed: {error}{took}{effect}"),
        _ => {
            let state = call.state.as_deref().unwrap_or("started");
            format!("{name}({arguments}) {state}{took}{effect}")
        }
    }
}

fn describe_llm(call: &LlmCallRecord) -> String {
    let tokens = match (call.prompt_tokens, call.completion_tokens) {
        (Some(prompt), Some(completion)) => format!(" · {prompt}+{completion} tokens"),
        _ => String::new(),
    };
    let cost = call
        .cost_usd
        .map(|c| format!(" · ${c:.6}"))
        .unwrap_or_default();
    let error = call
        .error
        .as_deref()
        .map(|e| format!(" · {e}"))
        .unwrap_or_default();
    format!(
        "attempt {} · {} · {} ms{tokens}{cost}{error}",
        call.attempt, call.status, call.latency_ms
    )
}
