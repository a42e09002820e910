//! Fair shares (CONTRACT v3 §15): a task of a tenant held to `tenants.max_running` starts
//! only when admission gives it one of the tenant's slots. Over the limit (or behind its
//! tenant's waiting tasks) it is held: `waiting`, reason `tenant_limit`, no lease, its
//! message acknowledged, `task.waiting` published. When a slot frees, the tenant's first
//! held task (priority `high` first, then arrival) is given it and its message enqueued;
//! the claim that reads the message takes it. A sweep in every worker gives the slots that
//! tasks ending elsewhere (or whose worker died) freed, to the tenants that wait by weighted
//! round robin (`core::fair_share::round_robin`), so one tenant's flood cannot starve
//! another's tasks of the fleet's attention.
//!
//! Tenants without a limit never come here: their tasks are recorded `running` at intake,
//! in the one statement that records them (`store::tasks::take_at`).

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::fleet::Fleet;
use super::unheld::{Sink, store_events};
use crate::amqp::Publisher;
use crate::contract::events::{EventData, TaskWaiting};
use crate::core::fair_share::{self, Admission, Contender};
use crate::core::machine::WaitReason;
use crate::store::tenants;

/// How often a worker looks for held tasks that freed slots could start.
const SWEEP_PERIOD: Duration = Duration::from_secs(1);
/// Slots a sweep gives out at most per pass (by weighted round robin across tenants).
const SWEEP_BATCH: usize = 64;
/// Tenants with held tasks a sweep looks at per pass.
const SWEEP_TENANTS: i64 = 1000;

/// What admission decided for a task of a limited tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// It has a slot: claim it now.
    Run,
    /// It is held (`tenant_limit`); its message can be acknowledged.
    Held,
    /// It is neither pending nor held any more (cancelled, or taken): look again.
    Gone,
}

/// Decides, under `tenant_id`'s lock, whether `task_id` (pending, or held after intake)
/// may start now, and holds it if not.
pub async fn admit(fleet: &Fleet, task_id: Uuid, tenant_id: &str) -> anyhow::Result<Admitted> {
    let mut tx = fleet.pool.begin().await?;
    tenants::lock(&mut tx, tenant_id).await?;
    let Some(standing) = tenants::standing(&mut tx, task_id).await? else {
        tx.rollback().await?;
        return Ok(Admitted::Gone);
    };
    let marked = standing.wait_reason.as_deref() == Some("tenant_limit");
    match (standing.status.as_str(), marked) {
        // Given a slot already (freed from the queue, or admitted before a crash).
        ("pending", true) => {
            tx.rollback().await?;
            return Ok(Admitted::Run);
        }
        ("pending", false) | ("waiting", true) => {}
        _ => {
            tx.rollback().await?;
            return Ok(Admitted::Gone);
        }
    }
    let max = standing.max_running.map(|m| u32::try_from(m).unwrap_or(0));
    let occupied = u32::try_from(standing.occupied).unwrap_or(u32::MAX);
    if fair_share::admit(max, occupied, standing.ahead) == Admission::Run {
        tenants::give_slot(&mut tx, task_id).await?;
        tx.commit().await?;
        return Ok(Admitted::Run);
    }
    tenants::hold(&mut tx, task_id).await?;
    tracing::info!(%task_id, tenant = %crate::core::bounded::quote(tenant_id), occupied,
        ahead = standing.ahead, "task held by its tenant's max_running");
    let waiting = EventData::TaskWaiting(TaskWaiting {
        reason: WaitReason::TenantLimit,
        tool_call_ids: Vec::new(),
    });
    let iterations = u32::try_from(standing.iterations).unwrap_or(0);
    store_events(
        Sink::of(fleet),
        tx,
        task_id,
        standing.agent_id,
        iterations,
        vec![waiting],
    )
    .await?;
    // Held behind others while slots are free: those go first, now.
    if standing.ahead && fair_share::free_slots(max, occupied) > 0 {
        slot_freed(fleet, tenant_id).await;
    }
    Ok(Admitted::Held)
}

/// Gives `tenant_id`'s free slots to its held tasks, at most `at_most`, and enqueues their
/// messages (before the commit: a claim waits on the row until then). Returns how many.
pub async fn free(
    pool: &PgPool,
    publisher: &Publisher,
    tasks_queue: &str,
    tenant_id: &str,
    at_most: usize,
) -> anyhow::Result<usize> {
    let mut tx = pool.begin().await?;
    tenants::lock(&mut tx, tenant_id).await?;
    let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
    let freed = tenants::free(&mut tx, tenant_id, at_most).await?;
    for task in &freed {
        let Some(message) = super::reconcile::message_of(task) else {
            tx.rollback().await?;
            anyhow::bail!("held task {} has no agent or input", task.task_id);
        };
        publisher
            .publish_task(tasks_queue, &serde_json::to_vec(&message)?)
            .await?;
    }
    tx.commit().await?;
    for task in &freed {
        tracing::info!(task_id = %task.task_id, "task given a slot of its tenant");
    }
    Ok(freed.len())
}

/// After a task of a limited tenant stopped running here: its slot goes to the tenant's
/// next held tasks (the sweep retries if this fails).
pub async fn slot_freed(fleet: &Fleet, tenant_id: &str) {
    let (pool, publisher, queue) = (&fleet.pool, &fleet.publisher, &fleet.names.tasks_queue);
    if let Err(err) = free(pool, publisher, queue, tenant_id, SWEEP_BATCH).await {
        let tenant = crate::core::bounded::quote(tenant_id);
        tracing::warn!(%tenant, error = %format!("{err:#}"), "held tasks not freed yet");
    }
}

/// Gives the slot a task held back when it stops running here (`None`: its tenant has no
/// limit, and nothing is done).
pub async fn give_back(fleet: &Fleet, slot: Option<&str>) {
    if let Some(tenant_id) = slot {
        slot_freed(fleet, tenant_id).await;
    }
}

/// Gives freed slots to held tasks every [`SWEEP_PERIOD`] until `stop`.
pub fn spawn_sweep(
    pool: PgPool,
    publisher: Publisher,
    tasks_queue: String,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pass = || sweep_once(&pool, &publisher, &tasks_queue);
        super::sweep::every(SWEEP_PERIOD, &stop, "the tenant sweep", pass).await;
    })
}

/// One pass: the tenants whose held tasks could start, served one slot at a time by
/// weighted round robin, at most [`SWEEP_BATCH`] slots.
async fn sweep_once(pool: &PgPool, publisher: &Publisher, tasks_queue: &str) -> anyhow::Result<()> {
    let waiting = tenants::contenders(pool, SWEEP_TENANTS).await?;
    if waiting.is_empty() {
        return Ok(());
    }
    let contenders: Vec<Contender> = waiting
        .iter()
        .map(|tenant| Contender {
            weight: u32::try_from(tenant.weight).unwrap_or(1).max(1),
            startable: u32::try_from(tenant.startable).unwrap_or(u32::MAX),
        })
        .collect();
    for pick in fair_share::round_robin(&contenders, SWEEP_BATCH) {
        let tenant = &waiting[pick].tenant_id;
        free(pool, publisher, tasks_queue, tenant, 1).await?;
    }
    Ok(())
}
