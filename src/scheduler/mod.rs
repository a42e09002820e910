//! The scheduler (CONTRACT v3 §14 "Schedules"): the driver around the pure
//! `core::schedule`. Every worker runs [`spawn`]'s loop beside its consumer; one of them at
//! a time, whichever holds the scheduler lock ([`lock`]), decides the due schedules' fires
//! every `schedules.tick_ms` ([`tick`]), each schedule in one transaction that records its
//! decisions, makes each fire's task and publishes it ([`fire`]). The others try to take
//! the lock at the same pace, so a holder killed with `kill -9` is replaced within about a
//! tick, and a holder that stops (SIGTERM) gives the lock up at once.
//!
//! Creating, changing, pausing, resuming, triggering and deleting schedules is
//! [`manage`], shared by `agentd schedule` and the gateway's `/v1/schedules`; a schedule's
//! task template is [`template`] and the checks of a request [`spec`].

pub mod fire;
pub mod lock;
pub mod manage;
pub mod spec;
pub mod template;
pub mod tick;

use chrono::Utc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::config::Settings;
use fire::Outlet;
use lock::Session;

/// Runs the scheduler loop of worker `worker_id` until `stop`; the lock is given up on the
/// way out.
pub fn spawn(
    settings: &Settings,
    publisher: Publisher,
    worker_id: Uuid,
    stop: CancellationToken,
) -> JoinHandle<()> {
    let database_url = settings.database.url.clone();
    let tasks_queue = settings.amqp.tasks_queue.clone();
    let schedules = settings.schedules.clone();
    tokio::spawn(async move {
        let outlet = Outlet {
            publisher: &publisher,
            tasks_queue: &tasks_queue,
        };
        let mut session: Option<Session> = None;
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(schedules.tick()) => {}
            }
            let round = round(&mut session, &database_url, worker_id, outlet, &schedules).await;
            match round {
                Ok(()) => failing = false,
                Err(err) => {
                    crate::metrics::scheduler_holder(false);
                    if let Some(lost) = session.take() {
                        if lost.holds() {
                            tracing::warn!(error = %format!("{err:#}"),
                                "scheduler session lost; another worker takes the scheduler over");
                        }
                        lost.close().await;
                    }
                    if !failing {
                        tracing::warn!(error = %format!("{err:#}"), "scheduler unavailable; retrying");
                    }
                    failing = true;
                }
            }
        }
        crate::metrics::scheduler_holder(false);
        if let Some(session) = session {
            let held = session.holds();
            session.close().await;
            if held {
                tracing::info!("scheduler given up for another worker");
            }
        }
    })
}

/// One round: open the session if needed, try the lock, and tick when holding it.
async fn round(
    session: &mut Option<Session>,
    database_url: &str,
    worker_id: Uuid,
    outlet: Outlet<'_>,
    schedules: &crate::config::SchedulesSettings,
) -> anyhow::Result<()> {
    if session.is_none() {
        *session = Some(Session::open(database_url, worker_id).await?);
    }
    let Some(session) = session.as_mut() else {
        return Ok(());
    };
    let held = session.holds();
    let holds = session.try_take().await?;
    crate::metrics::scheduler_holder(holds);
    if !holds {
        return Ok(());
    }
    if !held {
        tracing::info!(%worker_id, "this worker now runs the scheduler");
    }
    tick::tick(
        session.conn(),
        outlet,
        Utc::now(),
        schedules.on_time_grace(),
    )
    .await?;
    Ok(())
}
