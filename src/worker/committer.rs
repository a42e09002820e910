//! Group commit: the steps of every task that are ready at the same moment are written by
//! one statement ([`store::step::write_many`]), so the round trip, the executor start and
//! the WAL flush are shared instead of paid per step. A few committer lanes take turns on
//! one queue: each takes what is waiting (up to [`MAX_BATCH`]), writes it, and answers
//! every step with its own result; a lone step is written at once, without waiting for
//! company. Each step is still fenced by its own task's lease (a failed fence fails that
//! step only), and a statement that fails for a reason other than the database being away
//! is retried step by step, so one bad step cannot fail its neighbours.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::outbox::events::Outbound;
use crate::store::{
    self,
    step::{Step, StepWrite},
};

/// Steps written by one statement at most.
const MAX_BATCH: usize = 64;

/// Statements in flight at once (each on its own connection).
const LANES: usize = 2;

/// A step handed to the committer, given back with its result.
pub struct Done {
    /// Whether the step was written (false: its task's lease is no longer its writer's).
    pub result: sqlx::Result<bool>,
    pub write: StepWrite,
    pub outbound: Outbound,
}

struct Job {
    write: StepWrite,
    outbound: Outbound,
    reply: oneshot::Sender<Done>,
}

/// The handle steps are committed through.
#[derive(Debug, Clone)]
pub struct Committer {
    jobs: mpsc::UnboundedSender<Job>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("task_id", &self.write.task_id)
            .finish()
    }
}

impl Committer {
    /// Starts the lanes; they stop when the last handle is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (jobs, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..LANES {
            tokio::spawn(lane(pool.clone(), Arc::clone(&receiver)));
        }
        Self { jobs }
    }

    /// Writes `write` with the fresh events of `outbound`, in a statement shared with the
    /// other steps ready now. `Err` only when the committer is gone (the runtime is
    /// stopping): the step is lost with it and the task resumes elsewhere.
    pub async fn commit(&self, write: StepWrite, outbound: Outbound) -> anyhow::Result<Done> {
        let (reply, done) = oneshot::channel();
        let job = Job {
            write,
            outbound,
            reply,
        };
        anyhow::ensure!(self.jobs.send(job).is_ok(), "the committer has stopped");
        done.await
            .map_err(|_| anyhow::anyhow!("the committer stopped during the write"))
    }
}

async fn lane(pool: PgPool, receiver: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            let mut receiver = receiver.lock().await;
            if receiver.recv_many(&mut batch, MAX_BATCH).await == 0 {
                return;
            }
        }
        write_batch(&pool, std::mem::take(&mut batch)).await;
    }
}

async fn write_batch(pool: &PgPool, batch: Vec<Job>) {
    let result = {
        let rows: Vec<_> = batch.iter().map(|job| job.outbound.rows()).collect();
        let steps: Vec<Step<'_>> = batch
            .iter()
            .zip(&rows)
            .map(|(job, events)| Step {
                write: &job.write,
                events,
            })
            .collect();
        store::step::write_many(pool, &steps).await
    };
    match result {
        Ok(written) => {
            for job in batch {
                let ok = written.contains(&job.write.task_id);
                job.answer(Ok(ok));
            }
        }
        Err(err) if batch.len() == 1 || is_transient(&err) => {
            let message = err.to_string();
            let mut first = Some(err);
            for job in batch {
                let err = first.take().unwrap_or_else(|| copy_error(&message));
                job.answer(Err(err));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, steps = batch.len(),
                "a shared step statement failed; writing its steps one by one");
            for job in batch {
                let rows = job.outbound.rows();
                let result = store::step::write(pool, &job.write, &rows).await;
                drop(rows);
                job.answer(result);
            }
        }
    }
}

impl Job {
    fn answer(self, result: sqlx::Result<bool>) {
        let _ = self.reply.send(Done {
            result,
            write: self.write,
            outbound: self.outbound,
        });
    }
}

fn is_transient(err: &sqlx::Error) -> bool {
    store::transient::sqlx_transient(err)
}

/// The error of a failed statement, for each step it carried (sqlx errors do not clone;
/// every step gets the same transient kind).
fn copy_error(message: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(message.to_owned()))
}
