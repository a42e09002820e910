//! What a test looks at while tasks run, beside the task rows: the scripted model's
//! requests for a marker, a queue's messages and consumers, the outbox confirmed.

use uuid::Uuid;

use super::harness::TestEnv;
use super::wait;

impl TestEnv {
    /// Waits until the scripted model got at least `count` requests for `marker`
    /// ([`wait::NEXT_STEP_WITHIN`]): the task is in that LLM call (or past it).
    pub async fn wait_asked(&self, marker: &str, count: usize) {
        let what = format!("{count} request(s) for {marker:?}");
        wait::until_true(what, wait::NEXT_STEP_WITHIN, || async {
            self.fake.requests_for(marker).len() >= count
        })
        .await;
    }

    /// Waits until the task's outbox flag is clear and every stored event is confirmed: the
    /// worker is done with the task's row (its last update marks the events confirmed).
    pub async fn wait_confirmed(&self, task_id: Uuid) {
        wait::until_true(
            "every stored event confirmed",
            wait::NEXT_STEP_WITHIN,
            || async {
                let (pending, confirmed, stored): (bool, i64, i64) = sqlx::query_as(
                    "SELECT outbox_pending, confirmed_seq, event_seq FROM tasks WHERE task_id = $1",
                )
                .bind(task_id)
                .fetch_one(&self.pool)
                .await
                .expect("outbox columns");
                !pending && confirmed == stored && stored > 0
            },
        )
        .await;
    }

    /// `(ready messages, consumers)` of the queue `queue` now (a passive declare: the queue
    /// must exist). Messages a consumer holds unacknowledged are not counted.
    pub async fn queue_state(&self, queue: &str) -> (u32, u32) {
        let channel = self.publisher.broker().channel().await.expect("channel");
        let state = channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .unwrap_or_else(|err| panic!("queue {queue}: {err}"));
        let _ = channel.close(200, "done".into()).await;
        (state.message_count(), state.consumer_count())
    }
}

/// The messages in `queue`, ready and unacknowledged, as `rabbitmqctl list_queues` shows
/// them (a passive declare counts only the ready ones); `None` when it is not listed.
pub fn broker_messages(queue: &str) -> Option<u64> {
    let output = std::process::Command::new("rabbitmqctl")
        .args(["-q", "list_queues", "name", "messages"])
        .output()
        .expect("rabbitmqctl");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix(queue)?.trim().parse().ok())
}
