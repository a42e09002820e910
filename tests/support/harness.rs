//! An isolated agentd environment for one integration test: a fresh database, uniquely named
//! queues and exchanges on the local RabbitMQ, the scripted model over real HTTP
//! (`agentd::scripted_model`, scripted per test), and the real worker (`agentd::worker::run`)
//! running in this process against all three.

use std::path::Path;
use std::time::Duration;

use agentd::config::Settings;
use agentd::store;
use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use agentd::scripted_model::ScriptedModel;

use super::wait;

/// A running worker with its own database, broker names and scripted model.
pub struct TestEnv {
    pub settings: Settings,
    pub pool: PgPool,
    /// The scripted model `llm.base_url` points at.
    pub fake: ScriptedModel,
    pub publisher: agentd::amqp::Publisher,
    broker: std::sync::Arc<agentd::amqp::Broker>,
    events: lapin::Consumer,
    shutdown: CancellationToken,
    worker: Option<JoinHandle<anyhow::Result<()>>>,
    /// Whether the queues, exchanges and database are gone (by `stop`); if not, `Drop`
    /// removes them, so a test that panics or never stops leaks nothing.
    removed: bool,
}

/// Settings for a test: unique names, fast retries, pointing at `fake`.
pub fn test_settings(fake: &ScriptedModel) -> Settings {
    let mut settings =
        Settings::load_from(Path::new("config/default.toml"), None).expect("config/default.toml");
    let suffix = Uuid::new_v4().simple().to_string()[..12].to_owned();
    settings.database.url = format!("postgres://postgres@127.0.0.1:5432/agentd_test_{suffix}");
    settings.amqp = settings.amqp.renamed(&suffix);
    settings.llm.base_url = fake.base_url();
    settings.llm.timeout_ms = 5_000;
    settings.llm.retry.initial_delay_ms = 20;
    settings.llm.retry.max_delay_ms = 100;
    settings.worker.shutdown_grace_secs = 5;
    settings
}

impl TestEnv {
    /// Starts a scripted model and a worker with default test settings.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Like [`TestEnv::start`], letting the test adjust the settings first.
    pub async fn start_with(adjust: impl FnOnce(&mut Settings)) -> Self {
        let mut env = Self::without_worker(adjust).await;
        env.spawn_worker();
        env
    }

    /// Starts the worker in this process now (an environment made without one).
    pub fn spawn_worker(&mut self) {
        let worker = agentd::worker::run(self.settings.clone(), self.shutdown.clone());
        self.worker = Some(tokio::spawn(worker));
    }

    /// Like [`TestEnv::start_with`], the worker also offering the tools of `extra` (a tool
    /// source written for the test, e.g. slow or verbose tools), granted by default.
    pub async fn start_with_tools(
        adjust: impl FnOnce(&mut Settings),
        extra: std::sync::Arc<dyn agentd::ports::ToolSource>,
    ) -> Self {
        let mut env = Self::without_worker(adjust).await;
        let mut deps = agentd::worker::connect(&env.settings)
            .await
            .expect("worker deps");
        let mut tools = agentd::tools::ToolRegistry::builtin();
        tools.add(extra, "test", true);
        deps.tools = std::sync::Arc::new(tools);
        let (settings, shutdown) = (env.settings.clone(), env.shutdown.clone());
        env.worker = Some(tokio::spawn(async move {
            agentd::worker::serve(deps, &settings, shutdown).await;
            Ok(())
        }));
        env
    }

    /// The database, broker names and scripted model, but no worker: the test runs its own
    /// (for example the real binary as a child process, see `process.rs`).
    pub async fn without_worker(adjust: impl FnOnce(&mut Settings)) -> Self {
        let fake = ScriptedModel::start()
            .await
            .expect("the scripted model starts");
        let mut settings = test_settings(&fake);
        adjust(&mut settings);
        let pool = store::prepare(&settings.database.url, 4)
            .await
            .expect("database");
        let publisher = agentd::amqp::connect_declared(&settings)
            .await
            .expect("broker");
        let broker = std::sync::Arc::clone(publisher.broker());
        let events = agentd::amqp::subscriber::subscribe(&broker, &settings.amqp.events_exchange)
            .await
            .expect("subscribe");
        Self {
            settings,
            pool,
            fake,
            publisher,
            broker,
            events,
            shutdown: CancellationToken::new(),
            worker: None,
            removed: false,
        }
    }

    /// Inserts an agent with a plain SQL insert, as CONTRACT §4 allows, then sets options.
    pub async fn agent(&self, max_iteration: Option<i32>, tools: Option<&[&str]>) -> Uuid {
        let agent_id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO agents (agent_id, name, model) VALUES ($1, 'test-agent', 'fake-model')",
        )
        .bind(agent_id)
        .execute(&self.pool)
        .await
        .expect("insert agent");
        if let Some(max) = max_iteration {
            sqlx::query("UPDATE agents SET max_iteration = $2 WHERE agent_id = $1")
                .bind(agent_id)
                .bind(max)
                .execute(&self.pool)
                .await
                .expect("max_iteration");
        }
        if let Some(tools) = tools {
            let tools: Vec<String> = tools.iter().map(|t| (*t).to_owned()).collect();
            sqlx::query("UPDATE agents SET tools = $2 WHERE agent_id = $1")
                .bind(agent_id)
                .bind(tools)
                .execute(&self.pool)
                .await
                .expect("tools");
        }
        agent_id
    }

    /// Publishes a raw task body to the tasks queue as any producer would.
    pub async fn publish_raw(&self, body: &[u8]) {
        self.publisher
            .publish_task(&self.settings.amqp.tasks_queue, body)
            .await
            .expect("publish task");
    }

    /// Publishes a task for `agent_id` with `input` and returns its task_id.
    pub async fn submit(&self, agent_id: Uuid, input: &str) -> Uuid {
        let task_id = Uuid::now_v7();
        let body = json!({"task_id": task_id, "agent_id": agent_id, "input": input});
        self.publish_raw(body.to_string().as_bytes()).await;
        task_id
    }

    /// Waits until the task's row is terminal ([`wait::TASK_ENDS_WITHIN`]) and returns it.
    pub async fn wait_terminal(&self, task_id: Uuid) -> store::tasks::TaskRow {
        self.wait_terminal_within(task_id, wait::TASK_ENDS_WITHIN)
            .await
    }

    /// Waits until the task's row is terminal, at most `limit`, and returns it.
    pub async fn wait_terminal_within(
        &self,
        task_id: Uuid,
        limit: Duration,
    ) -> store::tasks::TaskRow {
        wait::until(format!("task {task_id} ends"), limit, || async {
            let task = store::tasks::get(&self.pool, task_id)
                .await
                .expect("get task");
            task.filter(|task| store::tasks::status::is_terminal(&task.status))
        })
        .await
    }

    /// Collects published events of `task_id` until its terminal event (or
    /// [`wait::TASK_ENDS_WITHIN`]).
    pub async fn published_events(&mut self, task_id: Uuid) -> Vec<Value> {
        let mut seen = Vec::new();
        let deadline = tokio::time::sleep(wait::TASK_ENDS_WITHIN);
        tokio::pin!(deadline);
        loop {
            let delivery = tokio::select! {
                () = &mut deadline => panic!("no terminal event for {task_id}: {seen:#?}"),
                delivery = self.events.next() => delivery,
            };
            let delivery = delivery
                .expect("event stream open")
                .expect("event delivery");
            let event: Value = serde_json::from_slice(&delivery.data).expect("event JSON");
            super::schema::assert_valid_event(&event);
            if event["task_id"] != json!(task_id) {
                continue;
            }
            let kind = event["type"].as_str().unwrap_or("").to_owned();
            seen.push(event);
            if matches!(
                kind.as_str(),
                "task.completed" | "task.failed" | "task.cancelled"
            ) {
                return seen;
            }
        }
    }

    /// Collects the published events of `tasks` until each has a gapless stream, deduped by
    /// `(task_id, seq)`, from seq 1 to its terminal event (or `within` runs out): what a
    /// subscriber that dedupes sees. Returns the streams, in seq order.
    pub async fn published_streams(
        &mut self,
        tasks: &[Uuid],
        within: Duration,
    ) -> std::collections::HashMap<Uuid, Vec<Value>> {
        use std::collections::{BTreeMap, HashMap};
        let mut seen: HashMap<Uuid, BTreeMap<i64, Value>> =
            tasks.iter().map(|t| (*t, BTreeMap::new())).collect();
        let complete = |stream: &BTreeMap<i64, Value>| {
            let terminal = stream.values().any(|e| {
                matches!(
                    e["type"].as_str(),
                    Some("task.completed" | "task.failed" | "task.cancelled")
                )
            });
            terminal && stream.keys().copied().eq(1..=stream.len() as i64)
        };
        let deadline = tokio::time::Instant::now() + within;
        while !seen.values().all(complete) {
            let delivery = tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                delivery = self.events.next() => delivery,
            };
            let delivery = delivery
                .expect("event stream open")
                .expect("event delivery");
            let event: Value = serde_json::from_slice(&delivery.data).expect("event JSON");
            super::schema::assert_valid_event(&event);
            let task = event["task_id"]
                .as_str()
                .and_then(|t| t.parse::<Uuid>().ok());
            if let (Some(stream), Some(seq)) =
                (task.and_then(|t| seen.get_mut(&t)), event["seq"].as_i64())
            {
                stream.insert(seq, event);
            }
        }
        seen.into_iter()
            .map(|(task, stream)| (task, stream.into_values().collect()))
            .collect()
    }

    /// Cancels a running task as `agentd cancel` does and checks that it ends `cancelled`
    /// within [`wait::CANCEL_WITHIN`], with task.cancelled as its last published event.
    pub async fn assert_cancels_within_a_second(&mut self, task_id: Uuid) {
        let sent = std::time::Instant::now();
        agentd::cli::cancel::run(&self.settings, task_id)
            .await
            .expect("cancel");
        let task = self.wait_terminal(task_id).await;
        let took = sent.elapsed();
        assert_eq!(task.status, "cancelled");
        assert!(took < wait::CANCEL_WITHIN, "cancelled in {took:?}");
        let events = self.published_events(task_id).await;
        assert_eq!(events.last().unwrap()["type"], "task.cancelled");
    }

    /// Waits until the task's status is `status` ([`wait::NEXT_STEP_WITHIN`]); returns how
    /// long it took.
    pub async fn wait_status(&self, task_id: Uuid, status: &str) -> Duration {
        let started = std::time::Instant::now();
        let what = format!("task {task_id} becomes {status}");
        wait::until_true(what, wait::NEXT_STEP_WITHIN, || async {
            let current: Option<String> =
                sqlx::query_scalar("SELECT status FROM tasks WHERE task_id = $1")
                    .bind(task_id)
                    .fetch_optional(&self.pool)
                    .await
                    .expect("status");
            current.as_deref() == Some(status)
        })
        .await;
        started.elapsed()
    }

    /// The stored events of a task, in seq order.
    pub async fn stored_events(&self, task_id: Uuid) -> Vec<Value> {
        sqlx::query_scalar::<_, Value>("SELECT payload FROM events WHERE task_id = $1 ORDER BY seq")
            .bind(task_id)
            .fetch_all(&self.pool)
            .await
            .inspect(|events| events.iter().for_each(super::schema::assert_valid_event))
            .expect("events")
    }

    /// Reads one message from the dead-letter queue, waiting up to
    /// [`wait::DEAD_LETTER_WITHIN`], with its reason.
    pub async fn dead_letter(&self) -> Option<(Vec<u8>, Option<String>)> {
        self.dead_letter_within(wait::DEAD_LETTER_WITHIN).await
    }

    /// Reads one message from the dead-letter queue if there is one now.
    pub async fn dead_letter_now(&self) -> Option<(Vec<u8>, Option<String>)> {
        self.dead_letter_within(Duration::ZERO).await
    }

    async fn dead_letter_within(&self, wait: Duration) -> Option<(Vec<u8>, Option<String>)> {
        let channel = self.broker.channel().await.expect("channel");
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let got = channel
                .basic_get(
                    self.settings.amqp.dead_letter_queue.as_str().into(),
                    lapin::options::BasicGetOptions { no_ack: true },
                )
                .await
                .expect("basic_get");
            if let Some(message) = got {
                let reason = message
                    .delivery
                    .properties
                    .headers()
                    .as_ref()
                    .and_then(|headers| headers.inner().get("x-agentd-reason").cloned())
                    .and_then(|value| match value {
                        lapin::types::AMQPValue::LongString(text) => Some(text.to_string()),
                        _ => None,
                    });
                return Some((message.delivery.data.clone(), reason));
            }
            if tokio::time::Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(wait::POLL).await;
        }
    }

    /// Stops the worker, deletes the test's queues and exchanges and drops its database.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(worker) = self.worker.take() {
            let result = tokio::time::timeout(wait::WORKER_STOPS_WITHIN, worker).await;
            let result = result
                .expect("the worker stops in time")
                .expect("worker task");
            result.expect("worker ended without error");
        }
        self.pool.close().await;
        remove_namespace(&self.settings, &self.broker).await;
        self.broker.close().await;
        self.removed = true;
    }
}

impl Drop for TestEnv {
    /// A test that panicked or never called [`TestEnv::stop`] still removes its queues,
    /// exchanges and database. Left behind, every run of the suite would leave quorum queues
    /// on the broker, and RabbitMQ 3.10 reserves file handles for each: after a few dozen
    /// runs on one machine its file-handle cache was exhausted and the broker stopped
    /// answering. The runtime of the test is single-threaded and blocked meanwhile, so its
    /// in-process worker cannot declare anything again.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        self.shutdown.cancel();
        let settings = self.settings.clone();
        let removing = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let broker = agentd::amqp::Broker::new(&settings.amqp.url);
                let removing = remove_namespace(&settings, &broker);
                let _ = tokio::time::timeout(wait::CLEANUP_WITHIN, removing).await;
                broker.close().await;
            });
        });
        let _ = removing.join();
    }
}

/// The maintenance database, for dropping a test's own.
const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Deletes the queues and exchanges named by `settings` through `broker` and drops its
/// database, ignoring what is already gone.
async fn remove_namespace(settings: &Settings, broker: &agentd::amqp::Broker) {
    if let Ok(channel) = broker.channel().await {
        let names = &settings.amqp;
        for queue in names.queues() {
            let _ = channel
                .queue_delete(queue.into(), lapin::options::QueueDeleteOptions::default())
                .await;
        }
        for exchange in names.exchanges() {
            let _ = channel
                .exchange_delete(
                    exchange.into(),
                    lapin::options::ExchangeDeleteOptions::default(),
                )
                .await;
        }
    }
    let database = settings.database.url.rsplit('/').next().unwrap_or_default();
    if let Ok(admin) = PgPool::connect(ADMIN_URL).await {
        let _ = sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)"
        ))
        .execute(&admin)
        .await;
        admin.close().await;
    }
}

/// A subscriber's view of one task after dedupe by `(task_id, seq)`: seqs 1..n without a
/// gap, exactly one terminal event, and it is the last.
pub fn assert_whole_stream(task_id: Uuid, stream: &[Value]) {
    let seqs: Vec<i64> = stream.iter().filter_map(|e| e["seq"].as_i64()).collect();
    assert_eq!(
        seqs,
        (1..=stream.len() as i64).collect::<Vec<_>>(),
        "{task_id}: gap in the published stream"
    );
    let terminal: Vec<usize> = stream
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            matches!(
                e["type"].as_str(),
                Some("task.completed" | "task.failed" | "task.cancelled")
            )
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        terminal,
        vec![stream.len().saturating_sub(1)],
        "{task_id}: one terminal event, last"
    );
}

// ---- Operations helpers (issue 6: MCP tools, metrics, retention) --------------------------

/// A free `127.0.0.1:PORT` (bound, read, released; fine for tests).
pub fn free_local_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").to_string()
}

/// `GET http://{addr}{path}`: the status and body (status 0 when nothing answers).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let client = reqwest::Client::new();
    match client
        .get(format!("http://{addr}{path}"))
        .timeout(wait::HTTP_WITHIN)
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
        Err(_) => (0, String::new()),
    }
}

/// A fresh empty scratch directory under the system temp dir.
pub fn scratch_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentd-{label}-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The path of the test MCP server binary (tests/mcp_server).
pub fn test_mcp_server_bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentd-test-mcp-server")
}

/// A `[[tools.mcp]]` entry starting the test MCP server over stdio with `env`.
pub fn test_mcp_server(name: &str, env: &[(&str, &Path)]) -> agentd::config::McpServerSettings {
    agentd::config::McpServerSettings {
        name: name.to_owned(),
        command: Some(test_mcp_server_bin().to_owned()),
        args: Vec::new(),
        env: env
            .iter()
            .map(|(key, path)| ((*key).to_owned(), path.display().to_string()))
            .collect(),
        url: None,
        bearer_token: None,
        call_timeout_ms: None,
        effect: None,
        effects: Default::default(),
    }
}
