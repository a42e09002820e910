//! An agent's versions and channels (CONTRACT v3 §11): `POST|GET /v1/agents/{id}/versions`
//! and `PUT /v1/agents/{id}/channels/{channel}`, and the check that a task's requested
//! version or channel exists before it is published.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::core::storable;
use crate::gateway::AppState;
use crate::gateway::errors::{ApiError, ApiJson, ApiPath, ErrorBody};
use crate::store::versions::{self, ChannelRow, Draft, VersionError, VersionRow};

/// Body of `POST /v1/agents/{agent_id}/versions`: what the new version changes; every field
/// left out is copied from the latest version.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishVersion {
    /// The agent's brief, rendered verbatim once in the system message.
    pub instructions: Option<String>,
    pub model: Option<String>,
    pub tools: Option<Vec<String>>,
    pub max_iteration: Option<i32>,
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Value>,
    pub approval_tools: Option<Vec<String>>,
    pub approval_timeout_secs: Option<i32>,
    pub on_approval_expiry: Option<String>,
    pub conversation_policy: Option<String>,
    pub delegates: Option<Vec<Uuid>>,
    pub context_budget_tokens: Option<i32>,
    /// Merged into the latest version's params (`temperature`, `top_p`, `max_tokens`,
    /// `seed`, …); a null value removes a key.
    #[schema(value_type = Option<Object>)]
    pub params: Option<Map<String, Value>>,
    pub note: Option<String>,
}

/// Answer of `POST /v1/agents/{agent_id}/versions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Published {
    pub version: i32,
}

/// Answer of `GET /v1/agents/{agent_id}/versions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionList {
    /// Oldest first.
    pub versions: Vec<VersionRow>,
    pub channels: Vec<ChannelRow>,
}

/// Body of `PUT /v1/agents/{agent_id}/channels/{channel}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetChannel {
    pub version: i32,
    /// 0 to 100: the share of tasks naming nothing that a `canary` takes (0 ends it).
    #[serde(default)]
    pub weight: Option<i32>,
}

impl PublishVersion {
    fn into_draft(self) -> Result<Draft, ApiError> {
        if self
            .max_iteration
            .is_some_and(|m| !(1..=10_000).contains(&m))
        {
            return Err(ApiError::invalid_body(
                "max_iteration must be between 1 and 10000",
            ));
        }
        if self.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(ApiError::invalid_body("model must not be blank"));
        }
        if self.approval_timeout_secs.is_some_and(|s| s < 1) {
            return Err(ApiError::invalid_body(
                "approval_timeout_secs must be at least 1",
            ));
        }
        if self.context_budget_tokens.is_some_and(|t| t < 1) {
            return Err(ApiError::invalid_body(
                "context_budget_tokens must be at least 1",
            ));
        }
        crate::core::approval::OnExpiry::parse(self.on_approval_expiry.as_deref())
            .map_err(ApiError::invalid_body)?;
        if let Some(policy) = &self.conversation_policy
            && !matches!(policy.as_str(), "enqueue" | "reject")
        {
            return Err(ApiError::invalid_body(
                "conversation_policy is enqueue or reject",
            ));
        }
        if let Some(budget) = &self.budget {
            crate::contract::intake::parse_budget(Some(budget.clone()))
                .map_err(ApiError::invalid_body)?;
        }
        let owned =
            |list: Option<Vec<String>>| list.map(|l| l.into_iter().map(storable::owned).collect());
        Ok(Draft {
            instructions: self.instructions.map(storable::owned),
            model: self.model.map(|m| storable::owned(m.trim().to_owned())),
            tools: owned(self.tools),
            max_iteration: self.max_iteration,
            budget: self.budget.map(storable::json_owned),
            approval_tools: owned(self.approval_tools),
            approval_timeout_secs: self.approval_timeout_secs,
            on_approval_expiry: self.on_approval_expiry,
            conversation_policy: self.conversation_policy,
            delegates: self.delegates,
            context_budget_tokens: self.context_budget_tokens,
            params: match storable::json_owned(Value::Object(self.params.unwrap_or_default())) {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            note: self.note.map(storable::owned),
        })
    }
}

fn version_error(err: VersionError) -> ApiError {
    match err {
        VersionError::UnknownAgent(id) => {
            ApiError::not_found("agent_not_found", format!("no agent {id}"))
        }
        err @ VersionError::UnknownVersion { .. } => {
            ApiError::not_found("version_not_found", err.to_string())
        }
        VersionError::Invalid(problem) => ApiError::invalid_body(problem),
        VersionError::Db(err) => err.into(),
    }
}

/// Publishes a new version of an agent (not live until a channel serves it).
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/versions",
    tag = "agents",
    params(("agent_id" = Uuid, Path, description = "The agent")),
    request_body = PublishVersion,
    responses(
        (status = 201, description = "Published", body = Published,
         headers(("location" = String, description = "The agent's versions"))),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent (agent_not_found)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Invalid fields", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn publish_version(
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<PublishVersion>,
) -> Result<Response, ApiError> {
    let draft = body.into_draft()?;
    let version = versions::publish(state.pool(), agent_id, &draft)
        .await
        .map_err(version_error)?;
    let location = format!("/v1/agents/{agent_id}/versions");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(Published { version }),
    )
        .into_response())
}

/// Lists an agent's versions and channels.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/versions",
    tag = "agents",
    params(("agent_id" = Uuid, Path, description = "The agent")),
    responses(
        (status = 200, body = VersionList),
        (status = 400, description = "Not a UUID", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent (agent_not_found)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_versions(
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<Uuid>,
) -> Result<Json<VersionList>, ApiError> {
    let versions = versions::list(state.pool(), agent_id).await?;
    if versions.is_empty() {
        return Err(ApiError::not_found(
            "agent_not_found",
            format!("no agent {agent_id}"),
        ));
    }
    let channels = versions::channels(state.pool(), agent_id).await?;
    Ok(Json(VersionList { versions, channels }))
}

/// Points a channel at a version: `stable` (promote), `canary` with a weight, or any name.
#[utoipa::path(
    put,
    path = "/v1/agents/{agent_id}/channels/{channel}",
    tag = "agents",
    params(
        ("agent_id" = Uuid, Path, description = "The agent"),
        ("channel" = String, Path, description = "stable, canary, or another name"),
    ),
    request_body = SetChannel,
    responses(
        (status = 200, body = ChannelRow),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent (agent_not_found) or version (version_not_found)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Invalid fields (weight out of 0..100)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn set_channel(
    State(state): State<AppState>,
    ApiPath((agent_id, channel)): ApiPath<(Uuid, String)>,
    ApiJson(body): ApiJson<SetChannel>,
) -> Result<Json<ChannelRow>, ApiError> {
    let row = versions::set_channel(state.pool(), agent_id, &channel, body.version, body.weight)
        .await
        .map_err(version_error)?;
    Ok(Json(row))
}

/// Refuses a task naming a version or channel its agent does not have (404), or both.
pub(super) async fn check_requested(
    state: &AppState,
    agent_id: Uuid,
    version: Option<i32>,
    channel: &Option<String>,
) -> Result<(), ApiError> {
    match (version, channel) {
        (Some(_), Some(_)) => Err(ApiError::invalid_body(
            "name agent_version or channel, not both",
        )),
        (Some(version), None) => match versions::get(state.pool(), agent_id, version).await? {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found(
                "version_not_found",
                format!("agent {agent_id} has no version {version}"),
            )),
        },
        (None, Some(name)) => {
            let channels = versions::channels(state.pool(), agent_id).await?;
            match channels.iter().any(|c| &c.channel == name) {
                true => Ok(()),
                false => Err(ApiError::not_found(
                    "channel_not_found",
                    format!(
                        "agent {agent_id} has no channel {}",
                        crate::core::bounded::quote(name)
                    ),
                )),
            }
        }
        (None, None) => Ok(()),
    }
}
