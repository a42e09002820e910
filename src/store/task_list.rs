//! Tasks across agents, newest first, a page at a time (CONTRACT v3 §14 "Listing"): the
//! query behind `agentd tasks` and `GET /v1/tasks`. Keyset paging on `(created_at,
//! task_id)` (indexes `tasks_created_idx`, `tasks_status_created_idx`,
//! `tasks_agent_created_idx`); only the filters given are in the statement, so each uses
//! its index.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::tasks::{TASK_COLUMNS, TaskRow};
use crate::core::listing::TaskCursor;

/// Which tasks to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Any of these statuses (empty: every status).
    pub statuses: Vec<String>,
    /// Only this agent's.
    pub agent_id: Option<Uuid>,
    /// Only tasks created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only tasks after this cursor (older), for the next page.
    pub after: Option<TaskCursor>,
    /// Only this tenant's (CONTRACT v3 §15); `None`: every tenant's.
    pub tenant_id: Option<String>,
}

/// One page, newest first.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<TaskRow>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<TaskCursor>,
}

/// Reads up to `limit` tasks matching `filter`, newest first.
pub async fn page(pool: &PgPool, filter: &TaskFilter, limit: i64) -> sqlx::Result<TaskPage> {
    let mut query = QueryBuilder::<Postgres>::new(format!("SELECT {TASK_COLUMNS} FROM tasks"));
    let mut clause = Clause(" WHERE ");
    if !filter.statuses.is_empty() {
        query.push(clause.next()).push("status = ANY(");
        query.push_bind(filter.statuses.clone()).push(")");
    }
    if let Some(agent_id) = filter.agent_id {
        query
            .push(clause.next())
            .push("agent_id = ")
            .push_bind(agent_id);
    }
    if let Some(tenant_id) = &filter.tenant_id {
        query
            .push(clause.next())
            .push("tenant_id = ")
            .push_bind(tenant_id.clone());
    }
    if let Some(since) = filter.since {
        query
            .push(clause.next())
            .push("created_at >= ")
            .push_bind(since);
    }
    if let Some(after) = filter.after {
        query.push(clause.next()).push("(created_at, task_id) < (");
        query.push_bind(after.created_at).push(", ");
        query.push_bind(after.task_id).push(")");
    }
    // One more than asked: whether another page follows.
    query.push(" ORDER BY created_at DESC, task_id DESC LIMIT ");
    query.push_bind(limit.saturating_add(1));
    let mut tasks: Vec<TaskRow> = query.build_query_as().fetch_all(pool).await?;
    let wanted = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = tasks.len() > wanted;
    tasks.truncate(wanted);
    let next = match (more, tasks.last()) {
        (true, Some(last)) => Some(TaskCursor {
            created_at: last.created_at,
            task_id: last.task_id,
        }),
        _ => None,
    };
    Ok(TaskPage { tasks, next })
}

/// `WHERE` before the first condition, `AND` before the others.
struct Clause(&'static str);

impl Clause {
    fn next(&mut self) -> &'static str {
        std::mem::replace(&mut self.0, " AND ")
    }
}
