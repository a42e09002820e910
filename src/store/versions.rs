//! `agent_versions` and `agent_channels` (CONTRACT v3 §11): publishing an immutable version,
//! moving a channel, rolling stable back, and choosing a task's version at intake (the
//! choice itself is `core::versions::choose`). Whenever `stable` moves, the `agents` row is
//! rewritten to mirror it in the same transaction, so v1/v2 readers of `agents` read right.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::core::versions::{self, Channel, ChoiceError, Requested};

/// One row of `agent_versions`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct VersionRow {
    pub agent_id: Uuid,
    pub version: i32,
    pub instructions: Option<String>,
    pub model: String,
    pub tools: Option<Vec<String>>,
    pub max_iteration: i32,
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Json<Value>>,
    pub approval_tools: Option<Vec<String>>,
    pub approval_timeout_secs: Option<i32>,
    pub on_approval_expiry: Option<String>,
    pub conversation_policy: Option<String>,
    pub delegates: Option<Vec<Uuid>>,
    pub context_budget_tokens: Option<i32>,
    /// Request parameters merged into every LLM request body of this version.
    #[schema(value_type = Object)]
    pub params: Json<Value>,
    pub note: Option<String>,
    pub created_at: DateTime<Utc>,
}

const VERSION_SELECT: &str = "agent_id, version, instructions, model, tools, max_iteration, \
     budget, approval_tools, approval_timeout_secs, on_approval_expiry, conversation_policy, \
     delegates, context_budget_tokens, params, note, created_at";

/// One row of `agent_channels`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct ChannelRow {
    pub channel: String,
    pub version: i32,
    pub weight: i32,
    /// What `rollback` returns stable to.
    pub previous_version: Option<i32>,
    pub updated_at: DateTime<Utc>,
}

/// What a new version changes; `None` fields are copied from the latest version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    pub instructions: Option<String>,
    pub model: Option<String>,
    pub tools: Option<Vec<String>>,
    pub max_iteration: Option<i32>,
    pub budget: Option<Value>,
    pub approval_tools: Option<Vec<String>>,
    pub approval_timeout_secs: Option<i32>,
    pub on_approval_expiry: Option<String>,
    pub conversation_policy: Option<String>,
    pub delegates: Option<Vec<Uuid>>,
    pub context_budget_tokens: Option<i32>,
    /// Merged into the latest version's params; a `null` value removes the key.
    pub params: Map<String, Value>,
    pub note: Option<String>,
}

/// Why a change to an agent's versions or channels was refused.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("no agent {0}")]
    UnknownAgent(Uuid),
    #[error("agent {agent_id} has no version {version}")]
    UnknownVersion { agent_id: Uuid, version: i32 },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Locks the agent's row (one change of its versions at a time); false when it has none.
async fn lock_agent(conn: &mut PgConnection, agent_id: Uuid) -> sqlx::Result<bool> {
    let found: Option<Uuid> =
        sqlx::query_scalar("SELECT agent_id FROM agents WHERE agent_id = $1 FOR UPDATE")
            .bind(agent_id)
            .fetch_optional(conn)
            .await?;
    Ok(found.is_some())
}

/// The agent's versions, oldest first.
pub async fn list(pool: &PgPool, agent_id: Uuid) -> sqlx::Result<Vec<VersionRow>> {
    sqlx::query_as::<_, VersionRow>(&format!(
        "SELECT {VERSION_SELECT} FROM agent_versions WHERE agent_id = $1 ORDER BY version"
    ))
    .bind(agent_id)
    .fetch_all(pool)
    .await
}

/// One version.
pub async fn get(pool: &PgPool, agent_id: Uuid, version: i32) -> sqlx::Result<Option<VersionRow>> {
    sqlx::query_as::<_, VersionRow>(&format!(
        "SELECT {VERSION_SELECT} FROM agent_versions WHERE agent_id = $1 AND version = $2"
    ))
    .bind(agent_id)
    .bind(version)
    .fetch_optional(pool)
    .await
}

/// The agent's channels, by name.
pub async fn channels(pool: &PgPool, agent_id: Uuid) -> sqlx::Result<Vec<ChannelRow>> {
    sqlx::query_as::<_, ChannelRow>(
        "SELECT channel, version, weight, previous_version, updated_at FROM agent_channels \
         WHERE agent_id = $1 ORDER BY channel",
    )
    .bind(agent_id)
    .fetch_all(pool)
    .await
}

/// Publishes a new version from the latest one with `draft`'s changes; returns its number.
/// It is not live until a channel serves it.
pub async fn publish(pool: &PgPool, agent_id: Uuid, draft: &Draft) -> Result<i32, VersionError> {
    let mut tx = pool.begin().await?;
    if !lock_agent(&mut tx, agent_id).await? {
        return Err(VersionError::UnknownAgent(agent_id));
    }
    let latest: Option<VersionRow> = sqlx::query_as(&format!(
        "SELECT {VERSION_SELECT} FROM agent_versions WHERE agent_id = $1 \
         ORDER BY version DESC LIMIT 1"
    ))
    .bind(agent_id)
    .fetch_optional(&mut *tx)
    .await?;
    let latest = latest.ok_or(VersionError::UnknownAgent(agent_id))?;
    let mut params = match latest.params.0 {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    for (key, value) in &draft.params {
        match value {
            Value::Null => params.remove(key),
            value => params.insert(key.clone(), value.clone()),
        };
    }
    let version = latest.version + 1;
    sqlx::query(
        "INSERT INTO agent_versions (agent_id, version, instructions, model, tools, \
             max_iteration, budget, approval_tools, approval_timeout_secs, on_approval_expiry, \
             conversation_policy, delegates, context_budget_tokens, params, note) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(agent_id)
    .bind(version)
    .bind(draft.instructions.clone().or(latest.instructions))
    .bind(draft.model.clone().unwrap_or(latest.model))
    .bind(draft.tools.clone().or(latest.tools))
    .bind(draft.max_iteration.unwrap_or(latest.max_iteration))
    .bind(draft.budget.clone().map(Json).or(latest.budget))
    .bind(draft.approval_tools.clone().or(latest.approval_tools))
    .bind(draft.approval_timeout_secs.or(latest.approval_timeout_secs))
    .bind(
        draft
            .on_approval_expiry
            .clone()
            .or(latest.on_approval_expiry),
    )
    .bind(
        draft
            .conversation_policy
            .clone()
            .or(latest.conversation_policy),
    )
    .bind(draft.delegates.clone().or(latest.delegates))
    .bind(draft.context_budget_tokens.or(latest.context_budget_tokens))
    .bind(Json(Value::Object(params)))
    .bind(&draft.note)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(version)
}

/// Points `channel` at `version` (with `weight`, for a canary; `None` keeps the current
/// weight, or 100 for a new channel). Moving `stable` rewrites the `agents` row to mirror it
/// and remembers the previous stable for `rollback`.
pub async fn set_channel(
    pool: &PgPool,
    agent_id: Uuid,
    channel: &str,
    version: i32,
    weight: Option<i32>,
) -> Result<ChannelRow, VersionError> {
    if channel.trim().is_empty() || channel.chars().count() > versions::MAX_CHANNEL_CHARS {
        return Err(VersionError::Invalid(format!(
            "a channel name is 1 to {} characters",
            versions::MAX_CHANNEL_CHARS
        )));
    }
    if weight.is_some_and(|w| !(0..=100).contains(&w)) {
        return Err(VersionError::Invalid("weight must be 0 to 100".into()));
    }
    let mut tx = pool.begin().await?;
    if !lock_agent(&mut tx, agent_id).await? {
        return Err(VersionError::UnknownAgent(agent_id));
    }
    let exists: Option<i32> = sqlx::query_scalar(
        "SELECT version FROM agent_versions WHERE agent_id = $1 AND version = $2",
    )
    .bind(agent_id)
    .bind(version)
    .fetch_optional(&mut *tx)
    .await?;
    if exists.is_none() {
        return Err(VersionError::UnknownVersion { agent_id, version });
    }
    let row: ChannelRow = sqlx::query_as(
        "INSERT INTO agent_channels (agent_id, channel, version, weight) \
         VALUES ($1, $2, $3, COALESCE($4, 100)) \
         ON CONFLICT (agent_id, channel) DO UPDATE \
             SET previous_version = CASE WHEN agent_channels.version = EXCLUDED.version \
                                         THEN agent_channels.previous_version \
                                         ELSE agent_channels.version END, \
                 version = EXCLUDED.version, \
                 weight = COALESCE($4, agent_channels.weight), updated_at = now() \
         RETURNING channel, version, weight, previous_version, updated_at",
    )
    .bind(agent_id)
    .bind(crate::core::storable::owned(channel.to_owned()))
    .bind(version)
    .bind(weight)
    .fetch_one(&mut *tx)
    .await?;
    if channel == versions::STABLE {
        mirror_stable(&mut tx, agent_id, version).await?;
    }
    tx.commit().await?;
    Ok(row)
}

/// Returns stable to the version it served before; returns the new stable version.
pub async fn rollback(pool: &PgPool, agent_id: Uuid) -> Result<i32, VersionError> {
    let previous: Option<Option<i32>> = sqlx::query_scalar(
        "SELECT previous_version FROM agent_channels WHERE agent_id = $1 AND channel = 'stable'",
    )
    .bind(agent_id)
    .fetch_optional(pool)
    .await?;
    match previous {
        None => Err(VersionError::UnknownAgent(agent_id)),
        Some(None) => Err(VersionError::Invalid(format!(
            "agent {agent_id}'s stable channel has never moved: nothing to roll back to"
        ))),
        Some(Some(version)) => {
            set_channel(pool, agent_id, versions::STABLE, version, None).await?;
            Ok(version)
        }
    }
}

/// Rewrites the `agents` row from version `version` (the new stable).
async fn mirror_stable(conn: &mut PgConnection, agent_id: Uuid, version: i32) -> sqlx::Result<()> {
    let columns = crate::store::agents::VERSION_COLUMNS;
    let set: Vec<String> = columns.iter().map(|c| format!("{c} = v.{c}")).collect();
    sqlx::query(&format!(
        "UPDATE agents a SET {} FROM agent_versions v \
         WHERE a.agent_id = $1 AND v.agent_id = $1 AND v.version = $2",
        set.join(", ")
    ))
    .bind(agent_id)
    .bind(version)
    .execute(conn)
    .await?;
    Ok(())
}

/// Pins the task's version at intake: the one its row holds already, else the one
/// `requested` chooses. `Ok(None)`: the agent has no versions (no such agent; intake
/// rejects it as unknown). `Err` inside: the version or channel named does not exist.
pub async fn choose_for_task(
    pool: &PgPool,
    agent_id: Uuid,
    task_id: Uuid,
    requested: &Requested,
) -> sqlx::Result<Result<Option<i32>, ChoiceError>> {
    // One round trip: intake runs this for every task message.
    let named = match requested {
        Requested::Version(version) => Some(*version),
        _ => None,
    };
    type Row = (Option<i32>, Vec<String>, Vec<i32>, Vec<i32>, bool);
    let (pinned, names, numbers, weights, named_exists): Row = sqlx::query_as(
        "SELECT (SELECT agent_version FROM tasks WHERE task_id = $1), \
                COALESCE(array_agg(c.channel), '{}'), COALESCE(array_agg(c.version), '{}'), \
                COALESCE(array_agg(c.weight), '{}'), \
                EXISTS (SELECT 1 FROM agent_versions WHERE agent_id = $2 AND version = $3) \
         FROM agent_channels c WHERE c.agent_id = $2",
    )
    .bind(task_id)
    .bind(agent_id)
    .bind(named)
    .fetch_one(pool)
    .await?;
    if let Some(version) = pinned {
        return Ok(Ok(Some(version)));
    }
    if names.is_empty() {
        return Ok(Ok(None));
    }
    let channels: Vec<Channel> = (names.into_iter().zip(numbers).zip(weights))
        .map(|((name, version), weight)| Channel {
            name,
            version,
            weight,
        })
        .collect();
    let known: Vec<i32> = named.filter(|_| named_exists).into_iter().collect();
    Ok(versions::choose(agent_id, task_id, requested, &channels, &known).map(Some))
}
