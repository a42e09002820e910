//! `/v1/schedules` (CONTRACT v3 §14): create, list, read, change (`PATCH`: any field,
//! `paused` to pause or resume), delete and trigger schedules, and read a schedule's fires.
//! The rules are [`crate::scheduler::manage`]'s, the same as `agentd schedule`'s; a wrong
//! field is 400 `invalid_schedule` naming it (`cron: ...`, `timezone: ...`).

pub mod actions;
pub mod body;

pub use body::{CreateSchedule, ScheduleList, ScheduleView};

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::gateway::AppState;
use crate::gateway::access;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody};
use crate::scheduler::manage::{self, ManageError};
use crate::store::owners::{self, Owned};
use crate::store::schedules::{self as rows, fires};

/// Fires shown with each schedule of a list, and with one schedule.
const LIST_FIRES: i64 = 5;
const ONE_FIRES: i64 = 10;

/// Query of `GET /v1/schedules`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this agent's schedules.
    pub agent_id: Option<Uuid>,
}

/// Creates a schedule; its first fire is the first after now (none when `paused`).
#[utoipa::path(
    post,
    path = "/v1/schedules",
    tag = "schedules",
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "Created", body = ScheduleView,
         headers(("location" = String, description = "The schedule's URL"))),
        (status = 400, description = "A field is wrong (invalid_schedule: the message names it), or malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "Unknown agent (agent_not_found)", body = ErrorBody),
        (status = 422, description = "A field of the wrong type, or an unknown field", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_schedule(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(body): ApiJson<CreateSchedule>,
) -> Result<Response, ApiError> {
    let draft = body.into_draft()?;
    // Another tenant's agent is as unknown as one that does not exist (CONTRACT v3 §15).
    let agent = Owned::Agent(draft.agent_id);
    if let Some(owner) = owners::tenant_of(state.pool(), agent).await?
        && !access::sees(&caller, &owner)
    {
        return Err(api_error(ManageError::UnknownAgent(draft.agent_id)));
    }
    let row = manage::create(state.pool(), state.settings(), draft, Utc::now())
        .await
        .map_err(api_error)?;
    let location = format!("/v1/schedules/{}", row.schedule_id);
    let view = ScheduleView::new(row, Vec::new());
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(view),
    )
        .into_response())
}

/// Lists schedules, oldest first, each with its next fire and latest decisions.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    tag = "schedules",
    params(ListQuery),
    responses(
        (status = 200, body = ScheduleList),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_schedules(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ScheduleList>, ApiError> {
    let mut schedules = rows::list(state.pool(), query.agent_id).await?;
    // The caller's tenant's only (CONTRACT v3 §15).
    schedules.retain(|row| access::sees(&caller, &row.tenant_id));
    let ids: Vec<Uuid> = schedules.iter().map(|row| row.schedule_id).collect();
    let mut recent: HashMap<Uuid, Vec<fires::FireRow>> = HashMap::new();
    for fire in fires::recent(state.pool(), &ids, LIST_FIRES).await? {
        recent.entry(fire.schedule_id).or_default().push(fire);
    }
    let schedules = schedules
        .into_iter()
        .map(|row| {
            let own = recent.remove(&row.schedule_id).unwrap_or_default();
            ScheduleView::new(row, own)
        })
        .collect();
    Ok(Json(ScheduleList { schedules }))
}

/// Reads one schedule with its latest fires.
#[utoipa::path(
    get,
    path = "/v1/schedules/{schedule_id}",
    tag = "schedules",
    params(("schedule_id" = Uuid, Path, description = "The schedule")),
    responses(
        (status = 200, body = ScheduleView),
        (status = 400, description = "Not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such schedule (schedule_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_schedule(
    State(state): State<AppState>,
    ApiPath(schedule_id): ApiPath<Uuid>,
) -> Result<Json<ScheduleView>, ApiError> {
    let row = rows::get(state.pool(), schedule_id)
        .await?
        .ok_or_else(|| api_error(ManageError::UnknownSchedule(schedule_id)))?;
    let recent = fires::history(state.pool(), schedule_id, None, ONE_FIRES).await?;
    Ok(Json(ScheduleView::new(row, recent)))
}

/// A refusal or failure of [`manage`] as the gateway answers it.
fn api_error(err: ManageError) -> ApiError {
    match err {
        ManageError::Field(field) => ApiError::bad_request("invalid_schedule", field.to_string()),
        ManageError::UnknownAgent(agent_id) => {
            ApiError::not_found("agent_not_found", format!("no agent {agent_id}"))
        }
        ManageError::UnknownSchedule(schedule_id) => {
            ApiError::not_found("schedule_not_found", format!("no schedule {schedule_id}"))
        }
        ManageError::Failed(err) => ApiError::from_failure(&err),
    }
}
