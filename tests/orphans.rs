//! No task stays `running` with nobody on it (CONTRACT v2 §1, `worker.orphan_after_secs`): a
//! task whose worker died and whose message is gone is re-enqueued by the reconciler and
//! completes exactly once, resuming from its checkpoint.

#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use support::harness::{TestEnv, assert_whole_stream};
use support::process::WorkerProcess;
use support::stateless_llm::StatelessLlm;

#[tokio::test]
async fn a_running_task_whose_message_is_gone_is_re_enqueued_and_completes() {
    let llm = StatelessLlm::start().await;
    let base_url = llm.base_url();
    let mut env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.lease_secs = 1.0;
        s.worker.orphan_after_secs = 1.0;
    })
    .await;
    let agent = env.agent(None, None).await;
    let input = "orphan steps=3 delay_ms=300";
    let task_id = env.submit(agent, input).await;
    let mut first = WorkerProcess::spawn(&env.settings, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let committed: i64 =
            sqlx::query_scalar("SELECT count(*) FROM recursions WHERE task_id = $1")
                .bind(task_id)
                .fetch_one(&env.pool)
                .await
                .unwrap();
        if committed >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "no progress: {}", first.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();
    // The broker gives the unacknowledged message back; drop it, as a broker that lost it
    // (a single node restarted from a lost disk, a requeue that failed) would.
    let channel = env.publisher.channel().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let purged = channel
            .queue_purge(
                env.settings.amqp.tasks_queue.as_str().into(),
                Default::default(),
            )
            .await
            .unwrap();
        if purged > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the message never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = WorkerProcess::spawn(&env.settings, &[]);
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{}", second.log());
    assert!(
        second.log().contains("orphan re-enqueued"),
        "{}",
        second.log()
    );
    let streams = env
        .published_streams(&[task_id], Duration::from_secs(10))
        .await;
    assert_whole_stream(task_id, &streams[&task_id]);
    let kinds: Vec<&str> = streams[&task_id]
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert!(kinds.contains(&"task.resumed"), "{kinds:?}");
    let iterations: Vec<i32> = sqlx::query_scalar(
        "SELECT iteration FROM recursions WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        iterations,
        vec![1, 2, 3, 4],
        "each recursion committed once"
    );
    drop(second);
    env.stop().await;
}
