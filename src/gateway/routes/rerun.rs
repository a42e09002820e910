//! `POST /v1/tasks/{task_id}/rerun` (CONTRACT v3 §13): one rerun of an ended task, answered
//! like `POST /v1/tasks`. Scope `submit`; another tenant's task is 404 (`gateway::access`).
//! The work is [`crate::lifecycle::rerun::publish_rerun`], shared with `agentd rerun`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::tasks::TaskAccepted;
use crate::core::rerun::{RerunMode, RerunSpec};
use crate::gateway::AppState;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ErrorBody};
use crate::lifecycle::rerun::{RerunAs, RerunError, publish_rerun};

/// Body of `POST /v1/tasks/{task_id}/rerun` (every field optional: `{}` reruns from the
/// record on the source's version).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RerunBody {
    /// `recorded` (default: the source's replies, no provider call) or `live`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub llm: Option<RerunMode>,
    /// `recorded` (default: the source's results; side-effecting tools never run) or
    /// `live`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub tools: Option<RerunMode>,
    /// The agent version the rerun runs on (default: the source's).
    #[serde(default)]
    pub agent_version: Option<i32>,
    /// The channel whose version the rerun runs on (instead of `agent_version`).
    #[serde(default)]
    pub channel: Option<String>,
}

/// Reruns an ended task from its record (CONTRACT v3 §13).
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/rerun",
    tag = "tasks",
    params(("task_id" = Uuid, Path, description = "The ended task to rerun")),
    request_body = RerunBody,
    responses(
        (status = 202, description = "The rerun was published; follow events_url", body = TaskAccepted,
         headers(("location" = String, description = "The new task's URL"))),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "The token lacks the submit scope (missing_scope)", body = ErrorBody),
        (status = 404, description = "No such task, or another tenant's (task_not_found)", body = ErrorBody),
        (status = 409, description = "The task has not ended, or was never read (not_rerunnable)", body = ErrorBody),
        (status = 422, description = "A bad mode, or both agent_version and channel", body = ErrorBody),
        (status = 503, description = "The database (database_unavailable) or the broker (broker_unavailable) is away", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn rerun_task(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(task_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<RerunBody>,
) -> Result<Response, ApiError> {
    if body.agent_version.is_some() && body.channel.is_some() {
        return Err(ApiError::invalid_body(
            "name agent_version or channel, not both".to_owned(),
        ));
    }
    if body.agent_version.is_some_and(|version| version < 1) {
        return Err(ApiError::invalid_body(
            "agent_version must be at least 1".to_owned(),
        ));
    }
    let rerun = RerunSpec {
        source_task_id: task_id,
        llm: body.llm.unwrap_or_default(),
        tools: body.tools.unwrap_or_default(),
    };
    let asked = RerunAs {
        agent_version: body.agent_version,
        channel: body.channel,
        tenant_id: Some(caller.tenant_id),
    };
    let queue = &state.settings().amqp.tasks_queue;
    let published = publish_rerun(state.pool(), state.publisher(), queue, rerun, asked)
        .await
        .map_err(|err| ApiError::from_failure(&err))?;
    match published {
        Ok(new_id) => Ok(super::tasks::accepted(new_id)),
        Err(RerunError::NotFound(_)) => Err(ApiError::not_found(
            "task_not_found",
            format!("no task {task_id}"),
        )),
        Err(problem) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_rerunnable",
            problem.to_string(),
        )),
    }
}
