//! `POST /v1/tasks/{task_id}/fork` (CONTRACT §10): a new task from recursion N of another,
//! answered like `POST /v1/tasks`. The work is [`crate::lifecycle::fork::fork_task`], shared with
//! `agentd fork`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::tasks::TaskAccepted;
use crate::gateway::AppState;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ErrorBody};
use crate::lifecycle::fork::{ForkError, fork_task};

/// Body of `POST /v1/tasks/{task_id}/fork`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The recursion the new task starts at (1 to the recursions the original ran): it
    /// starts from the state the original had after recursion `from_iteration - 1`.
    pub from_iteration: i32,
    /// The new task's input (default: the original's).
    #[serde(default)]
    pub input: Option<String>,
    /// The agent version the fork runs on (default: the original's, CONTRACT §11).
    #[serde(default)]
    pub agent_version: Option<i32>,
}

/// Forks a task: a new task that starts from the state the original had after recursion
/// `from_iteration - 1`, without running anything before it again.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/fork",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The original task")),
    request_body = ForkBody,
    responses(
        (status = 202, description = "The fork was published; follow events_url", body = TaskAccepted,
         headers(("location" = String, description = "The new task's URL"))),
        (status = 400, description = "The original's budget limits cost and its model has no price (no_price)", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task (task_not_found)", body = ErrorBody),
        (status = 409, description = "The task cannot be forked there (not_forkable)", body = ErrorBody),
        (status = 422, description = "from_iteration out of range", body = ErrorBody),
        (status = 500, description = "The database refused the fork (internal)", body = ErrorBody),
        (status = 503, description = "The database (database_unavailable) or the broker (broker_unavailable) is away", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn fork(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<ForkBody>,
) -> Result<Response, ApiError> {
    let forked = fork_task(
        state.pool(),
        state.publisher(),
        state.settings(),
        task_id,
        body.from_iteration,
        (body.input, body.agent_version),
    )
    .await
    .map_err(|err| ApiError::from_failure(&err))?;
    let new_id = match forked {
        Ok(new_id) => new_id,
        Err(ForkError::NotFound(_)) => {
            return Err(ApiError::not_found(
                "task_not_found",
                format!("no task {task_id}"),
            ));
        }
        Err(ForkError::BadIteration(problem)) => return Err(ApiError::invalid_body(problem)),
        Err(ForkError::Unforkable(problem)) => {
            return Err(ApiError::new(StatusCode::CONFLICT, "not_forkable", problem));
        }
        Err(unpriced @ ForkError::Unpriced(_)) => {
            return Err(super::budget::no_price(&unpriced.to_string()));
        }
    };
    Ok(super::tasks::accepted(new_id))
}
