//! The real `agentd worker` binary as a child process, configured through AGENTD__ environment
//! variables from a test's [`Settings`] (plus, optionally, a `--config` file for what the
//! environment cannot express, such as `[[tools.mcp]]` tables), with its log captured to a
//! file — for tests that kill it, signal it or read what it logged.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use agentd::config::Settings;

/// A worker process.
pub struct WorkerProcess {
    child: Child,
    /// Where its stderr (the log) goes.
    pub log_path: PathBuf,
}

/// The environment that makes the binary use `settings`.
pub fn env_for(settings: &Settings) -> Vec<(String, String)> {
    let retry = &settings.llm.retry;
    let worker = &settings.worker;
    let mut env = settings.amqp.env();
    let rest = [
        ("DATABASE__URL", settings.database.url.clone()),
        ("LLM__BASE_URL", settings.llm.base_url.clone()),
        ("LLM__TIMEOUT_MS", settings.llm.timeout_ms.to_string()),
        (
            "LLM__RETRY__INITIAL_DELAY_MS",
            retry.initial_delay_ms.to_string(),
        ),
        ("LLM__RETRY__MAX_DELAY_MS", retry.max_delay_ms.to_string()),
        ("WORKER__CONCURRENCY", worker.concurrency.to_string()),
        ("WORKER__MAX_DELIVERIES", worker.max_deliveries.to_string()),
        (
            "WORKER__MAX_MESSAGE_BYTES",
            worker.max_message_bytes.to_string(),
        ),
        ("WORKER__LEASE_SECS", worker.lease_secs.to_string()),
        (
            "WORKER__SHUTDOWN_GRACE_SECS",
            worker.shutdown_grace_secs.to_string(),
        ),
        (
            "WORKER__RECURSION_TIMEOUT_MS",
            worker.recursion_timeout_ms.to_string(),
        ),
        (
            "WORKER__ORPHAN_AFTER_SECS",
            worker.orphan_after_secs.to_string(),
        ),
    ];
    env.extend(
        rest.into_iter()
            .map(|(key, value)| (format!("AGENTD__{key}"), value)),
    );
    env
}

impl WorkerProcess {
    /// Starts `agentd worker` with `settings` and extra environment variables.
    pub fn spawn(settings: &Settings, extra_env: &[(&str, &str)]) -> Self {
        Self::spawn_with_config(settings, None, extra_env)
    }

    /// Like [`WorkerProcess::spawn`], also loading the configuration file `config`
    /// (`agentd --config PATH worker`) when there is one; `settings` (as environment
    /// variables) still win over it.
    pub fn spawn_with_config(
        settings: &Settings,
        config: Option<&Path>,
        extra_env: &[(&str, &str)],
    ) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let log_path = dir.join(format!("worker-{}.log", uuid::Uuid::new_v4().simple()));
        let log = std::fs::File::create(&log_path).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentd"));
        command
            .arg("worker")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .envs(env_for(settings))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (key, value) in extra_env {
            command.env(key, value);
        }
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let child = command.spawn().expect("spawn agentd worker");
        Self { child, log_path }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no cleanup, no drain, as a crash or an OOM kill would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The tool servers it started (its children: stdio MCP servers), to wait for with
    /// [`wait_gone`] after a kill: they outlive it until they see their stdin closed, and a
    /// call they were running may still act meanwhile.
    pub fn tool_servers(&self) -> Vec<u32> {
        children_of(self.pid())
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
    }

    /// Waits for the process to exit, at most `limit`.
    pub async fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(super::wait::POLL).await;
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// Whether `pid` runs (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits until none of `pids` runs any more: once the tool servers of a killed worker are
/// gone, nothing it started can act.
pub async fn wait_gone(pids: &[u32]) {
    let what = format!("processes {pids:?} exit");
    super::wait::until_true(what, super::wait::NEXT_STEP_WITHIN, || {
        let gone = pids.iter().all(|pid| !alive(*pid));
        async move { gone }
    })
    .await;
}

/// The pids of the processes whose parent is `pid` now (from /proc).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // After the command name in parentheses: state, then the parent's pid.
            let parent = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok());
            parent == Some(pid)
        })
        .collect()
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
