//! [`Fleet`]: what a task's life between runs needs of the worker it happens in.

use std::sync::Arc;

use sqlx::PgPool;
use uuid::Uuid;

use crate::amqp::Publisher;
use crate::config::{AmqpSettings, ControlSettings};

/// What a task's life between runs needs of the worker it happens in: the database and the
/// broker every worker of the fleet shares, the topology's names, this worker's id (in task
/// leases and its control queue) and the fleet's control keys. The run's own dependencies
/// (`worker::WorkerDeps`) hold one.
#[derive(Clone)]
pub struct Fleet {
    pub pool: PgPool,
    pub publisher: Publisher,
    pub names: AmqpSettings,
    /// This worker process's identity in task leases.
    pub worker_id: Uuid,
    /// `[control]`: the keys control messages are signed with (CONTRACT v3 §15).
    pub control: Arc<ControlSettings>,
}
