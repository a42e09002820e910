//! The faults of the chaos run: SIGKILL of a worker process (restarted at once), a RabbitMQ
//! restart (`rabbitmqctl stop_app` / `start_app`: connections drop, durable queues stay) and
//! a PostgreSQL restart (`pg_ctlcluster ... restart`: every session is cut).

use std::process::Command;
use std::time::{Duration, Instant};

/// A small deterministic generator (the run is repeatable from its seed).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(6364136223846793005).wrapping_add(1))
    }

    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound.max(1)
    }
}

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|err| panic!("{program} {args:?}: {err}"));
    assert!(status.success(), "{program} {args:?}: {status}");
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not come back");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Stops and starts the RabbitMQ application; returns once it accepts connections again.
pub fn restart_broker() {
    run("rabbitmqctl", &["-q", "stop_app"]);
    std::thread::sleep(Duration::from_millis(500));
    run("rabbitmqctl", &["-q", "start_app"]);
    wait_for("RabbitMQ", || {
        succeeds("rabbitmq-diagnostics", &["-q", "check_port_connectivity"])
    });
}

/// Restarts the PostgreSQL cluster; returns once it accepts connections again.
pub fn restart_postgres() {
    let version = std::fs::read_dir("/etc/postgresql")
        .ok()
        .and_then(|dir| {
            dir.filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .max()
        })
        .expect("a PostgreSQL cluster under /etc/postgresql");
    run(
        "pg_ctlcluster",
        &["--skip-systemctl-redirect", &version, "main", "restart"],
    );
    wait_for("PostgreSQL", || {
        succeeds("pg_isready", &["-q", "-h", "127.0.0.1", "-p", "5432"])
    });
}
