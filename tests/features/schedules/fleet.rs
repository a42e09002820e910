//! One scheduler across the fleet: four `agentd worker` processes, an `every 2s`
//! schedule, the scheduler's holder killed with SIGKILL twice, then the next one stopped
//! with SIGTERM. Every fire time gets exactly one task (no fire time with two, none lost),
//! the fires go on within seconds of each kill on another worker, and a stopping worker
//! gives the scheduler up at once.

use std::time::{Duration, Instant};

use crate::support::harness::TestEnv;
use crate::support::process::WorkerProcess;
use crate::support::words;
use agentd::core::schedule::fire_task_id;
use chrono::{DateTime, TimeDelta, Utc};

use super::{WAIT, create, every, fires, tasks, wait_fires, wait_tasks_ended};

/// The OS pid of the process whose session holds the scheduler lock in the test's database
/// (its `application_name` says `agentd scheduler pid=PID ...`).
async fn holder(env: &TestEnv) -> Option<u32> {
    let name: Option<String> = sqlx::query_scalar(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
         WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 1634166126 \
           AND l.objid = 1952722291 \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_optional(&env.pool)
    .await
    .expect("pg_locks");
    let name = name?;
    let pid = name
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))?;
    pid.parse().ok()
}

/// Waits for a holder other than `not`; returns its pid and how long it took.
async fn new_holder(env: &TestEnv, not: Option<u32>) -> (u32, Duration) {
    let started = Instant::now();
    loop {
        if let Some(pid) = holder(env).await
            && Some(pid) != not
        {
            return (pid, started.elapsed());
        }
        assert!(
            started.elapsed() < WAIT,
            "no new scheduler holder after {not:?}"
        );
        tokio::time::sleep(crate::support::wait::POLL).await;
    }
}

/// Kills the worker process `pid` with SIGKILL; returns when.
fn kill(workers: &mut [WorkerProcess], pid: u32) -> DateTime<Utc> {
    let worker = workers
        .iter_mut()
        .find(|w| w.pid() == pid)
        .expect("the holder is one of the test's workers");
    worker.kill();
    Utc::now()
}

#[tokio::test]
async fn one_task_per_fire_time_while_the_scheduler_s_holder_is_killed_twice_then_stopped() {
    let llm = words::start().await;
    let base_url = llm.base_url();
    let env = TestEnv::without_worker(move |s| {
        s.llm.base_url = base_url;
        s.worker.lease_secs = 2.0;
        s.worker.shutdown_grace_secs = 1;
    })
    .await;
    let agent = env.agent(None, None).await;
    let mut workers: Vec<WorkerProcess> = (0..4)
        .map(|_| WorkerProcess::spawn(&env.settings, &[]))
        .collect();
    let mut draft = every(agent, "2s", "scheduled steps=0");
    // Every fire makes a task, whatever the previous one does: the count is exact.
    draft.overlap = Some("allow".into());
    let schedule = create(&env, draft, Utc::now()).await;
    let id = schedule.schedule_id;
    let (mut pid, _) = new_holder(&env, None).await;
    wait_fires(&env, id, "three fires", |f| f.len() >= 3).await;

    for round in 1..=2 {
        let killed_at = kill(&mut workers, pid);
        let (next, handover) = new_holder(&env, Some(pid)).await;
        // The next fire after the kill is made within seconds, by the new holder.
        let first_after = |f: &[(DateTime<Utc>, String, Option<uuid::Uuid>)]| {
            f.iter()
                .any(|(at, _, task)| *at > killed_at && task.is_some())
        };
        let after = wait_fires(&env, id, "a fire after the kill", first_after).await;
        let made_at: DateTime<Utc> = sqlx::query_scalar(
            "SELECT min(decided_at) FROM schedule_fires WHERE schedule_id = $1 AND fire_at > $2",
        )
        .bind(id)
        .bind(killed_at)
        .fetch_one(&env.pool)
        .await
        .expect("decided_at");
        let late = made_at - killed_at;
        eprintln!("kill {round}: hand-over in {handover:?}, next fire decided {late} after");
        assert!(
            late < TimeDelta::seconds(10),
            "kill {round}: fires resumed {late} after the kill"
        );
        assert!(after.len() >= 3, "{after:?}");
        pid = next;
        let seen = after.len();
        wait_fires(&env, id, "more fires", |f| f.len() >= seen + 2).await;
    }
    // SIGTERM: the holder gives the lock up as it starts draining, the last worker takes it.
    let stopping = workers
        .iter_mut()
        .find(|w| w.pid() == pid)
        .expect("the holder");
    stopping.terminate();
    let (_, handover) = new_holder(&env, Some(pid)).await;
    let stopping = workers
        .iter_mut()
        .find(|w| w.pid() == pid)
        .expect("the holder");
    let exit = stopping.wait(WAIT).await.expect("the stopped worker exits");
    assert!(exit.success(), "{exit:?}");
    assert!(
        stopping.log().contains("scheduler given up"),
        "{}",
        stopping.log()
    );
    eprintln!("SIGTERM: hand-over in {handover:?}");
    let seen = fires(&env, id).await.len();
    wait_fires(&env, id, "fires after the SIGTERM", |f| f.len() >= seen + 2).await;

    // Stop the clock, let the tasks end.
    sqlx::query("UPDATE schedules SET paused = true, next_fire_at = NULL WHERE schedule_id = $1")
        .bind(id)
        .execute(&env.pool)
        .await
        .expect("pause");
    wait_tasks_ended(&env, id).await;

    let fires = fires(&env, id).await;
    let tasks = tasks(&env, id).await;
    // Fire times are consecutive (every 2 s, none lost), each enqueued once with its id.
    for pair in fires.windows(2) {
        assert_eq!(
            pair[1].0 - pair[0].0,
            TimeDelta::seconds(2),
            "a gap: {fires:?}"
        );
    }
    for (fire_at, decision, task_id) in &fires {
        assert_eq!(decision, "enqueued", "{fires:?}");
        assert_eq!(*task_id, Some(fire_task_id(id, *fire_at)));
    }
    // Exactly one task per fire time, and every task ran to its end.
    let fire_times: Vec<_> = fires.iter().map(|f| Some(f.0)).collect();
    let task_times: Vec<_> = tasks.iter().map(|t| t.1).collect();
    assert_eq!(task_times, fire_times, "tasks per fire time");
    for (task_id, _, status) in &tasks {
        assert_eq!(status, "completed", "{task_id}");
    }
    for worker in &mut workers {
        worker.kill();
    }
    env.stop().await;
}
