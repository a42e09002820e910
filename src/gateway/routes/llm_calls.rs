//! `GET /v1/tasks/{task_id}/llm_calls` (CONTRACT v3 §12): every LLM attempt of a task with
//! the exact request it sent and the response it got, as the view `llm_call_bodies` holds
//! them (null unless `llm.record = full`), and the request's `request_sha256` and
//! `request_key`. `?iteration=N` narrows it to one recursion.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::gateway::AppState;
use crate::gateway::errors::{ApiError, ApiPath, ApiQuery, ErrorBody};
use crate::store;
use crate::store::llm_record::RecordedCall;

/// Which attempts to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LlmCallsQuery {
    /// Only the attempts of this recursion.
    pub iteration: Option<i32>,
}

/// A task's LLM attempts, in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct LlmCallList {
    pub task_id: Uuid,
    pub llm_calls: Vec<RecordedCall>,
}

/// Lists a task's LLM attempts with their requests and responses.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}/llm_calls",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The task"), LlmCallsQuery),
    responses(
        (status = 200, body = LlmCallList),
        (status = 400, description = "Not a UUID, or an unreadable query", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn task_llm_calls(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<LlmCallsQuery>,
) -> Result<Json<LlmCallList>, ApiError> {
    if store::tasks::get(state.pool(), task_id).await?.is_none() {
        return Err(ApiError::not_found(
            "task_not_found",
            format!("no task {task_id}"),
        ));
    }
    let llm_calls = store::llm_record::calls(state.pool(), task_id, query.iteration).await?;
    Ok(Json(LlmCallList { task_id, llm_calls }))
}
