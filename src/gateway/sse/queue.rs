//! What one event stream may hold for its client: a queue bounded in bytes
//! (`gateway.stream_buffer_bytes`), not in events, since one event may be megabytes. The
//! follower waits for room before it queues the next event, so a client that reads slowly
//! (or not at all) makes the follower wait, not the gateway's memory grow: it holds at most
//! this queue and one page of stored events. A single event larger than the whole bound is
//! queued alone, once the queue is empty. Nothing is skipped, so resuming by seq works as
//! ever. [`StreamStats`] counts what the streams read and hold.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::response::sse::Event;
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Events queued per client at most, whatever their size (the byte bound usually binds
/// first).
const MAX_QUEUED_EVENTS: usize = 256;

/// Counters over every event stream of a gateway.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Stored events read from the `events` table.
    pub events_read: AtomicU64,
    /// Pages of stored events read.
    pub pages_read: AtomicU64,
    /// Events queued for clients.
    pub events_queued: AtomicU64,
    /// The most bytes one stream has had queued at once.
    pub peak_queued_bytes: AtomicU64,
    /// Times a follower waited because its client had not read enough.
    pub waits: AtomicU64,
}

/// The sending side, held by the follower.
pub(super) struct QueueSender {
    tx: mpsc::Sender<(Event, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
    max_bytes: usize,
    stats: Arc<StreamStats>,
}

/// A byte-bounded queue of SSE events: the follower's end and the response body's end.
pub(super) fn queue(
    max_bytes: usize,
    stats: Arc<StreamStats>,
) -> (
    QueueSender,
    impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
) {
    let max_bytes = max_bytes.clamp(1, u32::MAX as usize);
    let (tx, rx) = mpsc::channel(MAX_QUEUED_EVENTS);
    let sender = QueueSender {
        tx,
        room: Arc::new(Semaphore::new(max_bytes)),
        max_bytes,
        stats,
    };
    // The permit goes when hyper takes the event: from then on hyper's own bounded write
    // buffer holds it.
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|(event, _permit)| (Ok::<_, Infallible>(event), rx))
    });
    (sender, events)
}

impl QueueSender {
    /// Queues `event` of `bytes` bytes, waiting for room. False when the client has gone.
    pub(super) async fn send(&self, event: Event, bytes: usize) -> bool {
        let wanted = bytes.clamp(1, self.max_bytes);
        let permits = u32::try_from(wanted).unwrap_or(u32::MAX);
        let permit = match Arc::clone(&self.room).try_acquire_many_owned(permits) {
            Ok(permit) => permit,
            Err(_) => {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    permit = Arc::clone(&self.room).acquire_many_owned(permits) => match permit {
                        Ok(permit) => permit,
                        Err(_) => return false,
                    },
                    () = self.tx.closed() => return false,
                }
            }
        };
        let queued = self.max_bytes - self.room.available_permits();
        self.stats
            .peak_queued_bytes
            .fetch_max(queued as u64, Ordering::Relaxed);
        self.stats.events_queued.fetch_add(1, Ordering::Relaxed);
        self.tx.send((event, permit)).await.is_ok()
    }

    /// Resolves when the client has gone.
    pub(super) async fn closed(&self) {
        self.tx.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;

    use super::*;

    #[tokio::test]
    async fn a_full_queue_waits_for_the_reader() {
        let stats = Arc::new(StreamStats::default());
        let (sender, events) = queue(100, Arc::clone(&stats));
        let mut events = Box::pin(events);
        assert!(sender.send(Event::default().data("a"), 60).await);
        let second = sender.send(Event::default().data("b"), 60);
        tokio::pin!(second);
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(50), &mut second);
        assert!(blocked.await.is_err(), "no room for 60 more bytes");
        assert!(events.next().await.is_some());
        assert!(second.await, "room once the reader took the first");
        // An event larger than the bound goes alone.
        assert!(events.next().await.is_some());
        assert!(sender.send(Event::default().data("c"), 1_000).await);
        assert_eq!(stats.peak_queued_bytes.load(Ordering::Relaxed), 100);
        assert_eq!(stats.waits.load(Ordering::Relaxed), 1);
        drop(events);
        assert!(
            !sender.send(Event::default().data("d"), 1).await,
            "client gone"
        );
    }
}
