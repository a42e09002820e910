//! The worker under test: the real `agentd worker` binary as a child process (the same code
//! path as in production), configured only through `AGENTD__` environment variables, with
//! its log captured to a file. Also reads what `/proc` knows about it: peak RSS (VmHWM) and
//! CPU time.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

use crate::procfs;

/// A running `agentd worker`.
pub struct WorkerProcess {
    child: Child,
    pid: u32,
    /// Where its stderr (the log) goes.
    pub log_path: PathBuf,
}

/// Finds the worker binary: `explicit`, else `agentd` next to this executable, built (or
/// rebuilt, when older than this executable) with cargo in the same profile.
pub fn locate(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        anyhow::ensure!(
            path.is_file(),
            "--worker-bin {} does not exist",
            path.display()
        );
        return Ok(path.to_owned());
    }
    let me = std::env::current_exe().context("locating the bench executable")?;
    let dir = me
        .parent()
        .context("the bench executable has no directory")?;
    let worker = dir.join("agentd");
    if is_stale(&worker, &me) {
        build_worker()?;
    }
    anyhow::ensure!(
        worker.is_file(),
        "{} is missing: run `cargo build --release --bins` first",
        worker.display()
    );
    Ok(worker)
}

/// Missing, or built before this bench binary (so possibly from older sources).
fn is_stale(worker: &Path, me: &Path) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    match (modified(worker), modified(me)) {
        (Some(worker), Some(me)) => worker < me,
        _ => true,
    }
}

fn build_worker() -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "--bin", "agentd"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    eprintln!("[bench] building the worker: {command:?}");
    let status = command
        .status()
        .context("running cargo to build the worker")?;
    anyhow::ensure!(
        status.success(),
        "building the worker failed ({status}); run `cargo build --release --bins`"
    );
    Ok(())
}

impl WorkerProcess {
    /// Starts `binary worker` in `dir` with `env` (on top of this process's environment,
    /// without RUST_LOG so that `AGENTD__LOG__LEVEL` decides).
    pub fn spawn(binary: &Path, dir: &Path, env: &[(String, String)]) -> anyhow::Result<Self> {
        let log_path = std::env::temp_dir().join(format!(
            "agentd-bench-worker-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let child = Command::new(binary)
            .arg("worker")
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .envs(env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} worker", binary.display()))?;
        let pid = child.id().context("the worker exited at once")?;
        Ok(Self {
            child,
            pid,
            log_path,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Fails when the worker has exited.
    pub fn ensure_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "the worker exited ({status}); its log ends with:\n{}",
                self.log_tail(20)
            ),
            Err(err) => bail!("cannot watch the worker: {err}"),
        }
    }

    /// Peak resident set size (VmHWM) in MiB.
    pub fn peak_rss_mib(&self) -> anyhow::Result<f64> {
        procfs::vm_hwm_kib(self.pid).map(|kib| kib as f64 / 1024.0)
    }

    /// CPU time (user + system) used so far, in seconds.
    pub fn cpu_secs(&self) -> anyhow::Result<f64> {
        procfs::process_cpu_secs(&self.pid.to_string())
    }

    /// SIGTERM, then waits for the drain (at most `grace`), then SIGKILL.
    pub async fn stop(&mut self, grace: Duration) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let started = Instant::now();
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .is_ok_and(|status| status.success());
        if signalled && let Ok(Ok(status)) = tokio::time::timeout(grace, self.child.wait()).await {
            if !status.success() {
                eprintln!("[bench] the worker exited with {status} after SIGTERM");
            }
            eprintln!(
                "[bench] worker stopped in {:.0} ms",
                started.elapsed().as_secs_f64() * 1e3
            );
            return;
        }
        eprintln!("[bench] the worker did not stop after SIGTERM; killing it");
        let _ = self.child.kill().await;
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// How many lines it logged (at the warn level: each is worth a look).
    pub fn log_lines(&self) -> usize {
        std::fs::read_to_string(&self.log_path)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }
}

/// The workers of one run: one `agentd worker` process or several (`--workers`), all on the
/// same queues and database, as a fleet runs them.
pub struct Workers(Vec<WorkerProcess>);

impl Workers {
    /// Starts `count` workers, stopping those already started if one fails to start.
    pub async fn spawn(
        count: u16,
        binary: &Path,
        dir: &Path,
        env: &[(String, String)],
        grace: Duration,
    ) -> anyhow::Result<Self> {
        let mut workers = Self(Vec::with_capacity(usize::from(count)));
        for _ in 0..count {
            match WorkerProcess::spawn(binary, dir, env) {
                Ok(worker) => workers.0.push(worker),
                Err(err) => {
                    workers.stop(grace).await;
                    return Err(err);
                }
            }
        }
        Ok(workers)
    }

    /// How many.
    pub fn count(&self) -> usize {
        self.0.len()
    }

    /// The process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(WorkerProcess::pid).collect()
    }

    /// Fails when any worker has exited.
    pub fn ensure_alive(&mut self) -> anyhow::Result<()> {
        self.0.iter_mut().try_for_each(WorkerProcess::ensure_alive)
    }

    /// The largest peak RSS of one worker, in MiB.
    pub fn peak_rss_mib(&self) -> anyhow::Result<f64> {
        self.0
            .iter()
            .map(WorkerProcess::peak_rss_mib)
            .try_fold(0.0, |max, rss| rss.map(|rss| f64::max(max, rss)))
    }

    /// CPU time of all of them together, in seconds.
    pub fn cpu_secs(&self) -> anyhow::Result<f64> {
        self.0.iter().map(WorkerProcess::cpu_secs).sum()
    }

    /// Stops every worker (SIGTERM to all first, so they drain at the same time).
    pub async fn stop(&mut self, grace: Duration) {
        let stops = self.0.iter_mut().map(|worker| worker.stop(grace));
        futures::future::join_all(stops).await;
    }

    /// Lines logged by all of them.
    pub fn log_lines(&self) -> usize {
        self.0.iter().map(WorkerProcess::log_lines).sum()
    }

    /// The last `lines` lines of each log.
    pub fn log_tail(&self, lines: usize) -> String {
        let tails: Vec<String> = self.0.iter().map(|w| w.log_tail(lines)).collect();
        tails.join("\n")
    }

    /// The logs with lines in them; the empty ones are removed.
    pub fn keep_logs(&self) -> Vec<PathBuf> {
        let mut kept = Vec::new();
        for worker in &self.0 {
            if worker.log_lines() > 0 {
                kept.push(worker.log_path.clone());
            } else {
                let _ = std::fs::remove_file(&worker.log_path);
            }
        }
        kept
    }
}
