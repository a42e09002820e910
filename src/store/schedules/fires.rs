//! What the scheduler reads and writes for each fire (CONTRACT v3 §14), inside the one
//! transaction per schedule that [`crate::scheduler`] runs: the due schedules, what
//! `core::schedule::decide` needs to know ([`open_task`], [`fires_per_day`]), the
//! `schedule_fires` record, the fire's task row and the schedule's next fire; and the
//! `schedule_fires` history that people read.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// The schedules due at `now`, earliest first: not paused, and a fire at or before `now`,
/// or a buffered fire whose previous task has ended.
pub async fn due(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT schedule_id FROM ( \
             SELECT schedule_id, next_fire_at FROM schedules \
             WHERE NOT paused AND next_fire_at <= $1 \
             UNION \
             SELECT s.schedule_id, s.next_fire_at FROM schedules s \
             WHERE s.buffered_fire_at IS NOT NULL AND NOT s.paused \
               AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.schedule_id = s.schedule_id \
                               AND t.status IN ('pending', 'running', 'waiting')) \
         ) AS due ORDER BY next_fire_at NULLS FIRST, schedule_id LIMIT $2",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Whether the schedule has a task that has not ended (pending, running or waiting).
pub async fn open_task(conn: &mut PgConnection, schedule_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE schedule_id = $1 \
                        AND status IN ('pending', 'running', 'waiting'))",
    )
    .bind(schedule_id)
    .fetch_one(conn)
    .await
}

/// Per UTC day from `from` on, the fires recorded that count toward `max_fires_per_day`
/// (`enqueued`, `buffered`).
pub async fn fires_per_day(
    conn: &mut PgConnection,
    schedule_id: Uuid,
    from: DateTime<Utc>,
) -> sqlx::Result<Vec<(NaiveDate, i64)>> {
    sqlx::query_as(
        "SELECT (fire_at AT TIME ZONE 'UTC')::date AS day, count(*) FROM schedule_fires \
         WHERE schedule_id = $1 AND fire_at >= $2 AND decision IN ('enqueued', 'buffered') \
         GROUP BY day",
    )
    .bind(schedule_id)
    .bind(from)
    .fetch_all(conn)
    .await
}

/// One decided fire as `schedule_fires` records it.
#[derive(Debug, Clone, Copy)]
pub struct FireRecord<'a> {
    pub schedule_id: Uuid,
    pub tenant_id: &'a str,
    pub fire_at: DateTime<Utc>,
    pub decision: &'a str,
    pub task_id: Option<Uuid>,
    /// The Idempotency-Key of the manual trigger that made the fire, if it had one.
    pub trigger_key: Option<&'a str>,
}

/// Records a fire. A fire recorded before is overwritten only when it made no task (a
/// released `buffered` fire becomes `enqueued`; a trigger in the same millisecond as a
/// skipped fire takes its place): a decision that made a task stays.
pub async fn record(conn: &mut PgConnection, fire: &FireRecord<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO schedule_fires (schedule_id, fire_at, decision, task_id, tenant_id, \
                                     trigger_key) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (schedule_id, fire_at) DO UPDATE \
             SET decision = EXCLUDED.decision, task_id = EXCLUDED.task_id, decided_at = now(), \
                 trigger_key = EXCLUDED.trigger_key \
             WHERE schedule_fires.task_id IS NULL",
    )
    .bind(fire.schedule_id)
    .bind(fire.fire_at)
    .bind(fire.decision)
    .bind(fire.task_id)
    .bind(fire.tenant_id)
    .bind(fire.trigger_key.map(crate::core::storable::text))
    .execute(conn)
    .await?;
    Ok(())
}

/// The fire (its time and task) of the latest trigger of `schedule_id` made with
/// Idempotency-Key `key` at or after `since`, if any.
pub async fn triggered_with(
    conn: &mut PgConnection,
    schedule_id: Uuid,
    key: &str,
    since: DateTime<Utc>,
) -> sqlx::Result<Option<(DateTime<Utc>, Option<Uuid>)>> {
    sqlx::query_as(
        "SELECT fire_at, task_id FROM schedule_fires \
         WHERE schedule_id = $1 AND trigger_key = $2 AND fire_at >= $3 \
         ORDER BY fire_at DESC LIMIT 1",
    )
    .bind(schedule_id)
    .bind(crate::core::storable::text(key))
    .bind(since)
    .fetch_optional(conn)
    .await
}

/// The task row of a fire, recorded `pending` before its message is published.
#[derive(Debug, Clone)]
pub struct FireTask<'a> {
    pub task_id: Uuid,
    pub agent_id: Uuid,
    pub input: &'a str,
    pub constraints: &'a [String],
    pub stream: bool,
    /// The template's budget (the agent's applies when null, as for any task message).
    pub budget: Option<Value>,
    pub schedule_id: Uuid,
    pub fire_at: DateTime<Utc>,
    /// `high` or `normal` (the template's, checked when the schedule was made).
    pub priority: &'a str,
}

/// Inserts the fire's task as `pending`; true when this call inserted it (its message is
/// then to be published). A task with that id already there was made from the fire's
/// message by a worker while the holder that published it died before its commit: it only
/// gets its `schedule_id` and `fire_at`, and its message is not sent again.
pub async fn insert_task(conn: &mut PgConnection, task: &FireTask<'_>) -> sqlx::Result<bool> {
    let inserted: Option<bool> = sqlx::query_scalar(
        "INSERT INTO tasks (task_id, agent_id, input, constraints, stream, budget, \
                            schedule_id, fire_at, tenant_id, priority) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                 COALESCE((SELECT tenant_id FROM schedules WHERE schedule_id = $7), \
                          'default'), $9) \
         ON CONFLICT (task_id) DO UPDATE \
             SET schedule_id = EXCLUDED.schedule_id, fire_at = EXCLUDED.fire_at \
             WHERE tasks.schedule_id IS NULL \
         RETURNING (xmax = 0)",
    )
    .bind(task.task_id)
    .bind(task.agent_id)
    .bind(task.input)
    .bind(sqlx::types::Json(task.constraints))
    .bind(task.stream)
    .bind(&task.budget)
    .bind(task.schedule_id)
    .bind(task.fire_at)
    .bind(task.priority)
    .fetch_optional(conn)
    .await?;
    Ok(inserted.unwrap_or(false))
}

/// Stores what a tick decided: the next fire and the buffered one.
pub async fn set_next(
    conn: &mut PgConnection,
    schedule_id: Uuid,
    next_fire_at: Option<DateTime<Utc>>,
    buffered_fire_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE schedules SET next_fire_at = $2, buffered_fire_at = $3, updated_at = now() \
         WHERE schedule_id = $1",
    )
    .bind(schedule_id)
    .bind(next_fire_at)
    .bind(buffered_fire_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// One `schedule_fires` row with the status of its task, if it made one.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, Serialize)]
pub struct FireRow {
    pub schedule_id: Uuid,
    pub fire_at: DateTime<Utc>,
    /// enqueued, triggered, skipped_overlap, skipped_missed, buffered or capped.
    pub decision: String,
    pub task_id: Option<Uuid>,
    pub decided_at: DateTime<Utc>,
    /// The task's status; null when the fire made no task (or the task was pruned).
    pub task_status: Option<String>,
}

const FIRE_COLUMNS: &str = "f.schedule_id, f.fire_at, f.decision, f.task_id, f.decided_at, \
     t.status AS task_status";

/// A schedule's fires, newest first, before `before` when given.
pub async fn history(
    pool: &PgPool,
    schedule_id: Uuid,
    before: Option<DateTime<Utc>>,
    limit: i64,
) -> sqlx::Result<Vec<FireRow>> {
    sqlx::query_as::<_, FireRow>(&format!(
        "SELECT {FIRE_COLUMNS} FROM schedule_fires f LEFT JOIN tasks t USING (task_id) \
         WHERE f.schedule_id = $1 AND ($2::timestamptz IS NULL OR f.fire_at < $2) \
         ORDER BY f.fire_at DESC LIMIT $3"
    ))
    .bind(schedule_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The `per_schedule` latest fires of each of `schedule_ids`, newest first.
pub async fn recent(
    pool: &PgPool,
    schedule_ids: &[Uuid],
    per_schedule: i64,
) -> sqlx::Result<Vec<FireRow>> {
    sqlx::query_as::<_, FireRow>(&format!(
        "SELECT {FIRE_COLUMNS} FROM unnest($1::uuid[]) AS s(schedule_id) \
         CROSS JOIN LATERAL ( \
             SELECT * FROM schedule_fires f WHERE f.schedule_id = s.schedule_id \
             ORDER BY f.fire_at DESC LIMIT $2) AS f \
         LEFT JOIN tasks t ON t.task_id = f.task_id \
         ORDER BY f.schedule_id, f.fire_at DESC"
    ))
    .bind(schedule_ids)
    .bind(per_schedule)
    .fetch_all(pool)
    .await
}
