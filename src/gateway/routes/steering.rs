//! Steering a task through the gateway (CONTRACT §2): `pause`, `resume` and `inject`
//! publish the control message any producer could (the workers act within a second), and
//! `GET /v1/tasks/{task_id}/state` reads what a person steering it needs: status and why it
//! waits, the plan, the current iteration, the budget with what is used, the guidance and
//! the tool calls waiting for a decision.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::amqp::control::send_control_signed;
use crate::contract::ControlMessage;
use crate::contract::control::{Inject, Pause, Resume};
use crate::core::budget::Budget;
use crate::gateway::AppState;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ErrorBody};
use crate::store::tasks::status;
use crate::store::{self};

/// Answer of the steering routes: the control message went out.
#[derive(Debug, Serialize, ToSchema)]
pub struct ControlSent {
    pub task_id: Uuid,
    /// The control message published (pause, resume, inject).
    pub sent: &'static str,
}

/// Body of `POST /v1/tasks/{task_id}/resume`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    /// A new budget that replaces the task's (for a task waiting for budget).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Budget>,
}

/// Body of `POST /v1/tasks/{task_id}/inject`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InjectBody {
    /// Guidance shown to the model from its next recursion on (`context.user_guidance`).
    pub text: String,
}

/// `GET /v1/tasks/{task_id}/state`.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct TaskState {
    pub task_id: Uuid,
    /// pending, running, waiting, completed, failed, cancelled or rejected.
    pub status: String,
    /// Why a waiting task waits (paused, budget, approval).
    pub wait_reason: Option<String>,
    /// Recursions run so far.
    pub iteration: i32,
    /// The plan steps (step_id, description, status).
    #[schema(value_type = Option<Vec<Object>>)]
    pub plan: Option<Value>,
    /// The budget in force, if any.
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Value>,
    /// What the task has spent: prompt_tokens, completion_tokens, cost_usd (null without a
    /// price), tool_calls.
    #[schema(value_type = Object)]
    pub used: Value,
    /// Guidance injected so far, oldest first.
    #[schema(value_type = Vec<String>)]
    pub user_guidance: Value,
    /// The tool calls waiting for a person's decision (CONTRACT §7), oldest first.
    #[sqlx(skip)]
    pub pending_approvals: Vec<crate::store::approvals::ApprovalRow>,
}

/// The task a steering request is about: 404 when there is none, 409 when it has ended.
async fn steerable(state: &AppState, task_id: Uuid) -> Result<store::tasks::TaskRow, ApiError> {
    let Some(task) = store::tasks::get(state.pool(), task_id).await? else {
        return Err(ApiError::not_found(
            "task_not_found",
            format!("no task {task_id}"),
        ));
    };
    if status::is_terminal(&task.status) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "task_finished",
            format!("task {task_id} has already ended ({})", task.status),
        ));
    }
    Ok(task)
}

async fn send(
    state: &AppState,
    task_id: Uuid,
    message: ControlMessage,
) -> Result<(StatusCode, Json<ControlSent>), ApiError> {
    steerable(state, task_id).await?;
    publish(state, task_id, message).await
}

async fn publish(
    state: &AppState,
    task_id: Uuid,
    message: ControlMessage,
) -> Result<(StatusCode, Json<ControlSent>), ApiError> {
    let kind = message.kind();
    let settings = state.settings();
    send_control_signed(
        state.publisher(),
        &settings.amqp,
        &settings.control,
        &message,
    )
    .await
    .map_err(|err| ApiError::broker_unavailable(&err))?;
    let sent = ControlSent {
        task_id,
        sent: kind,
    };
    Ok((StatusCode::ACCEPTED, Json(sent)))
}

/// Pauses a running task before its next LLM call (it becomes `waiting`, reason paused).
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/pause",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task")),
    responses(
        (status = 202, description = "The pause was sent", body = ControlSent),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
        (status = 409, description = "The task has already ended (task_finished)", body = ErrorBody),
        (status = 503, description = "The broker did not take it", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn pause_task(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
) -> Result<(StatusCode, Json<ControlSent>), ApiError> {
    send(&state, task_id, ControlMessage::Pause(Pause { task_id })).await
}

/// Resumes a task waiting after a pause or a budget breach, optionally with a new budget.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/resume",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task")),
    request_body(content = ResumeBody, description = "Optional: a new budget"),
    responses(
        (status = 202, description = "The resume was sent", body = ControlSent),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
        (status = 400, description = "A cost limit for a model without a price (no_price)", body = ErrorBody),
        (status = 409, description = "The task has already ended (task_finished)", body = ErrorBody),
        (status = 422, description = "Invalid budget", body = ErrorBody),
        (status = 503, description = "The broker did not take it", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resume_task(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<ControlSent>), ApiError> {
    // The body is optional: none (or empty) resumes with the budget the task has.
    let body: ResumeBody = match body.iter().all(u8::is_ascii_whitespace) {
        true => ResumeBody::default(),
        false => serde_json::from_slice(&body)
            .map_err(|err| ApiError::invalid_body(format!("invalid body: {err}")))?,
    };
    let budget = body.budget;
    if let Some(budget) = &budget {
        let value = serde_json::to_value(budget).unwrap_or_default();
        crate::contract::intake::parse_budget(Some(value)).map_err(ApiError::invalid_body)?;
    }
    let task = steerable(&state, task_id).await?;
    // The new budget replaces the task's: its cost limit needs the task's model priced.
    // The task's own version's model (CONTRACT §11), or the agent's for an unpinned task.
    let agent = match (task.agent_id, task.agent_version) {
        (Some(agent_id), Some(version)) => {
            store::agents::at_version(state.pool(), agent_id, version).await?
        }
        (Some(agent_id), None) => store::agents::get(state.pool(), agent_id).await?,
        (None, _) => None,
    };
    if let (Some(budget), Some(agent)) = (&budget, agent) {
        super::budget::check_price(state.settings(), budget, &agent, "the request's")?;
    }
    let resume = Resume { task_id, budget };
    publish(&state, task_id, ControlMessage::Resume(resume)).await
}

/// Gives a running or waiting task guidance for its next recursions.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/inject",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task")),
    request_body = InjectBody,
    responses(
        (status = 202, description = "The guidance was sent", body = ControlSent),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
        (status = 409, description = "The task has already ended (task_finished)", body = ErrorBody),
        (status = 413, description = "Text longer than control.max_inject_bytes (inject_too_large)", body = ErrorBody),
        (status = 422, description = "Blank text", body = ErrorBody),
        (status = 503, description = "The broker did not take it", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn inject_task(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<InjectBody>,
) -> Result<(StatusCode, Json<ControlSent>), ApiError> {
    let max_bytes = state.settings().control.max_inject_bytes;
    match Inject::refusal(&body.text, max_bytes) {
        None => {}
        Some(reason) if body.text.trim().is_empty() => return Err(ApiError::invalid_body(reason)),
        Some(reason) => {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "inject_too_large",
                reason,
            ));
        }
    }
    let inject = Inject {
        task_id,
        text: crate::core::storable::owned(body.text),
    };
    send(&state, task_id, ControlMessage::Inject(inject)).await
}

/// What a person steering the task needs to see.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}/state",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task")),
    responses(
        (status = 200, body = TaskState),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn task_state(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
) -> Result<Json<TaskState>, ApiError> {
    let row: Option<TaskState> = sqlx::query_as(
        "SELECT task_id, status, wait_reason, iterations AS iteration, plan, budget, \
                jsonb_build_object('prompt_tokens', prompt_tokens, \
                    'completion_tokens', completion_tokens, 'cost_usd', cost_usd, \
                    'tool_calls', tool_call_count) AS used, \
                COALESCE(checkpoint::jsonb -> 'guidance', '[]'::jsonb) \
                    || COALESCE(pending_guidance, '[]'::jsonb) AS user_guidance \
         FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_optional(state.pool())
    .await?;
    let Some(mut row) = row else {
        return Err(ApiError::not_found(
            "task_not_found",
            format!("no task {task_id}"),
        ));
    };
    if row.status == status::WAITING {
        row.pending_approvals =
            crate::store::approvals::pending(state.pool(), Some(task_id), 500).await?;
    }
    Ok(Json(row))
}
