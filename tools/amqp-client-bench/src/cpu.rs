//! CPU time of this process and of the broker, from `/proc/<pid>/stat` (utime + stime, in
//! clock ticks of 10 ms: runs last seconds, so the tick is fine enough).

use anyhow::Context;

/// Linux's USER_HZ on every architecture agentd runs on.
const TICKS_PER_S: f64 = 100.0;

/// User and system ticks of `pid` so far.
pub fn ticks_of(pid: u32) -> anyhow::Result<u64> {
    ticks_in(&format!("/proc/{pid}/stat"))
}

/// User and system ticks of this process (all its threads) so far.
pub fn own_ticks() -> anyhow::Result<u64> {
    ticks_in("/proc/self/stat")
}

pub fn ticks_to_us(ticks: u64) -> f64 {
    ticks as f64 / TICKS_PER_S * 1e6
}

fn ticks_in(path: &str) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let after_name = &stat[stat.rfind(')').context("no ) in stat")? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5), i.e. 11 and 12 after the name.
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// The RabbitMQ node's Erlang VM (the busiest `beam.smp`, should several run).
pub fn broker_pid() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "beam.smp")
        })
        .max_by_key(|pid| ticks_of(*pid).unwrap_or(0))
}
