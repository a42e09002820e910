//! `PATCH`, `DELETE`, `POST .../trigger` (with an optional Idempotency-Key) and
//! `GET .../fires` of `/v1/schedules/{id}`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::body::{FireList, FireView, ScheduleView, Triggered, UpdateSchedule};
use super::{ONE_FIRES, api_error};
use crate::gateway::AppState;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody};
use crate::scheduler::fire::Outlet;
use crate::scheduler::manage::{self, ManageError};
use crate::store::schedules::{self as rows, fires};

/// Default and largest page of fires.
const DEFAULT_FIRES: i64 = 50;
const MAX_FIRES: i64 = 500;

/// Query of `GET /v1/schedules/{schedule_id}/fires`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FiresQuery {
    /// Fires per page, 1 to 500 (default 50).
    pub limit: Option<i64>,
    /// Only fires before this time (the previous page's `next_before`).
    pub before: Option<DateTime<Utc>>,
}

/// Changes a schedule: any field; `paused` pauses or resumes it.
#[utoipa::path(
    patch,
    path = "/v1/schedules/{schedule_id}",
    tag = "schedules",
    params(("schedule_id" = Uuid, Path, description = "The schedule")),
    request_body = UpdateSchedule,
    responses(
        (status = 200, body = ScheduleView),
        (status = 400, description = "A field is wrong (invalid_schedule: the message names it), malformed JSON, or not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such schedule (schedule_not_found)", body = ErrorBody),
        (status = 422, description = "A field of the wrong type, or an unknown field", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn update_schedule(
    State(state): State<AppState>,
    ApiPath(schedule_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<UpdateSchedule>,
) -> Result<Json<ScheduleView>, ApiError> {
    let change = body.into_change()?;
    let row = manage::change(
        state.pool(),
        state.settings(),
        schedule_id,
        change,
        Utc::now(),
    )
    .await
    .map_err(api_error)?;
    let recent = fires::history(state.pool(), schedule_id, None, ONE_FIRES).await?;
    Ok(Json(ScheduleView::new(row, recent)))
}

/// Deletes a schedule: it fires no more. Its fires and tasks stay.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{schedule_id}",
    tag = "schedules",
    params(("schedule_id" = Uuid, Path, description = "The schedule")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such schedule (schedule_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_schedule(
    State(state): State<AppState>,
    ApiPath(schedule_id): ApiPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    manage::delete(state.pool(), schedule_id)
        .await
        .map_err(api_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a schedule's task now, whatever its pause, overlap and cap (decision `triggered`).
/// With an `Idempotency-Key`, the same key within a day of the trigger that first used it
/// answers that trigger's fire and task (200) and fires nothing.
#[utoipa::path(
    post,
    path = "/v1/schedules/{schedule_id}/trigger",
    tag = "schedules",
    params(
        ("schedule_id" = Uuid, Path, description = "The schedule"),
        ("Idempotency-Key" = Option<String>, Header, description = "Any text of 1 to 255 visible ASCII characters: a trigger of this schedule with the same key within the last day is answered again (200) instead of firing twice"),
    ),
    responses(
        (status = 200, description = "A trigger with this Idempotency-Key fired within the last day: its fire and task, nothing fired now", body = Triggered),
        (status = 202, description = "The task is published", body = Triggered),
        (status = 400, description = "Not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such schedule (schedule_not_found)", body = ErrorBody),
        (status = 422, description = "An Idempotency-Key that is blank, longer than 255 characters or not visible ASCII (invalid_parameter)", body = ErrorBody),
        (status = 503, description = "The database (database_unavailable) or the broker (broker_unavailable) is away", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn trigger_schedule(
    State(state): State<AppState>,
    ApiPath(schedule_id): ApiPath<Uuid>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let outlet = Outlet {
        publisher: state.publisher(),
        tasks_queue: &state.settings().amqp.tasks_queue,
    };
    let triggered = manage::trigger_keyed(state.pool(), outlet, schedule_id, Utc::now(), key)
        .await
        .map_err(api_error)?;
    let fire = triggered.fire;
    let task_id = fire
        .task_id
        .ok_or_else(|| ApiError::internal(&"a trigger without a task"))?;
    let task_url = format!("/v1/tasks/{task_id}");
    let answer = Triggered {
        schedule_id,
        fire_at: fire.fire_at,
        task_id,
        events_url: format!("{task_url}/events"),
        task_url,
    };
    let status = match triggered.repeated {
        true => StatusCode::OK,
        false => StatusCode::ACCEPTED,
    };
    Ok((status, Json(answer)).into_response())
}

/// Longest Idempotency-Key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`, if any: 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let refused = || {
        ApiError::invalid_parameter(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        ))
    };
    let key = value.to_str().map_err(|_| refused())?;
    let visible = key.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if key.trim().is_empty() || key.len() > MAX_IDEMPOTENCY_KEY || !visible {
        return Err(refused());
    }
    Ok(Some(key))
}

/// A schedule's fires, newest first (also those of a deleted schedule).
#[utoipa::path(
    get,
    path = "/v1/schedules/{schedule_id}/fires",
    tag = "schedules",
    params(("schedule_id" = Uuid, Path, description = "The schedule"), FiresQuery),
    responses(
        (status = 200, body = FireList),
        (status = 400, description = "Not a UUID, an unreadable query, or limit out of range (invalid_query)", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such schedule and no fires of it (schedule_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn schedule_fires(
    State(state): State<AppState>,
    ApiPath(schedule_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<FiresQuery>,
) -> Result<Json<FireList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_FIRES);
    if !(1..=MAX_FIRES).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit: {limit} is out of range (1 to {MAX_FIRES})"),
        ));
    }
    let pool = state.pool();
    let mut page = fires::history(pool, schedule_id, query.before, limit + 1).await?;
    if page.is_empty() && rows::get(pool, schedule_id).await?.is_none() {
        return Err(api_error(ManageError::UnknownSchedule(schedule_id)));
    }
    let wanted = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = page.len() > wanted;
    page.truncate(wanted);
    let next_before = more.then(|| page.last().map(|fire| fire.fire_at)).flatten();
    Ok(Json(FireList {
        fires: page.into_iter().map(FireView::from).collect(),
        next_before,
    }))
}
