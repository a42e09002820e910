//! The few `/proc` figures the bench reports (Linux only): a process's peak RSS and CPU
//! time, and the whole host's busy CPU time, so a run shows where the cores went (worker,
//! bench + scripted model, everything else: PostgreSQL, RabbitMQ, other tenants).

use anyhow::Context as _;

/// Kernel clock ticks per second for `/proc/*/stat` and `/proc/stat` (USER_HZ, 100 on
/// every mainstream Linux architecture).
const TICKS_PER_SEC: f64 = 100.0;

/// `VmHWM` (peak resident set size) of `pid`, in KiB.
pub fn vm_hwm_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .with_context(|| format!("no VmHWM in {path}"))
}

/// User + system CPU seconds of a process (`"self"` or a pid).
pub fn process_cpu_secs(pid: &str) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) may contain spaces: count fields after its closing ')'.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) overall; here they are 12th and 13th (index 11, 12).
    let ticks = |index: usize| -> anyhow::Result<f64> {
        fields
            .get(index)
            .and_then(|value| value.parse::<f64>().ok())
            .with_context(|| format!("unreadable {path}"))
    };
    Ok((ticks(11)? + ticks(12)?) / TICKS_PER_SEC)
}

/// Busy CPU seconds of the whole host so far (all cores; idle and iowait excluded).
pub fn host_busy_secs() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|line| line.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let values: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|value| value.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy: f64 = values
        .iter()
        .take(8)
        .enumerate()
        .filter(|(index, _)| *index != 3 && *index != 4)
        .map(|(_, value)| value)
        .sum();
    Ok(busy / TICKS_PER_SEC)
}

/// CPU seconds used so far by every process of the host, by pid, with its command name.
pub fn cpu_by_process() -> std::collections::HashMap<u32, (String, f64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let name = stat.split_once('(')?.1.rsplit_once(')')?.0.to_owned();
            let cpu = process_cpu_secs(&pid.to_string()).ok()?;
            Some((pid, (name, cpu)))
        })
        .collect()
}

/// Which service a process belongs to, by its command name.
pub fn service_of(name: &str) -> &'static str {
    match name {
        n if n.starts_with("postgres") => "postgres",
        "beam.smp" | "erl_child_setup" | "epmd" | "inet_gethost" => "rabbitmq",
        _ => "other",
    }
}

/// CPU seconds per service (see [`service_of`]) between two [`cpu_by_process`] readings;
/// processes that started in between count from zero, those that ended are lost.
pub fn cpu_by_service(
    before: &std::collections::HashMap<u32, (String, f64)>,
    after: &std::collections::HashMap<u32, (String, f64)>,
) -> std::collections::HashMap<&'static str, f64> {
    let mut services = std::collections::HashMap::new();
    for (pid, (name, cpu)) in after {
        let start = before
            .get(pid)
            .filter(|(old, _)| old == name)
            .map_or(0.0, |(_, cpu)| *cpu);
        *services.entry(service_of(name)).or_insert(0.0) += (cpu - start).max(0.0);
    }
    services
}

/// The host's 1-minute load average (how busy the shared machine was).
pub fn load_average() -> anyhow::Result<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    text.split_whitespace()
        .next()
        .and_then(|value| value.parse().ok())
        .context("unreadable /proc/loadavg")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        assert!(vm_hwm_kib(std::process::id()).unwrap() > 0);
        assert!(process_cpu_secs("self").unwrap() >= 0.0);
        assert!(host_busy_secs().unwrap() > 0.0);
        assert!(load_average().unwrap() >= 0.0);
        let processes = cpu_by_process();
        assert!(processes.contains_key(&std::process::id()));
        assert_eq!(service_of("postgres: agentd"), "postgres");
        assert_eq!(service_of("beam.smp"), "rabbitmq");
        assert!(
            cpu_by_service(&processes, &processes)
                .values()
                .all(|cpu| *cpu == 0.0)
        );
    }
}
