//! Approvals through the gateway (CONTRACT §7): `POST /v1/tasks/{id}/approvals/{tool_call_id}`
//! records a decision in PostgreSQL at once (the first decision of a call wins, a later one
//! gets 409 with the decision that won), and `GET /v1/approvals?status=pending|decided`
//! lists requests for the page and for people deciding elsewhere.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::core::approval::{Decision, DecisionKind};
use crate::gateway::AppState;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody};
use crate::lifecycle::approvals::{Decided, decide_verified};
use crate::lifecycle::unheld::Sink;
use crate::store::approvals::{self, ApprovalRow};

/// Body of `POST /v1/tasks/{task_id}/approvals/{tool_call_id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// approve, edit, reject or respond.
    #[schema(value_type = String)]
    pub decision: DecisionKind,
    /// edit: the arguments the call runs with (a JSON object).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// reject: why (the model sees it).
    #[serde(default)]
    pub reason: Option<String>,
    /// respond: the result the model gets instead of running the tool.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Who decided (shown on the page and in `approval.decided`).
    #[serde(default)]
    pub by: Option<String>,
}

/// Answer of a recorded decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionRecorded {
    pub task_id: Uuid,
    pub tool_call_id: String,
    pub decision: String,
    /// The task had no other request waiting: it was enqueued again and resumes now.
    pub resumed: bool,
}

/// Query of `GET /v1/approvals`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalQuery {
    /// `pending` (default: requests of waiting tasks without a decision) or `decided`.
    pub status: Option<String>,
    /// Only this task's requests.
    pub task_id: Option<Uuid>,
    /// At most this many, 1 to 500 (default 100).
    pub limit: Option<i64>,
}

/// Answer of `GET /v1/approvals`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalList {
    /// Pending: oldest request first; decided: newest decision first.
    pub approvals: Vec<ApprovalRow>,
}

/// Decides a gated tool call of a waiting task.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/approvals/{tool_call_id}",
    tag = "approvals",
    params(
        ("task_id" = Uuid, Path, description = "The task"),
        ("tool_call_id" = String, Path, description = "The gated call"),
    ),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "The decision is the call's", body = DecisionRecorded),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task or request (approval_not_found)", body = ErrorBody),
        (status = 409, description = "Decided already (already_decided) or the task does not wait (task_not_waiting)", body = ErrorBody),
        (status = 422, description = "A decision without what it needs", body = ErrorBody),
        (status = 500, description = "The database refused the decision (internal)", body = ErrorBody),
        (status = 503, description = "The database (database_unavailable) or the broker (broker_unavailable) is away", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn decide_call(
    State(state): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    ApiPath((task_id, tool_call_id)): ApiPath<(Uuid, String)>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> Result<Json<DecisionRecorded>, ApiError> {
    let decision = Decision {
        kind: body.decision,
        arguments: body.arguments,
        result: body.result,
        reason: body.reason,
        by: body.by,
    };
    decision.validate().map_err(ApiError::invalid_body)?;
    let amqp = &state.settings().amqp;
    let sink = Sink {
        pool: state.pool(),
        publisher: state.publisher(),
        exchange: &amqp.events_exchange,
    };
    // `decide` makes what the person typed storable; a failure is blamed on what failed.
    // Verified: the token's caller (CONTRACT v3 §15); without tokens nothing is verified.
    let verified = caller.and_then(|axum::Extension(caller)| caller.verified_by);
    let queue = &amqp.tasks_queue;
    let decided = decide_verified(
        sink,
        queue,
        task_id,
        &tool_call_id,
        &decision,
        verified.as_deref(),
    )
    .await
    .map_err(|err| ApiError::from_failure(&err))?;
    match decided {
        Decided::Recorded { resumed } => Ok(Json(DecisionRecorded {
            task_id,
            tool_call_id,
            decision: decision.kind.as_str().to_owned(),
            resumed,
        })),
        Decided::AlreadyDecided(earlier) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_decided",
            format!("tool call {tool_call_id} was decided already: {earlier}"),
        )),
        Decided::NotWaiting(status) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "task_not_waiting",
            format!("task {task_id} does not wait for a decision (it is {status})"),
        )),
        Decided::NotFound => Err(ApiError::not_found(
            "approval_not_found",
            format!("no approval request for tool call {tool_call_id} of task {task_id}"),
        )),
    }
}

/// Lists approval requests: those waiting for a decision, or those decided.
#[utoipa::path(
    get,
    path = "/v1/approvals",
    tag = "approvals",
    params(ApprovalQuery),
    responses(
        (status = 200, body = ApprovalList),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 422, description = "Unknown status or limit out of range", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_approvals(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<ApprovalQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::invalid_body("limit must be between 1 and 500"));
    }
    let tenant = caller.tenant_id.as_str();
    let approvals = match query.status.as_deref().unwrap_or("pending") {
        // The caller's tenant's only (CONTRACT v3 §15).
        "pending" => approvals::pending_in(state.pool(), query.task_id, tenant, limit).await?,
        "decided" => approvals::decided_in(state.pool(), query.task_id, tenant, limit).await?,
        other => {
            return Err(ApiError::invalid_body(format!(
                "unknown status {other:?} (pending or decided)"
            )));
        }
    };
    Ok(Json(ApprovalList { approvals }))
}
