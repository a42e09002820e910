//! `GET /v1/tasks` (CONTRACT v3 §14 "Listing"): tasks across agents, newest first, a page
//! at a time, filtered by status, agent and age. `next_cursor` is opaque and stable under
//! new tasks (a keyset, `core::listing`); a filter or cursor this server cannot read is
//! 400 `invalid_query` naming the parameter.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::core::listing::{self, ListingError, TaskCursor};
use crate::gateway::AppState;
use crate::gateway::access;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiQuery, ErrorBody};
use crate::gateway::openapi;
use crate::store::task_list::{self, TaskFilter};
use crate::store::tasks::TaskRow;

/// Query of `GET /v1/tasks`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only these statuses: pending, running, waiting, completed, failed, cancelled,
    /// rejected (comma-separated for several).
    pub status: Option<String>,
    /// Only this agent's tasks.
    pub agent_id: Option<Uuid>,
    /// Only tasks created within this age (30m, 2h, 7d, 1w) or since this RFC 3339 time.
    pub since: Option<String>,
    /// Tasks per page, 1 to 500 (default 50).
    pub limit: Option<i64>,
    /// The previous page's `next_cursor`, as it was.
    pub cursor: Option<String>,
}

/// Answer of `GET /v1/tasks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    /// Newest first.
    #[schema(value_type = Vec<openapi::Task>)]
    pub tasks: Vec<TaskRow>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Lists tasks across agents, newest first.
#[utoipa::path(
    get,
    path = "/v1/tasks",
    tag = "tasks",
    params(ListQuery),
    responses(
        (status = 200, body = TaskList),
        (status = 400, description = "An unknown status, an unreadable since, a limit out of range or a cursor this server did not give (invalid_query)", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_tasks(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<TaskList>, ApiError> {
    let (mut filter, limit) =
        filter(query).map_err(|err| ApiError::bad_request("invalid_query", err.to_string()))?;
    // The caller's tenant's only (CONTRACT v3 §15).
    filter.tenant_id = access::tenant_filter(&caller);
    let filter = &filter;
    let page = (state.readers())
        .read(|pool| async move { task_list::page(&pool, filter, limit).await })
        .await?;
    Ok(Json(TaskList {
        tasks: page.tasks,
        next_cursor: page.next.map(|cursor| cursor.encode()),
    }))
}

fn filter(query: ListQuery) -> Result<(TaskFilter, i64), ListingError> {
    let statuses = match query.status.as_deref() {
        Some(text) => listing::parse_statuses(text)?,
        None => Vec::new(),
    };
    let since = query
        .since
        .as_deref()
        .map(|text| listing::parse_since(text, Utc::now()))
        .transpose()?;
    let after = query
        .cursor
        .as_deref()
        .map(TaskCursor::decode)
        .transpose()?;
    let filter = TaskFilter {
        statuses,
        agent_id: query.agent_id,
        since,
        after,
        tenant_id: None,
    };
    Ok((filter, listing::check_limit(query.limit)?))
}
