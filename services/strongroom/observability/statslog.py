"""The statistics log: one line every interval (the member's `stats_interval`, 60 s by default)
with what an operator reads first when something is slow or full: role and epoch, disk usage,
how fast messages were stored, acknowledged and delivered over the interval, what is pending,
and the commit and log-write latency of the interval.

    2026-11-25 03:40:00 a INFO strongroom.stats: leader epoch 3, commit index 5120 (+85.3/s),
    disk 12.4 MiB, stored 850.2/s, acked 849.0/s, delivered 851.1/s, pending 12 messages (12.0 KiB)
    on 3 durables, 5102 rounds (9.9 ops each), commit p50 <= 2.0 ms p99 <= 5.0 ms, log write
    p99 <= 2.0 ms

Latencies are read from the tallies' histograms, so they are bucket bounds ("at most"), the
same figures Prometheus's histogram_quantile gives from the member's metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from strongroom.observability.tallies import Histogram, Tallies
from strongroom.persistence.status import ClusterStatus

__all__ = ["Sample", "human_bytes", "run_stats_log", "sample_of", "stats_line"]

log = logging.getLogger("strongroom.stats")


@dataclass(frozen=True)
class Sample:
    """A member's figures at one moment."""

    at: float
    """Monotonic seconds."""
    role: str
    epoch: int
    commit_index: int
    disk_bytes: int
    stored: int
    acked: int
    delivered: int
    pending_messages: int
    pending_bytes: int
    durables: int
    commit: Histogram
    log_write: Histogram
    rounds: int
    round_ops: float


def sample_of(st: ClusterStatus, tallies: Tallies, disk_bytes: int, at: float | None = None) -> Sample:
    """The figures of a member's status and tallies now."""
    durables = [d for s in st.stores for d in s.durables]
    return Sample(
        at=time.monotonic() if at is None else at, role=st.role.value, epoch=st.epoch, commit_index=st.commit_index,
        disk_bytes=disk_bytes, stored=sum(tallies.stored.values()), acked=sum(tallies.acked.values()),
        delivered=sum(tallies.deliveries.values()), pending_messages=sum(d.pending_messages for d in durables),
        pending_bytes=sum(d.pending_bytes for d in durables), durables=len(durables),
        commit=tallies.commit_seconds.copy(), log_write=tallies.log_write_seconds.copy(),
        rounds=tallies.round_operations.count, round_ops=tallies.round_operations.sum)


def human_bytes(n: int) -> str:
    """A byte count for people (B, KiB, MiB, GiB)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def stats_line(before: Sample, now: Sample) -> str:
    """The statistics of the interval from `before` to `now`, on one line."""
    span = max(now.at - before.at, 1e-9)

    def rate(a: int, b: int) -> str:
        return f"{(b - a) / span:.1f}/s"

    text = (f"{now.role} epoch {now.epoch}, commit index {now.commit_index} "
            f"(+{rate(before.commit_index, now.commit_index)}), disk {human_bytes(now.disk_bytes)}, "
            f"stored {rate(before.stored, now.stored)}, acked {rate(before.acked, now.acked)}, "
            f"delivered {rate(before.delivered, now.delivered)}, pending {now.pending_messages} messages "
            f"({human_bytes(now.pending_bytes)}) on {now.durables} durables")
    rounds = now.rounds - before.rounds
    if rounds:
        ops = (now.round_ops - before.round_ops) / rounds
        text += (f", {rounds} rounds ({ops:.1f} ops each), commit p50 <= {_ms(now.commit.quantile(0.5, before.commit))} "
                 f"p99 <= {_ms(now.commit.quantile(0.99, before.commit))}")
    if now.log_write.count > before.log_write.count:
        text += f", log write p99 <= {_ms(now.log_write.quantile(0.99, before.log_write))}"
    return text


async def run_stats_log(interval: float, take: Callable[[], Sample]) -> None:
    """Log a statistics line every `interval` seconds, until cancelled."""
    before = take()
    while True:
        await asyncio.sleep(interval)
        try:
            now = take()
        except Exception as exc:  # noqa: BLE001 - the statistics never stop the member
            log.warning("no statistics this interval: %s", exc)
            continue
        log.info("%s", stats_line(before, now))
        before = now
