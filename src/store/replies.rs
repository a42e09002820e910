//! The replies owed to producers (CONTRACT §9): tasks whose message carried `reply_to`,
//! ended, and not yet answered on that queue. Rows are taken `FOR UPDATE SKIP LOCKED`, so one
//! worker at a time sends a task's reply, and `replied_at` marks it sent once.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// Where and how a producer wants the terminal event: the AMQP `reply_to` of the task
/// message and its `correlation_id` (the task_id when the message had none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyRoute {
    pub reply_to: String,
    pub correlation_id: Option<String>,
}

impl ReplyRoute {
    /// The route of a message's AMQP properties; `None` without a (non-blank) `reply_to`.
    pub fn from_properties(reply_to: Option<&str>, correlation_id: Option<&str>) -> Option<Self> {
        let reply_to = reply_to.map(str::trim).filter(|to| !to.is_empty())?;
        Some(Self {
            reply_to: reply_to.to_owned(),
            correlation_id: correlation_id
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
        })
    }
}

/// A reply due now: the task's terminal event as stored (the JSON published on the fanout).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OwedReply {
    pub task_id: Uuid,
    pub reply_to: String,
    /// The message's correlation_id, else the task_id.
    pub correlation_id: String,
    pub event_id: Uuid,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub payload: String,
}

/// Records where a task's reply goes, for a task whose row existed before its message was
/// read (a producer recorded it, a cancel ended it, or this is a redelivery). A route
/// already recorded is kept: the first message's producer gets the reply.
pub async fn record_route<'e>(
    executor: impl PgExecutor<'e>,
    task_id: Uuid,
    route: &ReplyRoute,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE tasks SET reply_to = $2, correlation_id = $3 \
         WHERE task_id = $1 AND reply_to IS NULL",
    )
    .bind(task_id)
    .bind(&route.reply_to)
    .bind(route.correlation_id.as_deref())
    .execute(executor)
    .await
    .map(drop)
}

/// Locks up to `limit` ended tasks that owe a reply (only `task_ids` when given), with
/// their terminal events. Rows another worker is sending right now are skipped.
pub async fn lock_owed(
    conn: &mut PgConnection,
    task_ids: Option<&[Uuid]>,
    limit: i64,
) -> sqlx::Result<Vec<OwedReply>> {
    sqlx::query_as::<_, OwedReply>(
        "SELECT t.task_id, t.reply_to, COALESCE(t.correlation_id, t.task_id::text) AS correlation_id, \
                e.event_id, e.type, e.payload::text AS payload \
         FROM tasks t \
         JOIN LATERAL ( \
             SELECT event_id, type, payload FROM events \
             WHERE events.task_id = t.task_id AND events.task_created_at = t.created_at \
               AND type IN ('task.completed', 'task.failed', 'task.cancelled') \
             ORDER BY seq DESC LIMIT 1 \
         ) e ON true \
         WHERE t.reply_to IS NOT NULL AND t.replied_at IS NULL \
           AND t.status IN ('completed', 'failed', 'cancelled', 'rejected') \
           AND ($1::uuid[] IS NULL OR t.task_id = ANY($1)) \
         LIMIT $2 \
         FOR UPDATE OF t SKIP LOCKED",
    )
    .bind(task_ids)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Marks the replies of `task_ids` sent.
pub async fn mark_sent(conn: &mut PgConnection, task_ids: &[Uuid]) -> sqlx::Result<()> {
    if task_ids.is_empty() {
        return Ok(());
    }
    sqlx::query("UPDATE tasks SET replied_at = now() WHERE task_id = ANY($1)")
        .bind(task_ids)
        .execute(conn)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_needs_a_reply_to() {
        assert_eq!(ReplyRoute::from_properties(None, Some("c")), None);
        assert_eq!(ReplyRoute::from_properties(Some("  "), Some("c")), None);
        assert_eq!(
            ReplyRoute::from_properties(Some("amq.gen-1"), Some("")),
            Some(ReplyRoute {
                reply_to: "amq.gen-1".into(),
                correlation_id: None
            })
        );
        assert_eq!(
            ReplyRoute::from_properties(Some("q"), Some("c-7")).and_then(|r| r.correlation_id),
            Some("c-7".into())
        );
    }
}
