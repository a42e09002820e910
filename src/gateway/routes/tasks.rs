//! `/v1/tasks`: submit a task (published to the tasks queue like any producer's), read a
//! task with a page of its trace (bounded: `gateway.trace_page_recursions`,
//! `gateway.max_field_chars`), cancel a task. Following a task's events is `sse.rs`.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::contract::TaskMessage;
use crate::core::storable;
use crate::gateway::AppState;
use crate::gateway::access;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody};
use crate::gateway::openapi;
use crate::lifecycle::cancel::CancelResult;
use crate::store::tasks::{NewTask, TaskRow, status};
use crate::store::trace::{LlmCallRecord, RecursionRow, ToolCallRow};
use crate::store::{self};

/// Body of `POST /v1/tasks` (the task message of CONTRACT §2 without task_id, which the
/// gateway generates).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    /// The agent that runs the task.
    pub agent_id: Uuid,
    /// The user's request; must not be blank.
    pub input: String,
    /// Groups tasks that are turns of one conversation.
    #[serde(default)]
    pub conversation_id: Option<Uuid>,
    /// Shown to the model as context.constraints.
    #[serde(default)]
    pub constraints: Option<Vec<String>>,
    /// Stream LLM tokens as llm.delta events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// What the task may spend: max_tokens, max_cost_usd, max_tool_calls, max_wall_secs,
    /// on_breach (answer, fail, pause). The agent's budget applies when absent.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub budget: Option<crate::core::budget::Budget>,
    /// Run on this version of the agent (CONTRACT §11).
    #[serde(default)]
    pub agent_version: Option<i32>,
    /// Run on the version this channel serves (`stable`, `canary`, …); not with
    /// `agent_version`.
    #[serde(default)]
    pub channel: Option<String>,
    /// `high` or `normal` (default): within a tenant held to `tenants.max_running`, high
    /// starts first (CONTRACT v3 §15). The task's tenant is its agent's, which the token
    /// must see.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub priority: Option<crate::core::fair_share::Priority>,
    /// The task's tenant: the token's. A token of every tenant (`*`) may name one; a task
    /// whose tenant is not its agent's ends `rejected` (CONTRACT v3 §15).
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// Answer of `POST /v1/tasks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskAccepted {
    pub task_id: Uuid,
    /// Always "pending".
    pub status: &'static str,
    /// Where to follow it (Server-Sent Events).
    pub events_url: String,
    /// Where to read it.
    pub task_url: String,
}

/// Answer of `GET /v1/tasks/{task_id}`: the task row and one page of its trace rows, in
/// order. Text and JSON values longer than `gateway.max_field_chars` characters are cut
/// with a marker (`…[truncated: N of M chars shown]`; a cut JSON value becomes a string).
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskDetail {
    #[schema(value_type = openapi::Task)]
    pub task: TaskRow,
    #[schema(value_type = Vec<openapi::Recursion>)]
    pub recursions: Vec<RecursionRow>,
    #[schema(value_type = Vec<openapi::ToolCall>)]
    pub tool_calls: Vec<ToolCallRow>,
    #[schema(value_type = Vec<openapi::LlmCall>)]
    pub llm_calls: Vec<LlmCallRecord>,
    /// The tasks it delegated to (CONTRACT §10), oldest first.
    #[schema(value_type = Vec<openapi::Task>)]
    pub children: Vec<TaskRow>,
    /// Pass as `after_iteration` for the next page of recursions (with their tool calls
    /// and LLM attempts); null on the last page.
    pub next_after_iteration: Option<i32>,
}

/// Query of `GET /v1/tasks/{task_id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TraceQuery {
    /// Recursions with a greater iteration only (default 0: from the first).
    pub after_iteration: Option<i32>,
    /// Recursions per page (default and most: `gateway.trace_page_recursions`, 100).
    pub limit: Option<i64>,
}

/// Answer of `POST /v1/tasks/{task_id}/cancel`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CancelAnswer {
    pub task_id: Uuid,
    /// `cancelled`: the task had not started and is now cancelled; `cancel_sent`: its
    /// worker was told to stop it (it ends `cancelled` within a second).
    pub outcome: &'static str,
}

impl CreateTask {
    /// Rules serde cannot express.
    fn check(&self) -> Result<(), ApiError> {
        if self.input.trim().is_empty() {
            return Err(ApiError::invalid_body("input must not be blank"));
        }
        let constraints = self.constraints.as_deref().unwrap_or_default();
        if constraints.iter().any(|c| c.trim().is_empty()) {
            return Err(ApiError::invalid_body(
                "constraints must not contain blank strings",
            ));
        }
        let budget = serde_json::to_value(&self.budget).unwrap_or_default();
        if let Err(problem) = crate::contract::intake::parse_budget(Some(budget)) {
            return Err(ApiError::invalid_body(problem));
        }
        Ok(())
    }
}

/// Submits a task: validates it, checks the agent, publishes it to the tasks queue and
/// records it as pending so that it can be read and followed at once.
#[utoipa::path(
    post,
    path = "/v1/tasks",
    tag = "tasks",
    request_body = CreateTask,
    responses(
        (status = 202, description = "Published; follow events_url", body = TaskAccepted,
         headers(("location" = String, description = "The task's URL"))),
        (status = 400, description = "Malformed JSON, or a cost limit for a model without a price (no_price)", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "The token lacks the submit scope (missing_scope) or names another tenant (wrong_tenant)", body = ErrorBody),
        (status = 404, description = "Unknown agent, or another tenant's (agent_not_found)", body = ErrorBody),
        (status = 409, description = "The conversation_id belongs to another agent (conversation_of_another_agent)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Invalid fields", body = ErrorBody),
        (status = 503, description = "The broker did not take the task", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_task(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(body): ApiJson<CreateTask>,
) -> Result<Response, ApiError> {
    body.check()?;
    // Another tenant's agent is as unknown as one that does not exist (CONTRACT v3 §15).
    let agent = store::agents::get(state.pool(), body.agent_id).await?;
    let Some(agent) = agent.filter(|agent| access::sees(&caller, &agent.tenant_id)) else {
        return Err(ApiError::not_found(
            "agent_not_found",
            format!("no agent {}", body.agent_id),
        ));
    };
    let tenant_id = access::new_tenant(&caller, body.tenant_id.as_deref(), &agent.tenant_id)?;
    super::budget::check_task_budget(state.settings(), body.budget.as_ref(), &agent)?;
    // A conversation belongs to one agent (CONTRACT v3 §15): refused here rather than
    // rejected by a worker.
    if let Some(conversation_id) = body.conversation_id
        && let Some(owner) = store::conversations::owner(state.pool(), conversation_id).await?
        && owner.agent_id != body.agent_id
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conversation_of_another_agent",
            format!(
                "conversation {conversation_id} belongs to another agent: a conversation_id \
                 names one agent's conversation (use a new conversation_id)"
            ),
        ));
    }
    super::versions::check_requested(&state, body.agent_id, body.agent_version, &body.channel)
        .await?;
    let task_id = Uuid::now_v7();
    // Made storable at the door, as the worker does: the row and the message agree.
    let task = TaskMessage {
        task_id: Some(task_id),
        agent_id: body.agent_id,
        input: storable::owned(body.input),
        conversation_id: body.conversation_id,
        constraints: (body.constraints.unwrap_or_default().into_iter())
            .map(storable::owned)
            .collect(),
        stream: body.stream.unwrap_or(false),
        budget: body.budget,
        agent_version: body.agent_version,
        channel: body.channel,
        // Its agent's tenant, which the token sees, unless a token of every tenant named
        // another (then a worker rejects it, the reason in tasks.error).
        tenant_id: Some(tenant_id),
        priority: body.priority,
        rerun: None,
    };
    if task.conversation_id.is_some() {
        // A turn is recorded before it is published: that fixes its place in the
        // conversation whichever worker reads it first (CONTRACT §10).
        record_turn(&state, task_id, &task).await?;
    } else {
        publish(&state, &task).await?;
        record_pending(&state, task_id, &task).await;
    }
    Ok(accepted(task_id))
}

/// Records a conversation turn, then publishes it; a turn whose message could not be
/// published is withdrawn, so that it holds up no later turn.
async fn record_turn(state: &AppState, task_id: Uuid, task: &TaskMessage) -> Result<(), ApiError> {
    let row = pending_row(task_id, task);
    store::conversations::record_turn(state.pool(), &row).await?;
    if let Err(err) = publish(state, task).await {
        if let Err(withdraw) = store::conversations::withdraw_turn(state.pool(), task_id).await {
            tracing::warn!(%task_id, error = %withdraw, "could not withdraw the unpublished turn");
        }
        return Err(err);
    }
    Ok(())
}

fn pending_row(task_id: Uuid, task: &TaskMessage) -> NewTask<'_> {
    NewTask {
        task_id,
        agent_id: Some(task.agent_id),
        conversation_id: task.conversation_id,
        input: Some(&task.input),
        constraints: &task.constraints,
        stream: task.stream,
        reply: None,
        received_at: None,
        tenant_id: task.tenant_id.as_deref(),
        priority: task.priority.unwrap_or_default(),
        rerun: task.rerun,
    }
}

/// The 202 answer for a task published as `task_id` (a new task or a fork): where to read
/// it and follow its events.
pub(super) fn accepted(task_id: Uuid) -> Response {
    let task_url = format!("/v1/tasks/{task_id}");
    let accepted = TaskAccepted {
        task_id,
        status: status::PENDING,
        events_url: format!("{task_url}/events"),
        task_url: task_url.clone(),
    };
    (
        StatusCode::ACCEPTED,
        [(header::LOCATION, task_url)],
        Json(accepted),
    )
        .into_response()
}

/// Publishes the task message exactly as `agentd submit` does.
async fn publish(state: &AppState, task: &TaskMessage) -> Result<(), ApiError> {
    let message = serde_json::to_vec(task).map_err(|err| ApiError::internal(&err))?;
    let limit = state.settings().worker.max_message_bytes;
    if message.len() > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the task message would be {} bytes; workers accept at most {limit}",
                message.len()
            ),
        ));
    }
    state
        .publisher()
        .publish_task(&state.settings().amqp.tasks_queue, &message)
        .await
        .map_err(|err| ApiError::broker_unavailable(&err))
}

/// Inserts the `pending` row the worker would insert on intake (the same idempotent
/// insert), so that the task is readable and followable before a worker takes it. The
/// message is published already, so a failure here only delays that: it is logged.
async fn record_pending(state: &AppState, task_id: Uuid, task: &TaskMessage) {
    let row = pending_row(task_id, task);
    if let Err(err) = store::tasks::insert_pending(state.pool(), &row).await {
        tracing::warn!(%task_id, error = %err, "could not record the pending task");
    }
}

/// Reads a task with its plan and one page of its recursions, tool calls and LLM attempts.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task"), TraceQuery),
    responses(
        (status = 200, body = TaskDetail),
        (status = 400, description = "Not a UUID, or an unreadable query", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
        (status = 422, description = "after_iteration < 0 or limit out of range", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_task(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<TraceQuery>,
) -> Result<Json<TaskDetail>, ApiError> {
    let gateway = &state.settings().gateway;
    let most = i64::try_from(gateway.trace_page_recursions).unwrap_or(i64::MAX);
    let limit = query.limit.unwrap_or(most);
    if !(1..=most).contains(&limit) {
        return Err(ApiError::invalid_parameter(format!(
            "limit must be between 1 and {most}"
        )));
    }
    let after = query.after_iteration.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid_parameter("after_iteration must be >= 0"));
    }
    let max_chars = gateway.max_field_chars;
    let max = i64::try_from(max_chars).unwrap_or(i64::MAX);
    // From the read replica when it has the task (store::readers), all from one server.
    let found = state.readers().find(|pool| async move {
        let Some(task) = store::tasks::get(&pool, task_id).await? else {
            return Ok(None);
        };
        let page = store::detail::page(&pool, task_id, after, limit, max).await?;
        let children = store::children::of_parent(&pool, task_id).await?;
        Ok(Some((task, page, children)))
    });
    let Some((task, page, children)) = found.await? else {
        return Err(task_not_found(task_id));
    };
    Ok(Json(TaskDetail {
        task: cut_task(task, max_chars),
        recursions: page.recursions,
        tool_calls: page.tool_calls,
        llm_calls: page.llm_calls,
        children: children
            .into_iter()
            .map(|child| cut_task(child.task, max_chars))
            .collect(),
        next_after_iteration: page.next_after_iteration,
    }))
}

/// A task row with its long texts cut at `max_chars` (with the marker).
fn cut_task(mut task: TaskRow, max_chars: usize) -> TaskRow {
    for text in [&mut task.input, &mut task.answer, &mut task.error]
        .into_iter()
        .flatten()
    {
        if text.len() > max_chars {
            *text = crate::core::limits::trim_text(text, max_chars);
        }
    }
    task
}

/// Cancels a task wherever it is (the logic of `agentd cancel`). A task id with no row
/// yet (its message still queued) is cancelled before it starts, as with the CLI.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/cancel",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task")),
    responses(
        (status = 200, description = "The task had not started and is now cancelled", body = CancelAnswer),
        (status = 202, description = "The task's worker was told to cancel it", body = CancelAnswer),
        (status = 400, description = "Not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 409, description = "The task has already ended (task_finished)", body = ErrorBody),
        (status = 503, description = "The database (database_unavailable) or the broker (broker_unavailable) is away", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_task(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
) -> Result<Response, ApiError> {
    if let Some(task) = store::tasks::get(state.pool(), task_id).await?
        && status::is_terminal(&task.status)
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "task_finished",
            format!("task {task_id} has already ended ({})", task.status),
        ));
    }
    let result = crate::lifecycle::cancel::cancel_task(
        state.pool(),
        state.publisher(),
        state.settings(),
        task_id,
    )
    .await
    .map_err(|err| ApiError::from_failure(&err))?;
    let (code, outcome) = match result {
        CancelResult::CancelledBeforeStart => (StatusCode::OK, "cancelled"),
        CancelResult::CancelSent => (StatusCode::ACCEPTED, "cancel_sent"),
    };
    Ok((code, Json(CancelAnswer { task_id, outcome })).into_response())
}

fn task_not_found(task_id: Uuid) -> ApiError {
    ApiError::not_found("task_not_found", format!("no task {task_id}"))
}
