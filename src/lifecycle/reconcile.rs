//! The reconciler: no task stays `running` or `pending` with nobody on it. A task whose
//! worker died and whose message no delivery brings back (a message lost with a broker
//! that was not a cluster, a requeue that failed) is re-enqueued once it has been left
//! alone for `worker.orphan_after_secs`. Every worker runs the loop; one at a time works
//! (an advisory lock), at least every `orphan_after_secs`. A duplicate message is harmless:
//! the task id is the idempotency key and the lease fences the runner.

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use uuid::Uuid;

use super::fleet::Fleet;
use crate::amqp::Publisher;
use crate::contract::TaskMessage;
use crate::core::budget::Budget;
use crate::store::{self, reconcile::Orphan};

/// Orphans re-enqueued per round.
const BATCH: i64 = 200;

/// How often a worker tries to reconcile: a quarter of `orphan_after`, between 1 s and 60 s.
pub fn period(orphan_after: Duration) -> Duration {
    (orphan_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// Reconciles every [`period`] until `stop`.
pub fn spawn(
    pool: PgPool,
    publisher: Publisher,
    tasks_queue: String,
    orphan_after: Duration,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (pool, publisher, tasks_queue) = (&pool, &publisher, tasks_queue.as_str());
        let round = move || async move {
            let count = reconcile_once(pool, publisher, tasks_queue, orphan_after).await?;
            if count > 0 {
                tracing::warn!(count, "re-enqueued orphaned tasks");
            }
            Ok(())
        };
        super::sweep::every(period(orphan_after), &stop, "reconciling", round).await;
    })
}

/// One round: re-enqueues the orphans (if no other worker reconciles right now).
pub async fn reconcile_once(
    pool: &PgPool,
    publisher: &Publisher,
    tasks_queue: &str,
    orphan_after: Duration,
) -> anyhow::Result<usize> {
    let mut tx = pool.begin().await?;
    if !store::reconcile::try_lock(&mut tx).await? {
        tx.rollback().await?;
        return Ok(0);
    }
    let orphans =
        store::reconcile::take_orphans(&mut tx, orphan_after.as_secs_f64(), BATCH).await?;
    let mut sent = 0;
    for orphan in &orphans {
        let Some(message) = message_of(orphan) else {
            tracing::warn!(task_id = %orphan.task_id, "orphan without agent or input left alone");
            continue;
        };
        let body = serde_json::to_vec(&message)?;
        // A failed publish rolls the round back: the orphans are found again next time.
        publisher.publish_task(tasks_queue, &body).await?;
        tracing::info!(task_id = %orphan.task_id, status = %orphan.status, "orphan re-enqueued");
        sent += 1;
    }
    tx.commit().await?;
    Ok(sent)
}

/// Frees a task `waiting` for a pause or a budget and enqueues its message, in one
/// transaction: the message's claim waits on the row until the commit. Returns whether
/// the task waited for that.
pub async fn resume_waiting(
    fleet: &Fleet,
    task_id: Uuid,
    budget: Option<&Budget>,
) -> anyhow::Result<bool> {
    let mut tx = fleet.pool.begin().await?;
    let Some(task) = store::unheld::resume_waiting(&mut tx, task_id, budget).await? else {
        tx.rollback().await?;
        return Ok(false);
    };
    let Some(message) = message_of(&task) else {
        tx.rollback().await?;
        anyhow::bail!("task {task_id} has no agent or input to resume with");
    };
    let body = serde_json::to_vec(&message)?;
    fleet
        .publisher
        .publish_task(&fleet.names.tasks_queue, &body)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// The task message that brings an orphan back (with the budget its row keeps, when the
/// query read it).
pub(super) fn message_of(orphan: &Orphan) -> Option<TaskMessage> {
    Some(TaskMessage {
        task_id: Some(orphan.task_id),
        agent_id: orphan.agent_id?,
        input: orphan.input.clone()?,
        conversation_id: orphan.conversation_id,
        constraints: serde_json::from_value(orphan.constraints.clone()).unwrap_or_default(),
        stream: orphan.stream,
        budget: (orphan.budget.clone()).and_then(|budget| {
            crate::contract::intake::parse_budget(Some(budget))
                .ok()
                .flatten()
        }),
        agent_version: None,
        channel: None,
        tenant_id: None,
        priority: None,
        rerun: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_re_enqueued_message_keeps_the_task_s_budget() {
        let orphan = Orphan {
            task_id: Uuid::now_v7(),
            agent_id: Some(Uuid::now_v7()),
            input: Some("nightly report".into()),
            conversation_id: None,
            constraints: serde_json::json!(["be brief"]),
            stream: false,
            status: "pending".into(),
            budget: Some(serde_json::json!({"max_tokens": 500, "on_breach": "fail"})),
        };
        let message = message_of(&orphan).expect("a message");
        assert_eq!(message.budget.and_then(|b| b.max_tokens), Some(500));
        assert_eq!(message.constraints, ["be brief"]);
        let unbudgeted = Orphan {
            budget: None,
            ..orphan
        };
        assert_eq!(message_of(&unbudgeted).and_then(|m| m.budget), None);
    }

    #[test]
    fn the_period_is_a_quarter_of_the_orphan_age_within_bounds() {
        assert_eq!(period(Duration::from_secs(300)), Duration::from_secs(60));
        assert_eq!(period(Duration::from_secs(40)), Duration::from_secs(10));
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(1));
    }
}
