//! Following one task's events for `agentd watch --task` and `agentd submit --wait` on a task
//! that exists already: the stored events first, then live ones from the events exchange,
//! deduplicated by seq (CONTRACT §3: at least once), until the terminal event. As in the
//! gateway's SSE route, the subscription is made before the stored events are read, and a
//! gap (a live seq beyond the next one, or a quiet spell) is filled from the `events` table,
//! since every event is stored before it is published. Events are relayed as their JSON
//! and read through the contract's [`EventHead`].

use std::time::Duration;

use futures::StreamExt;
use lapin::Consumer;
use serde_json::Value;
use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use crate::contract::events::EventHead;
use crate::store;

/// How often the table is read while no live event comes: an event stored and not yet
/// published (its worker died) is shown within this.
const QUIET_RESYNC: Duration = Duration::from_secs(2);

/// One task's stream, as far as it was shown.
pub struct Follow<'a> {
    pool: &'a PgPool,
    task_id: Uuid,
    last_seq: i64,
}

impl<'a> Follow<'a> {
    /// A follower of `task_id` that has shown nothing yet.
    pub fn new(pool: &'a PgPool, task_id: Uuid) -> Self {
        Self {
            pool,
            task_id,
            last_seq: 0,
        }
    }

    /// Shows the stored events after the last one shown; returns the terminal event if it
    /// was among them.
    pub async fn catch_up(
        &mut self,
        show: &mut impl FnMut(&Value) -> std::io::Result<()>,
    ) -> anyhow::Result<Option<Value>> {
        let stored = store::events::list_after(self.pool, self.task_id, self.last_seq).await?;
        for row in stored {
            if let Some(terminal) = self.offer(row.seq, &row.payload, show)? {
                return Ok(Some(terminal));
            }
        }
        Ok(None)
    }

    /// Shows `event` when it is the next one; returns it when it ends the task.
    fn offer(
        &mut self,
        seq: i64,
        event: &Value,
        show: &mut impl FnMut(&Value) -> std::io::Result<()>,
    ) -> anyhow::Result<Option<Value>> {
        if seq <= self.last_seq {
            return Ok(None);
        }
        show(event)?;
        self.last_seq = seq;
        let terminal = EventHead::from_value(event).is_some_and(|head| head.is_terminal());
        Ok(terminal.then(|| event.clone()))
    }

    /// Shows stored events, then live ones from `consumer` (subscribed to the events
    /// exchange before this is called), until the terminal event, which it returns; `None`
    /// when `deadline` passed first.
    pub async fn run(
        &mut self,
        consumer: &mut Consumer,
        deadline: Option<Instant>,
        show: &mut impl FnMut(&Value) -> std::io::Result<()>,
    ) -> anyhow::Result<Option<Value>> {
        if let Some(terminal) = self.catch_up(show).await? {
            return Ok(Some(terminal));
        }
        loop {
            let resync = Instant::now() + QUIET_RESYNC;
            let wake = deadline.map_or(resync, |deadline| resync.min(deadline));
            let next = tokio::time::timeout_at(wake, consumer.next()).await;
            let delivery = match next {
                Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
                Err(_) => None,
                Ok(Some(delivery)) => Some(delivery?),
                Ok(None) => anyhow::bail!("the subscription to the events exchange ended"),
            };
            let live = delivery.and_then(|d| serde_json::from_slice::<Value>(&d.data).ok());
            let ours = live.and_then(|event| {
                let head = EventHead::from_value(&event)?;
                (head.task_id == self.task_id).then_some((head.seq, event))
            });
            let terminal = match ours {
                Some((seq, event)) => self.live(seq, &event, show).await?,
                None => self.catch_up(show).await?,
            };
            if terminal.is_some() {
                return Ok(terminal);
            }
        }
    }

    /// A live event of the task: missing ones are read from the table first.
    async fn live(
        &mut self,
        seq: i64,
        event: &Value,
        show: &mut impl FnMut(&Value) -> std::io::Result<()>,
    ) -> anyhow::Result<Option<Value>> {
        if seq > self.last_seq + 1
            && let Some(terminal) = self.catch_up(show).await?
        {
            return Ok(Some(terminal));
        }
        self.offer(seq, event, show)
    }
}
