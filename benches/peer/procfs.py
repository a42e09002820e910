"""The /proc figures the peer reports, read the way agentd-bench reads them
(src/bin/agentd_bench/procfs.rs): a process's peak RSS and CPU time, the host's busy CPU
time, and CPU by service (PostgreSQL, RabbitMQ) between two readings. Linux only.
"""

from __future__ import annotations

import os

# USER_HZ: the unit of /proc/*/stat and /proc/stat (100 on every mainstream Linux).
TICKS_PER_SEC = 100.0


def vm_kib(pid: int | str, field: str) -> int:
    """`VmHWM` (peak) or `VmRSS` (now) of a process, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def process_cpu_secs(pid: int | str) -> float:
    """User + system CPU seconds of a process ("self" or a pid)."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    # The command name may hold spaces: count the fields after its closing ')'.
    fields = text.rsplit(")", 1)[1].split()
    return (float(fields[11]) + float(fields[12])) / TICKS_PER_SEC


def host_busy_secs() -> float:
    """Busy CPU seconds of the whole host so far (idle and iowait excluded)."""
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("cpu "):
                values = [float(v) for v in line.split()[1:9]]
                return sum(v for i, v in enumerate(values) if i not in (3, 4)) / TICKS_PER_SEC
    raise RuntimeError("no cpu line in /proc/stat")


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process, by pid, with its command name."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text.split("(", 1)[1].rsplit(")", 1)[0]
        fields = text.rsplit(")", 1)[1].split()
        out[int(entry)] = (name, (float(fields[11]) + float(fields[12])) / TICKS_PER_SEC)
    return out


def service_of(name: str) -> str:
    """Which service a process belongs to, by its command name (as agentd-bench says)."""
    if name.startswith("postgres"):
        return "postgres"
    if name in ("beam.smp", "erl_child_setup", "epmd", "inet_gethost"):
        return "rabbitmq"
    return "other"


def cpu_by_service(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds per service between two `cpu_by_process` readings (processes that
    started in between count from zero; those that ended are lost)."""
    services: dict[str, float] = {}
    for pid, (name, cpu) in after.items():
        old = before.get(pid)
        start = old[1] if old is not None and old[0] == name else 0.0
        key = service_of(name)
        services[key] = services.get(key, 0.0) + max(cpu - start, 0.0)
    return services


def load_average() -> float:
    """The host's 1-minute load average."""
    with open("/proc/loadavg") as loadavg:
        return float(loadavg.read().split()[0])
