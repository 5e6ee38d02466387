"""What both targets share: workload parameters, CPU accounting, progress, statistics."""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BODY",
    "MESSAGE_BYTES",
    "WINDOW",
    "CpuMeter",
    "Params",
    "Progress",
    "free_port",
    "machine_busy",
    "percentile",
    "proc_cpu_seconds",
    "ratio_of",
    "self_cpu",
    "summarize",
]

MESSAGE_BYTES = 1024
BODY = b"x" * MESSAGE_BYTES
WINDOW = 256          # publishes in flight for `pipelined` and `fanout`, per publisher
CREDIT = 256          # deliveries in flight per subscriber (Strongroom credit, NATS fetch batch)
FANOUT_DURABLES = 4
SCALE_PUBLISHERS = (1, 4, 16)
WARMUP_MESSAGES = 20  # confirmed publishes before `confirm` measures (connection, leader lookup)

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Params:
    """Message counts of one run of the workloads (the same for every target)."""

    confirm: int = 400        # sequential confirmed publishes
    pipelined: int = 8000     # per scale point, split over the publishers; `consume` drains the 1-publisher backlog
    fanout: int = 2000        # published once, delivered to each of the 4 durables

    @classmethod
    def from_messages(cls, messages: int) -> Params:
        """Counts derived from one number (the `pipelined` count)."""
        messages = max(16, messages)
        return cls(confirm=max(10, messages // 20), pipelined=messages, fanout=max(4, messages // 4))

    def as_dict(self) -> dict[str, int]:
        return {"confirm": self.confirm, "pipelined": self.pipelined, "fanout": self.fanout}


def free_port() -> int:
    """A free loopback port (`strongroom.local.etcdproc.free_port`, imported when called:
    `bench.trace` must install its hooks before anything imports strongroom or grpc)."""
    from strongroom.local.etcdproc import free_port as pick

    return pick()


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (0.0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0.0
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = data[data.rindex(b")") + 2:].split()
    # fields[0] is field 3 (state); utime is field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat: the share of the machine in
    use between two readings is Δbusy / Δtotal (every process, the benchmark's and others')."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is counted in user already
    return float(total - idle), float(total)


def self_cpu() -> float:
    """CPU seconds of this (the benchmark's client) process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """CPU seconds of the leader, of every server process and of the benchmark (client) process
    between `start()` and `stop()`."""

    def __init__(self, leader_pid: int, server_pids: Sequence[int]) -> None:
        self.leader_pid = leader_pid
        self.server_pids = list(server_pids)
        self._leader0 = self._servers0 = self._client0 = 0.0

    def start(self) -> CpuMeter:
        self._leader0 = proc_cpu_seconds(self.leader_pid)
        self._servers0 = sum(proc_cpu_seconds(p) for p in self.server_pids)
        self._client0 = self_cpu()
        return self

    def stop(self, messages: int) -> dict[str, float]:
        """CPU seconds per thousand messages: leader, all servers together, the client process."""
        leader = proc_cpu_seconds(self.leader_pid) - self._leader0
        servers = sum(proc_cpu_seconds(p) for p in self.server_pids) - self._servers0
        client = self_cpu() - self._client0
        k = max(messages, 1) / 1000.0
        return {"leader_cpu_s_per_1k": leader / k, "servers_cpu_s_per_1k": servers / k,
                "client_cpu_s_per_1k": client / k}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """Median, min, max and every value."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "values": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}


def ratio_of(a: float | None, b: float | None, target: float | None,
             higher: bool) -> tuple[float | None, bool | None]:
    """a / b, and whether it meets `target` (at least it when higher is better, else at most;
    None: no target, or no ratio)."""
    ratio = a / b if a is not None and b else None
    if ratio is None or target is None:
        return ratio, None
    return ratio, ratio >= target if higher else ratio <= target


@dataclass
class Progress:
    """The phase being run and a message counter; `line()` is printed periodically by the runner."""

    out: Callable[[str], None] = field(default=lambda s: print(s, file=sys.stderr, flush=True))
    phase: str = "starting"
    done: int = 0
    total: int = 0
    phase_started: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)

    def begin(self, phase: str, total: int = 0) -> None:
        self.phase, self.done, self.total = phase, 0, total
        self.phase_started = time.monotonic()

    def add(self, n: int = 1) -> None:
        self.done += n

    def say(self, text: str) -> None:
        self.out(f"bench [{_clock(time.monotonic() - self.started)}] {text}")

    def line(self) -> str:
        elapsed = time.monotonic() - self.phase_started
        if self.total:
            rate = self.done / elapsed if elapsed > 0 else 0.0
            return f"{self.phase}: {self.done}/{self.total} ({rate:,.0f}/s)"
        return f"{self.phase} ({elapsed:.0f} s)"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m:02d}:{s:02d}"
