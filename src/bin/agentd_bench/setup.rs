//! One isolated benchmark environment on the local services: a fresh database
//! `agentd_bench_<random>` (created and migrated, one agent inserted), uniquely named queues
//! and exchanges, a subscription to the events exchange made before anything is published,
//! the `AGENTD__` environment that points a worker at all of it, and the cleanup that drops
//! the database and deletes the queues and exchanges.

use std::sync::Arc;

use anyhow::Context as _;
use lapin::options::{ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use sqlx::PgPool;
use uuid::Uuid;

use agentd::amqp::{Broker, Publisher};
use agentd::config::Settings;
use agentd::store;

/// The environment of one run.
pub struct BenchEnv {
    /// The settings the worker gets (names, database URL, LLM URL, concurrency).
    pub settings: Settings,
    pub pool: PgPool,
    pub publisher: Publisher,
    /// The agent every task runs.
    pub agent_id: Uuid,
    database: String,
    admin_url: String,
}

/// `url` with its database name replaced by `name` (query parameters kept).
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let mut parsed = reqwest::Url::parse(url).with_context(|| format!("database.url {url:?}"))?;
    parsed.set_path(&format!("/{name}"));
    Ok(parsed.to_string())
}

impl BenchEnv {
    /// Renames everything after a random suffix, creates the database (with
    /// `synchronous_commit` set on it when given) and the agent (`max_iteration` at least
    /// `recursions`), declares the topology.
    pub async fn create(
        mut settings: Settings,
        llm_base_url: String,
        concurrency: u16,
        recursions: u32,
        synchronous_commit: Option<&str>,
    ) -> anyhow::Result<Self> {
        let suffix = Uuid::new_v4().simple().to_string()[..12].to_owned();
        let database = format!("agentd_bench_{suffix}");
        let admin_url = with_database(&settings.database.url, "postgres")?;
        settings.database.url = with_database(&settings.database.url, &database)?;
        settings.amqp = settings.amqp.renamed(&format!("bench.{suffix}"));
        settings.llm.base_url = llm_base_url;
        settings.worker.concurrency = concurrency;
        let pool = store::prepare(&settings.database.url, 4)
            .await
            .context("creating the bench database")?;
        if let Some(value) = synchronous_commit {
            // Applies to the connections opened after it: the worker's, not yet started.
            sqlx::query(&format!(
                "ALTER DATABASE \"{database}\" SET synchronous_commit = '{value}'"
            ))
            .execute(&pool)
            .await
            .context("setting synchronous_commit on the bench database")?;
        }
        let agent = store::agents::NewAgent {
            name: "agentd-bench".into(),
            model: "bench-model".into(),
            max_iteration: Some(i32::try_from(recursions.max(30)).unwrap_or(i32::MAX)),
            tools: None,
            approval_tools: None,
            approval_timeout_secs: None,
            on_approval_expiry: None,
            instructions: None,
            // The bench's model repeats one call on purpose: no stall detection.
            stall: Some(agentd::core::stall::StallSettings::OFF),
            on_unknown: None,
            tenant_id: None,
        };
        let agent_id = store::agents::create(&pool, &agent)
            .await
            .context("creating the bench agent")?;
        let publisher = agentd::amqp::connect_declared(&settings).await?;
        Ok(Self {
            settings,
            pool,
            publisher,
            agent_id,
            database,
            admin_url,
        })
    }

    /// Fills the database with `tasks` ended tasks of another agent, each with `events`
    /// events, five recursions, five LLM attempts and four tool calls, in the partitions of
    /// their creation times, then analyzes it: a database that has run for a while, for the
    /// growth run.
    pub async fn preload(&self, tasks: u64, events: u64) -> anyhow::Result<()> {
        let (tasks, events) = (i64::try_from(tasks)?, i64::try_from(events)?);
        // The preloaded tasks were created over the last `tasks` seconds: their partitions
        // exist before their rows, as in a database that has run for that long.
        let now = chrono::Utc::now();
        let oldest = now - chrono::TimeDelta::seconds(tasks.saturating_add(60));
        let layout = self.settings.partitions.layout()?;
        store::partitions::cover(&self.pool, &layout, oldest, now)
            .await
            .context("making the partitions of the preload")?;
        let other_agent = Uuid::now_v7();
        let statements = [
            "INSERT INTO tasks (task_id, agent_id, input, status, iterations, answer, plan, \
                                created_at, started_at, finished_at, updated_at, event_seq, \
                                confirmed_seq, prompt_tokens, completion_tokens) \
             SELECT gen_random_uuid(), $1, 'preloaded task ' || n, 'completed', 5, 'done', \
                    '[]'::jsonb, now() - make_interval(secs => n), now() - make_interval(secs => n), \
                    now() - make_interval(secs => n), now() - make_interval(secs => n), $3, $3, \
                    500, 100 \
             FROM generate_series(1, $2) AS n",
            "INSERT INTO events (task_id, seq, event_id, type, payload, created_at, \
                                 task_created_at) \
             SELECT t.task_id, s, gen_random_uuid(), 'recursion.completed', \
                    jsonb_build_object('seq', s, 'type', 'recursion.completed', \
                                       'data', jsonb_build_object('iteration', s)), t.created_at, \
                    t.created_at \
             FROM tasks t, generate_series(1, $2) AS s WHERE t.agent_id = $1",
            "INSERT INTO recursions (trace_id, task_id, iteration, action_type, observe, thought, \
                                     abstract, output, status, started_at, finished_at, \
                                     task_created_at) \
             SELECT gen_random_uuid(), t.task_id, i, 'CALL_TOOL', 'observed', 'thought', \
                    'abstract', '{}'::jsonb, 'done', t.created_at, t.created_at, t.created_at \
             FROM tasks t, generate_series(1, 5) AS i WHERE t.agent_id = $1",
            "INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms, \
                                    prompt_tokens, completion_tokens, created_at, \
                                    task_created_at) \
             SELECT r.task_id, r.trace_id, r.iteration, 1, '200', 700, 100, 20, r.started_at, \
                    r.task_created_at \
             FROM recursions r JOIN tasks t USING (task_id) WHERE t.agent_id = $1",
            "INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, \
                                     result, duration_ms, state, effect, task_created_at) \
             SELECT r.task_id, r.trace_id, 'call_' || r.iteration, 'calculate', \
                    '{\"expression\": \"1+1\"}'::jsonb, true, '2'::jsonb, 1, 'succeeded', \
                    'read_only', r.task_created_at \
             FROM recursions r JOIN tasks t USING (task_id) \
             WHERE t.agent_id = $1 AND r.iteration <= 4",
        ];
        // Each statement reads the parameters it names: $1 the agent, $2 tasks, $3 events.
        for (index, statement) in statements.iter().enumerate() {
            let query = sqlx::query(statement).bind(other_agent);
            let query = match index {
                0 => query.bind(tasks).bind(events),
                1 => query.bind(events),
                _ => query,
            };
            query
                .execute(&self.pool)
                .await
                .context("preloading the database")?;
        }
        sqlx::query("ANALYZE")
            .execute(&self.pool)
            .await
            .context("analyzing the preloaded database")?;
        Ok(())
    }

    /// The broker connection the bench uses.
    pub fn broker(&self) -> &Arc<Broker> {
        self.publisher.broker()
    }

    /// The `AGENTD__` variables that make `agentd worker` use this environment.
    /// `db_pool` sets `database.max_connections` (else the worker's default applies).
    pub fn worker_env(&self, db_pool: Option<u32>) -> Vec<(String, String)> {
        let s = &self.settings;
        let mut env = vec![
            ("DATABASE__URL", s.database.url.clone()),
            ("LLM__BASE_URL", s.llm.base_url.clone()),
            ("WORKER__CONCURRENCY", s.worker.concurrency.to_string()),
            ("LOG__LEVEL", "warn".to_owned()),
        ];
        if let Some(size) = db_pool {
            env.push(("DATABASE__MAX_CONNECTIONS", size.to_string()));
        }
        let mut all = s.amqp.env();
        all.extend(
            env.into_iter()
                .map(|(key, value)| (format!("AGENTD__{key}"), value)),
        );
        all
    }

    /// Consumers on the tasks queue right now (the worker is ready when it has one).
    pub async fn task_consumers(&self) -> anyhow::Result<u32> {
        let channel = self.broker().channel().await?;
        let queue = channel
            .queue_declare(
                self.settings.amqp.tasks_queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .context("inspecting the tasks queue")?;
        let _ = channel.close(200, "inspected".into()).await;
        Ok(queue.consumer_count())
    }

    /// Deletes the queues and exchanges, closes the connections and drops the database.
    /// Best effort: every step runs, failures are printed.
    pub async fn cleanup(self) {
        let names = &self.settings.amqp;
        match self.broker().channel().await {
            Ok(channel) => {
                for queue in names.queues() {
                    let options = QueueDeleteOptions::default();
                    if let Err(err) = channel.queue_delete(queue.into(), options).await {
                        eprintln!("[bench] could not delete the queue {queue}: {err}");
                    }
                }
                for exchange in names.exchanges() {
                    let options = ExchangeDeleteOptions::default();
                    let deleted = channel.exchange_delete(exchange.into(), options);
                    if let Err(err) = deleted.await {
                        eprintln!("[bench] could not delete the exchange {exchange}: {err}");
                    }
                }
            }
            Err(err) => eprintln!("[bench] could not clean up RabbitMQ: {err:#}"),
        }
        self.broker().close().await;
        self.pool.close().await;
        if let Err(err) = drop_database(&self.admin_url, &self.database).await {
            eprintln!(
                "[bench] could not drop the database {}: {err:#}",
                self.database
            );
        }
    }
}

async fn drop_database(admin_url: &str, database: &str) -> anyhow::Result<()> {
    let admin = store::connect(admin_url, 1).await?;
    sqlx::query(&format!(
        "DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)"
    ))
    .execute(&admin)
    .await?;
    admin.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_name() {
        let url = "postgres://postgres@127.0.0.1:5432/agentd?sslmode=disable";
        assert_eq!(
            with_database(url, "agentd_bench_x").unwrap(),
            "postgres://postgres@127.0.0.1:5432/agentd_bench_x?sslmode=disable"
        );
    }
}
