//! `agentd submit`: publishes a task the way any producer would and, with --wait, waits for
//! its terminal event on a private reply queue (CONTRACT §9: `reply_to`, `correlation_id`)
//! and prints the answer. A wait that could never end is refused or bounded: with no worker
//! consuming the tasks queue nothing is published (the usual cause is a forgotten
//! `--config`); a task id that ran already prints its stored outcome (or follows its events
//! while it still runs) instead of publishing it again; `--timeout` bounds the wait.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use lapin::Consumer;
use serde_json::Value;
use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use super::follow::Follow;
use super::out::{errln, outln};
use super::watch::describe;
use crate::amqp::{self, Publisher};
use crate::config::Settings;
use crate::contract::TaskMessage;
use crate::contract::events::{Event, EventData};
use crate::store::{self, tasks::status};

/// Exit code of a wait that reached `--timeout` (as timeout(1) has it).
pub const TIMED_OUT: u8 = 124;

/// Publishes the task; prints its id, or waits for its end with `wait` (at most `timeout`).
pub async fn run(
    settings: &Settings,
    task: &TaskMessage,
    wait: bool,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    // The id is printed and used as the correlation id, so it is chosen here when the
    // caller left it out.
    let task_id = task.task_id.unwrap_or_else(Uuid::now_v7);
    let task = TaskMessage {
        task_id: Some(task_id),
        ..task.clone()
    };
    let deadline = timeout.map(|timeout| Instant::now() + timeout);
    let publisher = amqp::connect_declared(settings).await?;
    let done = submit(settings, &publisher, &task, wait, deadline).await;
    super::control::close(&publisher).await;
    done
}

async fn submit(
    settings: &Settings,
    publisher: &Publisher,
    task: &TaskMessage,
    wait: bool,
    deadline: Option<Instant>,
) -> anyhow::Result<ExitCode> {
    let task_id = task.task_id.unwrap_or_default();
    let queue = &settings.amqp.tasks_queue;
    if !agent_known(settings, task.agent_id).await {
        errln!(
            "agentd: no agent {} (`agentd agent list` shows the agents of this database); \
             nothing was published",
            task.agent_id
        );
        return Ok(ExitCode::FAILURE);
    }
    // Only a wait is worth the grace: a plain submit just says so and leaves the task queued.
    let grace = if wait { CONSUMER_GRACE } else { Duration::ZERO };
    let idle = !has_consumer(publisher, queue, grace).await?;
    if idle && wait {
        errln!("agentd: {}; nothing was published", no_worker(settings));
        return Ok(ExitCode::FAILURE);
    }
    if idle {
        errln!(
            "note: {}; the task waits in the queue until one starts",
            no_worker(settings)
        );
    }
    let body = serde_json::to_vec(task)?;
    if !wait {
        let turn = record_turn_or_warn(settings, task).await;
        let published = publisher.publish_task(queue, &body).await;
        withdraw_unpublished(turn.as_ref(), task_id, published.is_err()).await;
        published?;
        outln!("{task_id}")?;
        return Ok(ExitCode::SUCCESS);
    }
    if task.task_id.is_some()
        && let Some(code) = existing(settings, publisher, task_id, deadline).await?
    {
        return Ok(code);
    }
    // The reply queue exists before the task is published, so the reply cannot be missed.
    let channel = publisher.broker().channel().await?;
    let waited = async {
        let (reply_to, mut replies) = amqp::subscriber::reply_queue_on(&channel).await?;
        let correlation_id = task_id.to_string();
        let turn = record_turn_or_warn(settings, task).await;
        let published = publisher
            .publish_task_with_reply(queue, &body, &reply_to, &correlation_id)
            .await;
        withdraw_unpublished(turn.as_ref(), task_id, published.is_err()).await;
        published?;
        outln!("{task_id}")?;
        let reply = tokio::time::timeout_at(far(deadline), reply(&mut replies, &correlation_id));
        match reply.await {
            Ok(event) => outcome(&event?),
            Err(_) => Ok(timed_out(task_id)),
        }
    }
    .await;
    amqp::broker::close_channel(&channel).await;
    waited
}

/// How long a tasks queue with no consumer is watched for one before `--wait` is refused: a
/// worker started just before (`agentd worker & agentd submit --wait ...`) is still
/// connecting.
const CONSUMER_GRACE: Duration = Duration::from_secs(5);

/// How often the consumer count is read within [`CONSUMER_GRACE`].
const CONSUMER_POLL: Duration = Duration::from_millis(100);

/// Whether a worker consumes `queue`, or starts to within `grace`.
async fn has_consumer(publisher: &Publisher, queue: &str, grace: Duration) -> anyhow::Result<bool> {
    let until = Instant::now() + grace;
    loop {
        if amqp::topology::consumer_count(publisher.broker(), queue).await? > 0 {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        tokio::time::sleep(CONSUMER_POLL).await;
    }
}

/// Why `--wait` would wait forever: the queue has no consumer.
fn no_worker(settings: &Settings) -> String {
    let url = amqp::broker::split_urls(&settings.amqp.url)
        .into_iter()
        .next()
        .unwrap_or_default();
    let place = match amqp::broker::parse_url(&url) {
        Ok(uri) => format!(
            "vhost {} at {}:{}",
            uri.vhost, uri.authority.host, uri.authority.port
        ),
        Err(_) => amqp::broker::mask_password(&url),
    };
    format!(
        "no worker is consuming {} on {place}: start one (`agentd worker`, given the same \
         --config), or give this command the configuration of the running worker \
         (`--config config/dev.toml` for `agentd dev`)",
        settings.amqp.tasks_queue
    )
}

/// A `--task-id` that names a task already: its stored outcome when it ended, else its
/// events until it does. `None` when there is no such task.
async fn existing(
    settings: &Settings,
    publisher: &Publisher,
    task_id: Uuid,
    deadline: Option<Instant>,
) -> anyhow::Result<Option<ExitCode>> {
    let pool = store::connect(&settings.database.url, 2).await?;
    let Some(row) = store::tasks::get(&pool, task_id).await? else {
        return Ok(None);
    };
    // As after a publish: the id first, then the answer.
    outln!("{task_id}")?;
    let channel = publisher.broker().channel().await?;
    let exchange = &settings.amqp.events_exchange;
    let followed = async {
        // Subscribed before the stored events are read, so nothing falls in between.
        let mut consumer = amqp::subscriber::consume_fanout(&channel, exchange).await?;
        let mut follow = Follow::new(&pool, task_id);
        let mut quiet = |_: &Value| Ok(());
        if !status::is_terminal(&row.status) {
            errln!(
                "task {task_id} exists already ({}); waiting for its end",
                row.status
            );
        } else {
            errln!("task {task_id} has ended already; its stored outcome:");
            return match follow.catch_up(&mut quiet).await? {
                Some(terminal) => outcome(&terminal),
                None => row_outcome(&row),
            };
        }
        match follow.run(&mut consumer, deadline, &mut quiet).await? {
            Some(terminal) => outcome(&terminal),
            None => Ok(timed_out(task_id)),
        }
    }
    .await;
    amqp::broker::close_channel(&channel).await;
    pool.close().await;
    followed.map(Some)
}

/// The first reply with our correlation id.
async fn reply(replies: &mut Consumer, correlation_id: &str) -> anyhow::Result<Value> {
    while let Some(delivery) = replies.next().await {
        let delivery = delivery?;
        let ours = delivery
            .properties
            .correlation_id()
            .as_ref()
            .map(|id| id.as_str());
        if ours == Some(correlation_id) {
            return Ok(serde_json::from_slice(&delivery.data)?);
        }
    }
    anyhow::bail!("the reply queue closed before the task ended")
}

/// Prints a terminal event: its line on stderr, the answer on stdout; exit 0 only when the
/// task completed.
fn outcome(event: &Value) -> anyhow::Result<ExitCode> {
    errln!("{}", describe(event, false));
    let Some(EventData::TaskCompleted(completed)) = Event::from_value(event).map(|e| e.body) else {
        return Ok(ExitCode::FAILURE);
    };
    outln!("{}", completed.answer)?;
    Ok(ExitCode::SUCCESS)
}

/// The outcome of an ended task whose events are gone (pruned): from its row.
fn row_outcome(row: &store::tasks::TaskRow) -> anyhow::Result<ExitCode> {
    errln!("{} {}", row.status, row.error.as_deref().unwrap_or(""));
    match &row.answer {
        Some(answer) if row.status == status::COMPLETED => {
            outln!("{answer}")?;
            Ok(ExitCode::SUCCESS)
        }
        _ => Ok(ExitCode::FAILURE),
    }
}

fn timed_out(task_id: Uuid) -> ExitCode {
    errln!(
        "agentd: task {task_id} did not end within --timeout; it goes on (`agentd watch \
         --task {task_id}`, `agentd trace {task_id}`)"
    );
    ExitCode::from(TIMED_OUT)
}

/// The deadline, or one so far away that it never comes.
fn far(deadline: Option<Instant>) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    deadline.unwrap_or_else(|| Instant::now() + CENTURY)
}

/// [`record_turn`], or a warning when it could not be recorded: the message alone still
/// makes a turn, placed when a worker records it.
async fn record_turn_or_warn(settings: &Settings, task: &TaskMessage) -> Option<PgPool> {
    match record_turn(settings, task).await {
        Ok(turn) => turn,
        Err(err) => {
            errln!(
                "warning: the turn was not recorded before publishing ({err:#}): turns \
                 published at about the same time may run in another order"
            );
            None
        }
    }
}

/// A conversation turn is recorded as `pending` before it is published, which fixes its
/// place in the conversation whichever worker reads it first (CONTRACT §10). Returns the
/// pool it was recorded with; `None` for a task without a conversation or already recorded.
async fn record_turn(settings: &Settings, task: &TaskMessage) -> anyhow::Result<Option<PgPool>> {
    let (Some(task_id), Some(_)) = (task.task_id, task.conversation_id) else {
        return Ok(None);
    };
    let pool = crate::store::connect(&settings.database.url, 1).await?;
    let turn = crate::store::tasks::NewTask {
        task_id,
        agent_id: Some(task.agent_id),
        conversation_id: task.conversation_id,
        input: Some(&task.input),
        constraints: &task.constraints,
        stream: task.stream,
        reply: None,
        received_at: None,
        tenant_id: task.tenant_id.as_deref(),
        priority: task.priority.unwrap_or_default(),
        rerun: task.rerun,
    };
    let new = crate::store::conversations::record_turn(&pool, &turn)
        .await
        .context("recording the conversation turn")?;
    // A row that existed is not ours to withdraw.
    Ok(new.then_some(pool))
}

/// Withdraws a recorded turn whose message was not published.
async fn withdraw_unpublished(turn: Option<&PgPool>, task_id: Uuid, failed: bool) {
    if let (Some(pool), true) = (turn, failed) {
        let _ = crate::store::conversations::withdraw_turn(pool, task_id).await;
    }
}

/// Whether `agent_id` names an agent: a typo in `--agent` is refused here instead of being
/// dead-lettered by a worker later. A producer may reach the broker but not PostgreSQL: then
/// the task is published unchecked, with a note.
async fn agent_known(settings: &Settings, agent_id: Uuid) -> bool {
    let pool = match store::connect(&settings.database.url, 1).await {
        Ok(pool) => pool,
        Err(err) => {
            errln!("note: the agent was not checked ({err:#})");
            return true;
        }
    };
    let found = store::agents::get(&pool, agent_id).await;
    pool.close().await;
    match found {
        Ok(agent) => agent.is_some(),
        Err(err) => {
            errln!("note: the agent was not checked ({err})");
            true
        }
    }
}
