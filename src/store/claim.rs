//! Taking a recorded task up (`tasks` rows that exist: a producer recorded them, a resume
//! or a freed turn made them `pending` again, or their worker died): [`claim`] reads the
//! row and, when nobody else holds the task, leases it to the caller. A pending task of a
//! tenant held to `tenants.max_running` is not taken here until admission gave it a slot
//! (CONTRACT v3 §15, `worker::admission`).

use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::tasks::status;

/// What the row of a task says about taking it up.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The task was pending: it is now ours, starting from its first recursion.
    Fresh,
    /// The task was running under an expired or released lease (its worker died or let it
    /// go): it is now ours, resuming from this point.
    Resume(ResumePoint),
    /// Another live worker holds the task.
    Busy,
    /// The task is pending and its tenant is held to `tenants.max_running` (CONTRACT v3
    /// §15): it starts only once admission gives it a slot (`worker::admission`), then a
    /// claim takes it. Nothing was changed.
    Gated { tenant_id: String },
    /// The task already ended with this status.
    Ended(String),
    /// No row: the task was never recorded.
    Missing,
}

/// Where a claimed task resumes.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePoint {
    /// The machine after its last committed step (None: no recursion committed).
    pub checkpoint: Option<String>,
    /// Set when a `resume` freed a `waiting` task: why (`resumed`, `budget`), and the
    /// budget it brought, if any.
    pub resumed: Option<(String, Option<Value>)>,
    /// Guidance injected while nobody held the task, oldest first.
    pub guidance: Vec<String>,
    /// Every event up to this seq is known to be confirmed by the broker; later ones are
    /// published again before anything newer.
    pub confirmed_seq: i64,
}

/// Takes the task for `owner` for `lease_secs` seconds if nobody else holds it, and pins it
/// to `version` (CONTRACT v3 §11: the version intake chose and read the agent at) unless it
/// is pinned already. The pin is needed here as well as at intake: a producer that
/// publishes a task's message and then records its row `pending` (the gateway) may commit
/// the row while intake's statement runs; intake's insert then finds the row (it waited for
/// it) but its pin, which reads the snapshot the statement started with, does not, and the
/// row would stay unpinned.
pub async fn claim(
    pool: &PgPool,
    task_id: Uuid,
    owner: Uuid,
    lease_secs: f64,
    version: Option<i32>,
) -> sqlx::Result<Claim> {
    let mut tx = pool.begin().await?;
    let row: Option<ClaimRow> = sqlx::query_as(
        "SELECT status, COALESCE(lease_until < now(), true) AS expired, checkpoint, \
                confirmed_seq, resume_reason, resume_budget, pending_guidance, tenant_id, \
                (status = 'pending' AND wait_reason IS DISTINCT FROM 'tenant_limit' \
                 AND EXISTS (SELECT 1 FROM tenants t WHERE t.tenant_id = tasks.tenant_id \
                             AND t.max_running IS NOT NULL)) AS gated \
         FROM tasks WHERE task_id = $1 FOR UPDATE",
    )
    .bind(task_id)
    .fetch_optional(&mut *tx)
    .await?;
    // A transaction dropped unfinished would keep the row locked until its connection is
    // used again: whoever looks at the task next (the outbox, with SKIP LOCKED) would miss it.
    let Some(row) = row else {
        tx.rollback().await?;
        return Ok(Claim::Missing);
    };
    let claim = row.claim();
    if matches!(claim, Claim::Busy | Claim::Ended(_) | Claim::Gated { .. }) {
        tx.rollback().await?;
        return Ok(claim);
    }
    sqlx::query(
        "UPDATE tasks SET status = 'running', started_at = COALESCE(started_at, now()), \
                lease_owner = $2, lease_until = now() + make_interval(secs => $3), \
                updated_at = now(), resume_reason = NULL, resume_budget = NULL, \
                pending_guidance = NULL, wait_reason = NULL, \
                agent_version = COALESCE(agent_version, $4) \
         WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(owner)
    .bind(lease_secs)
    .bind(version)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(claim)
}

/// What [`claim`] reads of a task's row.
#[derive(sqlx::FromRow)]
struct ClaimRow {
    status: String,
    expired: bool,
    checkpoint: Option<String>,
    confirmed_seq: i64,
    resume_reason: Option<String>,
    resume_budget: Option<Value>,
    pending_guidance: Option<Value>,
    tenant_id: String,
    /// Pending, of a tenant held to `max_running`, and not given a slot yet.
    gated: bool,
}

impl ClaimRow {
    /// What the row says about taking the task up.
    fn claim(self) -> Claim {
        let guidance: Vec<String> = (self.pending_guidance)
            .and_then(|g| serde_json::from_value(g).ok())
            .unwrap_or_default();
        let (checkpoint, confirmed_seq) = (self.checkpoint, self.confirmed_seq);
        match self.status.as_str() {
            status::PENDING if self.gated => Claim::Gated {
                tenant_id: self.tenant_id,
            },
            // A task a `resume` freed from `waiting`: it continues from its checkpoint.
            status::PENDING if checkpoint.is_some() => Claim::Resume(ResumePoint {
                checkpoint,
                confirmed_seq,
                resumed: Some((self.resume_reason.unwrap_or_default(), self.resume_budget)),
                guidance,
            }),
            status::PENDING => Claim::Fresh,
            // Our own live lease means this process runs it already: busy, like any holder.
            status::RUNNING if self.expired => Claim::Resume(ResumePoint {
                checkpoint,
                confirmed_seq,
                resumed: None,
                guidance,
            }),
            status::RUNNING => Claim::Busy,
            _ => Claim::Ended(self.status),
        }
    }
}
