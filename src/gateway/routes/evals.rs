//! `/v1/evals` (CONTRACT v3 §13): start an evaluation run from a structured selection (the
//! gateway never takes SQL), read a run with its items, cancel a running one. The rules are
//! [`crate::lifecycle::evals`]'s, the same as `agentd eval`'s. Both need the `operate`
//! scope to write and `read` to read; another tenant's agent or run is 404, like a missing
//! one. The reruns are published after the answer, at the run's `rate`; a gateway that
//! stops meanwhile leaves the rest `pending` for `agentd eval resume`.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::core::eval::{self, Mode, Tally};
use crate::gateway::AppState;
use crate::gateway::access;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ErrorBody};
use crate::lifecycle::evals::{self, EvalError, RunSpec, Selection, Target};
use crate::store::evals::select::Fields;
use crate::store::evals::{self as rows, ItemRow, RunRow};

/// Tasks one run may take at most, and when `limit` is left out.
const MAX_LIMIT: i64 = 100_000;
const DEFAULT_LIMIT: i64 = 1000;
/// Rerun messages per second when `rate` is left out.
const DEFAULT_RATE: f64 = 10.0;

/// One ended status, or several.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StatusSelection {
    One(String),
    Many(Vec<String>),
}

/// Body of `POST /v1/evals`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEval {
    /// The agent whose ended tasks are rerun.
    pub agent_id: Uuid,
    /// Rerun on this version (not with `channel`; neither: each source's version).
    #[serde(default)]
    pub version: Option<i32>,
    /// Rerun on the version this channel serves.
    #[serde(default)]
    pub channel: Option<String>,
    /// Only these tasks (still only the agent's ended ones).
    #[serde(default)]
    pub task_ids: Option<Vec<Uuid>>,
    /// Only tasks that ended so: completed, failed or cancelled (one or a list).
    #[serde(default)]
    pub status: Option<StatusSelection>,
    /// Only tasks created at or after this time (RFC 3339).
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    /// At most this many tasks, oldest first (default 1000, at most 100000).
    #[serde(default)]
    pub limit: Option<i64>,
    /// Where the reruns' model replies come from: live (default) or recorded.
    #[serde(default)]
    pub llm: Option<String>,
    /// Where the reruns' tool results come from: recorded (default) or live.
    #[serde(default)]
    pub tools: Option<String>,
    /// Rerun messages per second (default 10).
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(default)]
    pub name: Option<String>,
}

/// An item of a run: a source task, its rerun and how they compare (null until it ends).
#[derive(Debug, Serialize, ToSchema)]
pub struct EvalItem {
    pub source_task_id: Uuid,
    pub rerun_task_id: Uuid,
    /// pending, published, then the rerun's end: completed, failed, cancelled, rejected.
    pub status: String,
    pub answer_equal: Option<bool>,
    pub actions_equal: Option<bool>,
    pub first_divergence_iteration: Option<i32>,
    pub iterations_delta: Option<i32>,
    pub tokens_delta: Option<i64>,
    pub cost_delta_usd: Option<f64>,
    pub passed: Option<bool>,
    pub published_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<ItemRow> for EvalItem {
    fn from(row: ItemRow) -> Self {
        Self {
            source_task_id: row.source_task_id,
            rerun_task_id: row.rerun_task_id,
            status: row.status,
            answer_equal: row.answer_equal,
            actions_equal: row.actions_equal,
            first_divergence_iteration: row.first_divergence_iteration,
            iterations_delta: row.iterations_delta,
            tokens_delta: row.tokens_delta,
            cost_delta_usd: row.cost_delta_usd,
            passed: row.passed,
            published_at: row.published_at,
            finished_at: row.finished_at,
        }
    }
}

/// A run with its items and their tally.
#[derive(Debug, Serialize, ToSchema)]
pub struct EvalRun {
    pub eval_run_id: Uuid,
    pub name: Option<String>,
    pub agent_id: Uuid,
    pub agent_version: Option<i32>,
    pub channel: Option<String>,
    /// What selected the tasks.
    #[schema(value_type = Object)]
    pub selector: Value,
    pub llm_mode: String,
    pub tools_mode: String,
    pub rate: f64,
    /// running, completed or cancelled.
    pub status: String,
    pub tenant_id: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Items whose rerun ended.
    pub ended: u64,
    pub passed: u64,
    /// Passed items over all items.
    pub pass_ratio: f64,
    pub items: Vec<EvalItem>,
}

impl EvalRun {
    fn new(run: RunRow, items: Vec<ItemRow>) -> Self {
        let tally = Tally {
            items: items.len() as u64,
            finished: items
                .iter()
                .filter(|i| eval::FINAL.contains(&i.status.as_str()))
                .count() as u64,
            passed: items.iter().filter(|i| i.passed == Some(true)).count() as u64,
        };
        Self {
            eval_run_id: run.eval_run_id,
            name: run.name,
            agent_id: run.agent_id,
            agent_version: run.agent_version,
            channel: run.channel,
            selector: run.selector,
            llm_mode: run.llm_mode,
            tools_mode: run.tools_mode,
            rate: run.rate,
            status: run.status,
            tenant_id: run.tenant_id,
            created_at: run.created_at,
            finished_at: run.finished_at,
            ended: tally.finished,
            passed: tally.passed,
            pass_ratio: tally.pass_ratio(),
            items: items.into_iter().map(EvalItem::from).collect(),
        }
    }
}

impl CreateEval {
    /// The run this body asks for; a wrong field is 400 `invalid_eval` naming it.
    fn into_spec(self) -> Result<RunSpec, ApiError> {
        let invalid = |message: String| ApiError::bad_request("invalid_eval", message);
        let target = match (self.version, self.channel) {
            (Some(_), Some(_)) => return Err(invalid("give version or channel, not both".into())),
            (Some(version), None) if version >= 1 => Target::Version(version),
            (Some(version), None) => {
                return Err(invalid(format!("version: {version} is not >= 1")));
            }
            (None, Some(channel)) => Target::Channel(crate::core::storable::owned(channel)),
            (None, None) => Target::SourceVersion,
        };
        let statuses = match self.status {
            None => None,
            Some(StatusSelection::One(status)) => Some(vec![status]),
            Some(StatusSelection::Many(statuses)) => Some(statuses),
        };
        for status in statuses.iter().flatten() {
            if !eval::SELECTABLE.contains(&status.as_str()) {
                return Err(invalid(format!(
                    "status: {} is not one of completed, failed, cancelled",
                    crate::core::bounded::quote(status)
                )));
            }
        }
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(invalid(format!(
                "limit: {limit} is not from 1 to {MAX_LIMIT}"
            )));
        }
        if self
            .task_ids
            .as_ref()
            .is_some_and(|ids| ids.len() as i64 > MAX_LIMIT)
        {
            return Err(invalid(format!("task_ids: more than {MAX_LIMIT}")));
        }
        let mode = |field: &str, value: Option<String>, default: Mode| match value {
            None => Ok(default),
            Some(text) => Mode::parse(&text).map_err(|err| invalid(format!("{field}: {err}"))),
        };
        let llm = mode("llm", self.llm, Mode::Live)?;
        let tools = mode("tools", self.tools, Mode::Recorded)?;
        let rate = self.rate.unwrap_or(DEFAULT_RATE);
        if !(rate.is_finite() && rate > 0.0) {
            return Err(invalid(format!("rate: {rate} is not a positive number")));
        }
        Ok(RunSpec {
            agent_id: self.agent_id,
            target,
            selection: Selection::Fields(Fields {
                task_ids: self.task_ids,
                statuses,
                since: self.since,
                limit,
            }),
            llm,
            tools,
            rate,
            name: self.name.map(crate::core::storable::owned),
        })
    }
}

/// Starts an evaluation run: selects the agent's ended tasks, makes the run with one
/// `pending` item each, answers, then publishes the reruns at `rate` per second.
#[utoipa::path(
    post,
    path = "/v1/evals",
    tag = "evals",
    request_body = CreateEval,
    responses(
        (status = 201, description = "Created", body = EvalRun,
         headers(("location" = String, description = "The run's URL"))),
        (status = 400, description = "A field is wrong (invalid_eval), or nothing matches the selection (nothing_selected)", body = ErrorBody),
        (status = 404, description = "Unknown agent (agent_not_found), version (version_not_found) or channel (channel_not_found)", body = ErrorBody),
        (status = 503, description = "The database or the broker is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_eval(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(body): ApiJson<CreateEval>,
) -> Result<Response, ApiError> {
    let spec = body.into_spec()?;
    let visible = |owner: &str| access::sees(&caller, owner);
    let run = evals::create(state.pool(), state.readers(), &spec, visible)
        .await
        .map_err(api_error)?;
    state.readers().note_write().await;
    let items = rows::items(state.pool(), run.eval_run_id).await?;
    let publishing = (state.clone(), run.clone());
    tokio::spawn(async move {
        let (state, run) = publishing;
        let queue = &state.settings().amqp.tasks_queue;
        if let Err(err) =
            evals::publish(state.pool(), state.publisher(), queue, &run, run.rate).await
        {
            tracing::warn!(eval_run_id = %run.eval_run_id, error = %format!("{err:#}"),
                "publishing an evaluation's reruns stopped; `agentd eval resume` sends the rest");
        }
    });
    let location = format!("/v1/evals/{}", run.eval_run_id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(EvalRun::new(run, items)),
    )
        .into_response())
}

/// Reads a run with its items; items whose rerun ended are filled first.
#[utoipa::path(
    get,
    path = "/v1/evals/{eval_run_id}",
    tag = "evals",
    params(("eval_run_id" = Uuid, Path, description = "The evaluation run")),
    responses(
        (status = 200, body = EvalRun),
        (status = 404, description = "No such run (eval_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_eval(
    State(state): State<AppState>,
    ApiPath(eval_run_id): ApiPath<Uuid>,
) -> Result<Json<EvalRun>, ApiError> {
    let not_found =
        || ApiError::not_found("eval_not_found", format!("no evaluation run {eval_run_id}"));
    if rows::get(state.pool(), eval_run_id).await?.is_none() {
        return Err(not_found());
    }
    settled(&state, eval_run_id).await
}

/// The run with its items, those whose rerun ended filled first.
async fn settled(state: &AppState, eval_run_id: Uuid) -> Result<Json<EvalRun>, ApiError> {
    rows::settle::settle(state.pool(), Some(eval_run_id)).await?;
    let run = rows::get(state.pool(), eval_run_id).await?.ok_or_else(|| {
        ApiError::not_found("eval_not_found", format!("no evaluation run {eval_run_id}"))
    })?;
    let items = rows::items(state.pool(), eval_run_id).await?;
    Ok(Json(EvalRun::new(run, items)))
}

/// Cancels a running run: its reruns not sent yet are never sent, those in flight are
/// cancelled like any task (their items are filled as they end).
#[utoipa::path(
    post,
    path = "/v1/evals/{eval_run_id}/cancel",
    tag = "evals",
    params(("eval_run_id" = Uuid, Path, description = "The evaluation run")),
    responses(
        (status = 200, description = "The run, now cancelled", body = EvalRun),
        (status = 404, description = "No such run (eval_not_found)", body = ErrorBody),
        (status = 409, description = "The run is not running: completed or cancelled already (eval_not_running)", body = ErrorBody),
        (status = 503, description = "The database or the broker is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_eval(
    State(state): State<AppState>,
    ApiPath(eval_run_id): ApiPath<Uuid>,
) -> Result<Json<EvalRun>, ApiError> {
    let not_found =
        || ApiError::not_found("eval_not_found", format!("no evaluation run {eval_run_id}"));
    let Some(run) = rows::get(state.pool(), eval_run_id).await? else {
        return Err(not_found());
    };
    let settings = state.settings();
    let cancelled = evals::cancel(state.pool(), state.publisher(), settings, eval_run_id)
        .await
        .map_err(|err| ApiError::from_failure(&err))?;
    if cancelled.is_none() {
        let problem = format!("evaluation run {eval_run_id} is {} already", run.status);
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "eval_not_running",
            problem,
        ));
    }
    state.readers().note_write().await;
    settled(&state, eval_run_id).await
}

/// A refusal or failure of [`evals::create`] as the gateway answers it.
fn api_error(err: EvalError) -> ApiError {
    match err {
        EvalError::UnknownAgent(agent_id) => {
            ApiError::not_found("agent_not_found", format!("no agent {agent_id}"))
        }
        EvalError::UnknownVersion(..) => ApiError::not_found("version_not_found", err.to_string()),
        EvalError::UnknownChannel(..) => ApiError::not_found("channel_not_found", err.to_string()),
        EvalError::NothingSelected(_) => ApiError::bad_request("nothing_selected", err.to_string()),
        EvalError::Condition(message) => ApiError::bad_request("invalid_eval", message),
        EvalError::Failed(err) => ApiError::from_failure(&err),
    }
}
