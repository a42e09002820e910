//! Unknown outcomes through the gateway (CONTRACT §14): `POST
//! /v1/tasks/{id}/tool_calls/{tool_call_id}/resolve` records a person's resolution of a
//! held call in PostgreSQL at once (the first resolution wins, a later one gets 409 with
//! the outcome that won), and `GET /v1/tool_calls?state=unknown` lists the held calls.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::core::unknown::{Resolution, ResolveOutcome};
use crate::gateway::AppState;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody};
use crate::lifecycle::resolutions::{Outcome, resolve_verified};
use crate::lifecycle::unheld::Sink;
use crate::store::operator_actions::{self, HeldCall};

/// Body of `POST /v1/tasks/{task_id}/tool_calls/{tool_call_id}/resolve`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// succeeded, failed, retry or skip.
    #[schema(value_type = String)]
    pub outcome: ResolveOutcome,
    /// succeeded: the result the call had (the model gets it).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// failed: the call's error (the model gets it).
    #[serde(default)]
    pub error: Option<String>,
    /// Why (required).
    pub reason: String,
    /// Who decided.
    #[serde(default)]
    pub by: Option<String>,
}

/// Answer of a recorded resolution.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResolutionRecorded {
    pub task_id: Uuid,
    pub tool_call_id: String,
    pub outcome: String,
    /// The `operator_actions` row.
    pub action_id: Uuid,
    /// No other held call: the task was enqueued again and resumes now.
    pub resumed: bool,
}

/// Query of `GET /v1/tool_calls`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ToolCallQuery {
    /// `unknown` (the default and only state listed: held calls waiting for a person).
    pub state: Option<String>,
    /// Only this task's calls.
    pub task_id: Option<Uuid>,
    /// At most this many, 1 to 500 (default 100).
    pub limit: Option<i64>,
}

/// Answer of `GET /v1/tool_calls`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCallList {
    /// Oldest first.
    pub tool_calls: Vec<HeldCall>,
}

/// Resolves a held call of a waiting task.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/tool_calls/{tool_call_id}/resolve",
    tag = "operations",
    params(
        ("task_id" = Uuid, Path, description = "The task"),
        ("tool_call_id" = String, Path, description = "The held call"),
    ),
    request_body = ResolveBody,
    responses(
        (status = 200, description = "The resolution is the call's", body = ResolutionRecorded),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task or held call (tool_call_not_found)", body = ErrorBody),
        (status = 409, description = "Resolved already (already_resolved) or the task does not wait (task_not_waiting)", body = ErrorBody),
        (status = 422, description = "A resolution without a reason, or with fields its outcome does not take", body = ErrorBody),
        (status = 500, description = "The database refused the resolution (internal)", body = ErrorBody),
        (status = 503, description = "The database (database_unavailable) or the broker (broker_unavailable) is away", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resolve_call(
    State(state): State<AppState>,
    ApiPath((task_id, tool_call_id)): ApiPath<(Uuid, String)>,
    caller: Option<axum::Extension<Caller>>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<ResolutionRecorded>, ApiError> {
    let resolution = Resolution {
        outcome: body.outcome,
        result: body.result,
        error: body.error,
        reason: body.reason,
        by: body.by,
    };
    resolution.validate().map_err(ApiError::invalid_body)?;
    let amqp = &state.settings().amqp;
    let sink = Sink {
        pool: state.pool(),
        publisher: state.publisher(),
        exchange: &amqp.events_exchange,
    };
    // Verified: the token's caller (CONTRACT v3 §15); without tokens nothing is verified.
    let verified = caller.and_then(|axum::Extension(caller)| caller.verified_by);
    let queue = &amqp.tasks_queue;
    let outcome = resolve_verified(
        sink,
        queue,
        task_id,
        &tool_call_id,
        &resolution,
        verified.as_deref(),
    )
    .await
    .map_err(|err| ApiError::from_failure(&err))?;
    match outcome {
        Outcome::Recorded { action_id, resumed } => Ok(Json(ResolutionRecorded {
            task_id,
            tool_call_id,
            outcome: resolution.outcome.as_str().to_owned(),
            action_id,
            resumed,
        })),
        Outcome::AlreadyResolved(earlier) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_resolved",
            format!("tool call {tool_call_id} was resolved already: {earlier}"),
        )),
        Outcome::NotWaiting(status) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "task_not_waiting",
            format!("task {task_id} does not wait for a resolution (it is {status})"),
        )),
        Outcome::NotFound => Err(ApiError::not_found(
            "tool_call_not_found",
            format!("no held call {tool_call_id} of task {task_id}"),
        )),
    }
}

/// Lists the calls whose outcome is unknown and that wait for a person.
#[utoipa::path(
    get,
    path = "/v1/tool_calls",
    tag = "operations",
    params(ToolCallQuery),
    responses(
        (status = 200, body = ToolCallList),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 422, description = "A state other than unknown, or a limit out of range", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_tool_calls(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<ToolCallQuery>,
) -> Result<Json<ToolCallList>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::invalid_body("limit must be between 1 and 500"));
    }
    match query.state.as_deref().unwrap_or("unknown") {
        "unknown" => {}
        other => {
            return Err(ApiError::invalid_body(format!(
                "state {:?} is not listed here (unknown)",
                crate::core::limits::trim_text(other, 40)
            )));
        }
    }
    // The caller's tenant's only (CONTRACT v3 §15).
    let tenant = caller.tenant_id.as_str();
    let tool_calls = operator_actions::held_in(state.pool(), query.task_id, tenant, limit).await?;
    Ok(Json(ToolCallList { tool_calls }))
}
