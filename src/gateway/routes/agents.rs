//! `/v1/agents`: list and create agents, read one, page through an agent's task history
//! (newest first, keyset cursor `before` = the last task_id of the previous page).

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::core::{storable, tenancy};
use crate::gateway::AppState;
use crate::gateway::access;
use crate::gateway::auth::Caller;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody};
use crate::gateway::openapi;
use crate::store::agents::{self, Agent, NewAgent};
use crate::store::tasks::{TASK_COLUMNS, TaskRow};

/// Default and largest page size of an agent's history.
const DEFAULT_LIMIT: i64 = 20;
const MAX_LIMIT: i64 = 100;
/// Longest accepted name or model.
const MAX_TEXT: usize = 200;

/// Answer of `GET /v1/agents`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    #[schema(value_type = Vec<openapi::Agent>)]
    pub agents: Vec<Agent>,
}

/// Body of `POST /v1/agents`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgent {
    pub name: String,
    /// The model name sent to the LLM endpoint.
    pub model: String,
    /// Recursions allowed per task (default 30).
    #[serde(default)]
    pub max_iteration: Option<i32>,
    /// Tool names the agent may call (default: every built-in tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Tools (names or globs such as `mail__*`) whose calls need a person's decision.
    #[serde(default)]
    pub approval_tools: Option<Vec<String>>,
    /// How long an approval request waits, in seconds (default 86400).
    #[serde(default)]
    pub approval_timeout_secs: Option<i32>,
    /// `reject` (default) or `fail` when an approval request expires.
    #[serde(default)]
    pub on_approval_expiry: Option<String>,
    /// The agent's own brief, rendered verbatim once in the system message (CONTRACT §11).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Stall detection (CONTRACT §14): `{"repeat": N, "action": "nudge" | "answer" |
    /// "pause" | "fail"}`, default `{"repeat": 3, "action": "nudge"}`; `{"repeat": 0}` off.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub stall: Option<serde_json::Value>,
    /// `tell_model` (default) or `hold`: a call whose outcome is unknown after a crash
    /// holds the task for a person's resolve (CONTRACT §14).
    #[serde(default)]
    pub on_unknown: Option<String>,
    /// The tenant the agent and its tasks belong to (CONTRACT v3 §15): the token's; a token
    /// of every tenant (`*`) may name one (default `default`).
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// Query of `GET /v1/agents/{agent_id}/tasks`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Page size, 1 to 100 (default 20).
    pub limit: Option<i64>,
    /// Cursor: only tasks created before this task (the previous page's `next_before`).
    pub before: Option<Uuid>,
}

/// Answer of `GET /v1/agents/{agent_id}/tasks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskPage {
    /// Newest first.
    #[schema(value_type = Vec<openapi::Task>)]
    pub tasks: Vec<TaskRow>,
    /// Pass as `before` for the next page; null on the last page.
    pub next_before: Option<Uuid>,
}

impl CreateAgent {
    /// Checks the fields and makes them storable (`core::storable`: NUL becomes U+FFFD), so
    /// that nothing a person types fails the insert.
    fn into_new_agent(self, caller: &Caller) -> Result<NewAgent, ApiError> {
        let tenant_id =
            access::new_tenant(caller, self.tenant_id.as_deref(), tenancy::DEFAULT_TENANT)?;
        let name = storable::owned(self.name.trim().to_owned());
        let model = storable::owned(self.model.trim().to_owned());
        for (field, value) in [("name", &name), ("model", &model)] {
            if value.is_empty() || value.len() > MAX_TEXT {
                return Err(ApiError::invalid_body(format!(
                    "{field} must be 1 to {MAX_TEXT} characters"
                )));
            }
        }
        if self
            .max_iteration
            .is_some_and(|max| !(1..=10_000).contains(&max))
        {
            return Err(ApiError::invalid_body(
                "max_iteration must be between 1 and 10000",
            ));
        }
        if let Some(tools) = &self.tools {
            check_tool_names(tools)?;
        }
        if self.approval_timeout_secs.is_some_and(|secs| secs < 1) {
            return Err(ApiError::invalid_body(
                "approval_timeout_secs must be at least 1",
            ));
        }
        crate::core::approval::OnExpiry::parse(self.on_approval_expiry.as_deref())
            .map_err(ApiError::invalid_body)?;
        let stall = match &self.stall {
            Some(value) => Some(
                crate::core::stall::StallSettings::from_json(value)
                    .map_err(|error| ApiError::invalid_body(error.to_string()))?,
            ),
            None => None,
        };
        let on_unknown = crate::core::unknown::OnUnknown::parse(self.on_unknown.as_deref())
            .map_err(ApiError::invalid_body)?;
        Ok(NewAgent {
            stall,
            on_unknown: self
                .on_unknown
                .is_some()
                .then(|| on_unknown.as_str().to_owned()),
            name,
            model,
            max_iteration: self.max_iteration,
            tools: self.tools,
            approval_tools: (self.approval_tools)
                .map(|tools| tools.into_iter().map(storable::owned).collect()),
            approval_timeout_secs: self.approval_timeout_secs,
            on_approval_expiry: self.on_approval_expiry,
            instructions: self.instructions.map(storable::owned),
            tenant_id: Some(tenant_id),
        })
    }
}

/// Tool names as the Chat Completions API allows them: 1–64 of `[A-Za-z0-9_-]`, unique.
fn check_tool_names(tools: &[String]) -> Result<(), ApiError> {
    for (index, tool) in tools.iter().enumerate() {
        let valid = (1..=64).contains(&tool.len())
            && tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(ApiError::invalid_body(format!(
                "tools[{index}] {tool:?} is not a tool name (1-64 of A-Z a-z 0-9 _ -)"
            )));
        }
        if tools[..index].contains(tool) {
            return Err(ApiError::invalid_body(format!(
                "tool {tool:?} is listed twice"
            )));
        }
    }
    Ok(())
}

/// Lists every agent, oldest first.
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    responses(
        (status = 200, body = AgentList),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_agents(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Result<Json<AgentList>, ApiError> {
    // The caller's tenant's only (CONTRACT v3 §15).
    let agents = agents::list_visible(state.pool(), &caller.tenant_id).await?;
    Ok(Json(AgentList { agents }))
}

/// Creates an agent.
#[utoipa::path(
    post,
    path = "/v1/agents",
    tag = "agents",
    request_body = CreateAgent,
    responses(
        (status = 201, description = "Created", body = openapi::Agent,
         headers(("location" = String, description = "The agent's URL"))),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "The token lacks the admin scope (missing_scope) or names another tenant (wrong_tenant)", body = ErrorBody),
        (status = 422, description = "Invalid fields", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_agent(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(body): ApiJson<CreateAgent>,
) -> Result<Response, ApiError> {
    let new_agent = body.into_new_agent(&caller)?;
    let agent_id = agents::create(state.pool(), &new_agent).await?;
    let agent = find_agent(state.pool(), agent_id).await?;
    let location = format!("/v1/agents/{agent_id}");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(agent),
    )
        .into_response())
}

/// Reads one agent.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}",
    tag = "agents",
    params(("agent_id" = Uuid, Path, description = "The agent")),
    responses(
        (status = 200, body = openapi::Agent),
        (status = 400, description = "Not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent (agent_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_agent(
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<Uuid>,
) -> Result<Json<Agent>, ApiError> {
    find_agent(state.pool(), agent_id).await.map(Json)
}

/// Pages through an agent's tasks, newest first.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/tasks",
    tag = "agents",
    params(("agent_id" = Uuid, Path, description = "The agent"), HistoryQuery),
    responses(
        (status = 200, body = TaskPage),
        (status = 400, description = "Not a UUID, or a malformed query", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent (agent_not_found)", body = ErrorBody),
        (status = 422, description = "limit out of range, or before is not a task of this agent", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn agent_tasks(
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<TaskPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_parameter(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    find_agent(state.pool(), agent_id).await?;
    let cursor = match query.before {
        Some(task_id) => Some(cursor_of(state.pool(), agent_id, task_id).await?),
        None => None,
    };
    let page = |pool: PgPool| async move { history_page(&pool, agent_id, cursor, limit + 1).await };
    let mut tasks = state.readers().read(page).await?;
    let more = tasks.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    tasks.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_before = more.then(|| tasks.last().map(|t| t.task_id)).flatten();
    Ok(Json(TaskPage { tasks, next_before }))
}

async fn find_agent(pool: &PgPool, agent_id: Uuid) -> Result<Agent, ApiError> {
    agents::get(pool, agent_id)
        .await?
        .ok_or_else(|| ApiError::not_found("agent_not_found", format!("no agent {agent_id}")))
}

/// The keyset position of the cursor task: (created_at, task_id).
async fn cursor_of(
    pool: &PgPool,
    agent_id: Uuid,
    task_id: Uuid,
) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let created_at: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT created_at FROM tasks WHERE task_id = $1 AND agent_id = $2")
            .bind(task_id)
            .bind(agent_id)
            .fetch_optional(pool)
            .await?;
    created_at.map(|at| (at, task_id)).ok_or_else(|| {
        ApiError::invalid_parameter(format!("before: {task_id} is not a task of this agent"))
    })
}

/// One page of an agent's history, newest first, strictly before `cursor`.
async fn history_page(
    pool: &PgPool,
    agent_id: Uuid,
    cursor: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> sqlx::Result<Vec<TaskRow>> {
    sqlx::query_as::<_, TaskRow>(&format!(
        "SELECT {TASK_COLUMNS} FROM tasks \
         WHERE agent_id = $1 AND ($2::timestamptz IS NULL OR (created_at, task_id) < ($2, $3)) \
         ORDER BY created_at DESC, task_id DESC \
         LIMIT $4"
    ))
    .bind(agent_id)
    .bind(cursor.map(|(at, _)| at))
    .bind(cursor.map(|(_, id)| id))
    .bind(limit)
    .fetch_all(pool)
    .await
}
