//! The `agents` table: who runs a task (model, max_iteration, granted tools).

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
}

/// The columns of [`Agent`], in its order (every query that reads agents selects these).
pub const AGENT_COLUMNS: &str =
    "agent_id, name, model, max_iteration, tools, context_budget_tokens, created_at, budget";

/// What `agentd agent create` inserts.
#[derive(Debug, Clone)]
pub struct NewAgent {
    pub name: String,
    pub model: String,
    pub max_iteration: Option<i32>,
    pub tools: Option<Vec<String>>,
}

/// Inserts an agent and returns its id (UUID v7).
pub async fn create(pool: &PgPool, agent: &NewAgent) -> sqlx::Result<Uuid> {
    let agent_id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO agents (agent_id, name, model, max_iteration, tools) \
         VALUES ($1, $2, $3, COALESCE($4, 30), $5)",
    )
    .bind(agent_id)
    .bind(&agent.name)
    .bind(&agent.model)
    .bind(agent.max_iteration)
    .bind(&agent.tools)
    .execute(pool)
    .await?;
    Ok(agent_id)
}

/// Looks an agent up by id.
pub async fn get(pool: &PgPool, agent_id: Uuid) -> sqlx::Result<Option<Agent>> {
    sqlx::query_as::<_, Agent>(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents WHERE agent_id = $1"
    ))
    .bind(agent_id)
    .fetch_optional(pool)
    .await
}

/// Every agent, oldest first.
pub async fn list(pool: &PgPool) -> sqlx::Result<Vec<Agent>> {
    sqlx::query_as::<_, Agent>(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents ORDER BY created_at, agent_id"
    ))
    .fetch_all(pool)
    .await
}
