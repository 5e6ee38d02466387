"""Where a process's memory went: the top allocation sites of a process started with Python's
own allocation tracing (`PYTHONTRACEMALLOC=1` in its environment), written on SIGUSR2.

The soak (`strongroom.chaos.soak --trace-memory`) starts its members so and collects a report
from each at the end of the run; an operator can do the same with one member:

    PYTHONTRACEMALLOC=1 strongroom-persistence ...   # then: kill -USR2 <pid>

The report (`memory-top.txt` in the member's data dir) lists the allocation sites holding the
most memory, biggest first, with the bytes and blocks each holds. Tracing costs time and memory
(every allocation is recorded), so it is off unless the environment asks for it; without it the
signal is not handled (its default, ending the process, stays: nobody should send it then).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import tracemalloc
from pathlib import Path

__all__ = ["REPORT_NAME", "install", "report", "write_report"]

log = logging.getLogger("strongroom.observability.memtrace")

REPORT_NAME = "memory-top.txt"
"""The report's file name, in the directory `install` was given."""
TOP = 40
"""Allocation sites in a report."""


def report(top: int = TOP) -> str:
    """The allocation sites holding the most traced memory now, one line each."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")))
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    head = (f"# traced {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks "
            f"at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; the top {min(top, len(stats))} sites:")
    lines = [head]
    for s in stats[:top]:
        frame = s.traceback[0]
        lines.append(f"{s.size / 2**20:9.2f} MiB {s.count:9d} blocks  {frame.filename}:{frame.lineno}")
    return "\n".join(lines) + "\n"


def write_report(directory: Path) -> Path:
    """Write `report()` to `directory`/REPORT_NAME (whole, through a temporary name)."""
    path = directory / REPORT_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(report())
    tmp.replace(path)
    return path


def install(directory: Path) -> bool:
    """When allocations are traced, write a report to `directory` on every SIGUSR2; whether it
    is (the running loop's signal handler)."""
    if not tracemalloc.is_tracing():
        return False

    def on_signal() -> None:
        try:
            log.info("memory report written to %s", write_report(directory))
        except OSError as exc:
            log.warning("memory report to %s failed: %s", directory, exc)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, on_signal)
    log.warning("allocation tracing is on (PYTHONTRACEMALLOC): slower; SIGUSR2 writes %s", directory / REPORT_NAME)
    return True
