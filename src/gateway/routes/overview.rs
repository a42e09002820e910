//! `GET /v1/agents/{agent_id}/overview?hours=24`: what the page draws for an agent, from
//! SQL: its tasks by status per hour, and over the whole window the duration percentiles
//! (p50, p95 of ended tasks), tokens and cost.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::gateway::AppState;
use crate::gateway::errors::{ApiError, ApiPath, ApiQuery, ErrorBody};

/// Query of the overview.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OverviewQuery {
    /// The window, in hours back from now: 1 to 720 (default 24).
    pub hours: Option<i64>,
}

/// One hour of an agent's tasks (by the hour they were created).
#[derive(Debug, Serialize, ToSchema)]
pub struct HourBucket {
    pub start: DateTime<Utc>,
    /// Tasks by status (pending, running, waiting, completed, failed, cancelled, rejected).
    pub by_status: BTreeMap<String, i64>,
}

/// Answer of `GET /v1/agents/{agent_id}/overview`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Overview {
    pub agent_id: Uuid,
    pub since: DateTime<Utc>,
    /// Hours with tasks, oldest first.
    pub hours: Vec<HourBucket>,
    pub tasks: i64,
    /// The whole window's tasks by status.
    pub by_status: BTreeMap<String, i64>,
    /// Duration from start to end of the tasks that ended, in milliseconds.
    pub duration_ms_p50: Option<f64>,
    pub duration_ms_p95: Option<f64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// USD; null when a task's model has no price.
    pub cost_usd: Option<f64>,
}

/// An agent's tasks over time: by status per hour, duration percentiles, tokens and cost.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/overview",
    tag = "agents",
    params(("agent_id" = Uuid, Path, description = "The agent"), OverviewQuery),
    responses(
        (status = 200, body = Overview),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent (agent_not_found)", body = ErrorBody),
        (status = 422, description = "hours out of range", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn agent_overview(
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<OverviewQuery>,
) -> Result<Json<Overview>, ApiError> {
    let hours = query.hours.unwrap_or(24);
    if !(1..=720).contains(&hours) {
        return Err(ApiError::invalid_body("hours must be between 1 and 720"));
    }
    let pool = state.pool();
    if crate::store::agents::get(pool, agent_id).await?.is_none() {
        return Err(ApiError::not_found(
            "agent_not_found",
            format!("no agent {agent_id}"),
        ));
    }
    let since = Utc::now() - Duration::hours(hours);
    // The two scans of the agent's tasks read from the read replica (store::readers).
    let (rows, totals) = (state.readers())
        .read(|pool| async move { scans(&pool, agent_id, since).await })
        .await?;
    let (tasks, p50, p95, prompt, completion, cost, unpriced) = totals;
    let mut by_status = BTreeMap::new();
    let mut buckets: Vec<HourBucket> = Vec::new();
    for (start, status, count) in rows {
        *by_status.entry(status.clone()).or_insert(0) += count;
        match buckets.last_mut() {
            Some(bucket) if bucket.start == start => {
                bucket.by_status.insert(status, count);
            }
            _ => buckets.push(HourBucket {
                start,
                by_status: BTreeMap::from([(status, count)]),
            }),
        }
    }
    Ok(Json(Overview {
        agent_id,
        since,
        hours: buckets,
        tasks,
        by_status,
        duration_ms_p50: p50,
        duration_ms_p95: p95,
        prompt_tokens: prompt.unwrap_or(0),
        completion_tokens: completion.unwrap_or(0),
        cost_usd: if unpriced {
            None
        } else {
            Some(cost.unwrap_or(0.0))
        },
    }))
}

/// Over the window: tasks, duration p50 and p95 (ms), prompt and completion tokens, cost,
/// and whether a task had no price.
type Totals = (
    i64,
    Option<f64>,
    Option<f64>,
    Option<i64>,
    Option<i64>,
    Option<f64>,
    bool,
);

/// Tasks per hour and status, and the totals, of the agent's tasks created since `since`.
async fn scans(
    pool: &PgPool,
    agent_id: Uuid,
    since: DateTime<Utc>,
) -> sqlx::Result<(Vec<(DateTime<Utc>, String, i64)>, Totals)> {
    let rows: Vec<(DateTime<Utc>, String, i64)> = sqlx::query_as(
        "SELECT date_trunc('hour', created_at), status, count(*) FROM tasks \
         WHERE agent_id = $1 AND created_at >= $2 GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(agent_id)
    .bind(since)
    .fetch_all(pool)
    .await?;
    let totals: Totals = sqlx::query_as(
        "SELECT count(*), \
                percentile_cont(0.5) WITHIN GROUP (ORDER BY \
                    extract(epoch FROM finished_at - started_at) * 1000) \
                    FILTER (WHERE finished_at IS NOT NULL AND started_at IS NOT NULL), \
                percentile_cont(0.95) WITHIN GROUP (ORDER BY \
                    extract(epoch FROM finished_at - started_at) * 1000) \
                    FILTER (WHERE finished_at IS NOT NULL AND started_at IS NOT NULL), \
                sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint, sum(cost_usd), \
                COALESCE(bool_or(cost_usd IS NULL), false) \
         FROM tasks WHERE agent_id = $1 AND created_at >= $2",
    )
    .bind(agent_id)
    .bind(since)
    .fetch_one(pool)
    .await?;
    Ok((rows, totals))
}
