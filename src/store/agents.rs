//! The `agents` table: who runs a task (model, max_iteration, granted tools). It mirrors the
//! stable version of `agent_versions` (CONTRACT §11); a task reads its pinned version
//! ([`at_version`], [`pinned_columns`]).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// One row of `agents`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Agent {
    pub agent_id: Uuid,
    pub name: String,
    pub model: String,
    pub max_iteration: i32,
    /// Granted tool names; `None` means every built-in tool.
    pub tools: Option<Vec<String>>,
    /// This agent's context budget in estimated tokens; `None` uses the global one.
    pub context_budget_tokens: Option<i32>,
    pub created_at: DateTime<Utc>,
    /// What the agent's tasks may spend when their message names no budget (CONTRACT §8).
    pub budget: Option<sqlx::types::Json<serde_json::Value>>,
    /// Tools (names or globs) whose calls need a person's decision (CONTRACT §7).
    pub approval_tools: Option<Vec<String>>,
    /// How long an approval request waits (default 86400 s).
    pub approval_timeout_secs: Option<i32>,
    /// `reject` (default) or `fail` when a request expires.
    pub on_approval_expiry: Option<String>,
    /// `enqueue` (default: a new turn waits for the running one) or `reject` (CONTRACT §10).
    pub conversation_policy: Option<String>,
    /// The agents it may delegate to with the `delegate` tool (CONTRACT §10).
    pub delegates: Option<Vec<Uuid>>,
    /// The agent's own brief, rendered verbatim once in the system message (CONTRACT §11).
    pub instructions: Option<String>,
    /// The version this definition is (CONTRACT §11): the task's pinned one when read for a
    /// task; `agents` itself mirrors the stable version.
    #[sqlx(default)]
    pub version: Option<i32>,
    /// Request parameters merged into every LLM request of this version (`temperature`, …).
    #[sqlx(default)]
    pub params: Option<sqlx::types::Json<serde_json::Value>>,
    /// Stall detection settings (CONTRACT §14); null: the default.
    pub stall: Option<sqlx::types::Json<serde_json::Value>>,
    /// `tell_model` (default) or `hold` (CONTRACT §14).
    pub on_unknown: String,
    /// The tenant the agent and its tasks belong to (CONTRACT v3 §15).
    pub tenant_id: String,
}

impl Agent {
    /// The agent's approval rules.
    pub fn approval_policy(&self) -> crate::core::approval::ApprovalPolicy {
        crate::core::approval::ApprovalPolicy {
            tools: self.approval_tools.clone().unwrap_or_default(),
        }
    }

    /// Its stall detection settings; stored ones that cannot be read (written by hand
    /// with SQL) give the default, with a warning.
    pub fn stall_settings(&self) -> crate::core::stall::StallSettings {
        let stored = self
            .stall
            .as_ref()
            .map_or(&serde_json::Value::Null, |s| &s.0);
        crate::core::stall::StallSettings::from_json(stored).unwrap_or_else(|error| {
            tracing::warn!(agent_id = %self.agent_id, %error, "agents.stall unreadable: default used");
            crate::core::stall::StallSettings::default()
        })
    }

    /// Whether a call whose outcome is unknown holds the task for a person.
    pub fn holds_unknown(&self) -> bool {
        self.on_unknown == "hold"
    }

    /// How long its approval requests wait, in seconds.
    pub fn approval_timeout_secs(&self) -> f64 {
        let secs = self
            .approval_timeout_secs
            .map_or(crate::core::approval::DEFAULT_TIMEOUT_SECS, i64::from);
        secs as f64
    }
}

/// The columns of [`Agent`], in its order (every query that reads agents selects these).
pub const AGENT_COLUMNS: &str = "agent_id, name, model, max_iteration, tools, \
     context_budget_tokens, created_at, budget, approval_tools, approval_timeout_secs, \
     on_approval_expiry, conversation_policy, delegates, instructions, stall, on_unknown, tenant_id";

/// The columns an agent version defines (`agent_versions`); the others come from `agents`.
pub const VERSION_COLUMNS: &[&str] = &[
    "model",
    "max_iteration",
    "tools",
    "context_budget_tokens",
    "budget",
    "approval_tools",
    "approval_timeout_secs",
    "on_approval_expiry",
    "conversation_policy",
    "delegates",
    "instructions",
];

/// [`AGENT_COLUMNS`] with the definition read from `agent_versions v` and the rest from
/// `agents a`, then the version and its params: what reading an agent at a version selects.
pub fn pinned_columns() -> String {
    let columns: Vec<String> = AGENT_COLUMNS
        .split(',')
        .map(str::trim)
        .map(|column| match VERSION_COLUMNS.contains(&column) {
            true => format!("v.{column}"),
            false => format!("a.{column}"),
        })
        .collect();
    format!("{}, v.version, v.params", columns.join(", "))
}

/// The agent as its version `version` defines it; `None` when either does not exist.
pub async fn at_version(
    pool: &PgPool,
    agent_id: Uuid,
    version: i32,
) -> sqlx::Result<Option<Agent>> {
    sqlx::query_as::<_, Agent>(&format!(
        "SELECT {} FROM agents a \
         JOIN agent_versions v ON v.agent_id = a.agent_id AND v.version = $2 \
         WHERE a.agent_id = $1",
        pinned_columns()
    ))
    .bind(agent_id)
    .bind(version)
    .fetch_optional(pool)
    .await
}

/// What `agentd agent create` inserts.
#[derive(Debug, Clone)]
pub struct NewAgent {
    pub name: String,
    pub model: String,
    pub max_iteration: Option<i32>,
    pub tools: Option<Vec<String>>,
    /// Approval rules (CONTRACT §7); `None` for the defaults.
    pub approval_tools: Option<Vec<String>>,
    pub approval_timeout_secs: Option<i32>,
    pub on_approval_expiry: Option<String>,
    /// The agent's own brief (CONTRACT §11); version 1 gets it.
    pub instructions: Option<String>,
    /// `agents.stall` (validated); `None` for the default.
    pub stall: Option<crate::core::stall::StallSettings>,
    /// `agents.on_unknown`; `None` for `tell_model`.
    pub on_unknown: Option<String>,
    /// The agent's tenant (checked with `core::tenancy::parse_tenant`); `None`: `default`.
    pub tenant_id: Option<String>,
}

/// Inserts an agent and returns its id (UUID v7).
pub async fn create(pool: &PgPool, agent: &NewAgent) -> sqlx::Result<Uuid> {
    let agent_id = Uuid::now_v7();
    insert(pool, agent_id, agent, "").await?;
    Ok(agent_id)
}

/// Inserts the agent `agent_id` unless an agent with that id exists (left as it is).
pub async fn ensure(pool: &PgPool, agent_id: Uuid, agent: &NewAgent) -> sqlx::Result<()> {
    insert(pool, agent_id, agent, " ON CONFLICT (agent_id) DO NOTHING").await
}

async fn insert(
    pool: &PgPool,
    agent_id: Uuid,
    agent: &NewAgent,
    on_conflict: &str,
) -> sqlx::Result<()> {
    sqlx::query(&format!(
        "INSERT INTO agents (agent_id, name, model, max_iteration, tools, approval_tools, \
                             approval_timeout_secs, on_approval_expiry, instructions, stall, \
                             on_unknown, tenant_id) \
         VALUES ($1, $2, $3, COALESCE($4, 30), $5, $6, $7, $8, $9, \
                 COALESCE($10, '{{\"repeat\": 3, \"action\": \"nudge\"}}'::jsonb), \
                 COALESCE($11, 'tell_model'), COALESCE($12, 'default')){on_conflict}"
    ))
    .bind(agent_id)
    .bind(&agent.name)
    .bind(&agent.model)
    .bind(agent.max_iteration)
    .bind(&agent.tools)
    .bind(&agent.approval_tools)
    .bind(agent.approval_timeout_secs)
    .bind(&agent.on_approval_expiry)
    .bind(&agent.instructions)
    .bind(agent.stall.map(sqlx::types::Json))
    .bind(&agent.on_unknown)
    .bind(&agent.tenant_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// The stable version's number and params, beside [`AGENT_COLUMNS`] of `agents`.
const STABLE_EXTRA: &str = "(SELECT c.version FROM agent_channels c \
         WHERE c.agent_id = agents.agent_id AND c.channel = 'stable') AS version, \
     (SELECT v.params FROM agent_channels c JOIN agent_versions v \
         ON v.agent_id = c.agent_id AND v.version = c.version \
         WHERE c.agent_id = agents.agent_id AND c.channel = 'stable') AS params";

/// Looks an agent up by id (its definition is that of its stable version).
pub async fn get(pool: &PgPool, agent_id: Uuid) -> sqlx::Result<Option<Agent>> {
    sqlx::query_as::<_, Agent>(&format!(
        "SELECT {AGENT_COLUMNS}, {STABLE_EXTRA} FROM agents WHERE agent_id = $1"
    ))
    .bind(agent_id)
    .fetch_optional(pool)
    .await
}

/// Every agent, oldest first.
pub async fn list(pool: &PgPool) -> sqlx::Result<Vec<Agent>> {
    sqlx::query_as::<_, Agent>(&format!(
        "SELECT {AGENT_COLUMNS}, {STABLE_EXTRA} FROM agents ORDER BY created_at, agent_id"
    ))
    .fetch_all(pool)
    .await
}

/// The agents a caller of `tenant` sees (`*`: every tenant's), oldest first.
pub async fn list_visible(pool: &PgPool, tenant: &str) -> sqlx::Result<Vec<Agent>> {
    sqlx::query_as::<_, Agent>(&format!(
        "SELECT {AGENT_COLUMNS}, {STABLE_EXTRA} FROM agents \
         WHERE $1 = '*' OR tenant_id = $1 ORDER BY created_at, agent_id"
    ))
    .bind(tenant)
    .fetch_all(pool)
    .await
}
