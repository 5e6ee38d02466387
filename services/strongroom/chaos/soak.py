"""The soak run (`make soak`, not in CI): a long stretch of mixed load on a three-member disk-sync
cluster with a leader SIGKILL every few minutes, judged by the history checker, with the members'
resident memory over time (numbers and a PNG).

    python -m strongroom.chaos.soak [--minutes 60] [--kill-every 180] [--out DIR] [--trace-memory] [--json]

The load is the chaos workload (pipelined and unary publishers, standard and shared durables with
synchronous and asynchronous acks, a queue, units of work) at `SOAK_RATE` messages per second per
publisher, and beside it a last-value durable and messages with a time-to-live that nobody
consumes (they must expire, or memory grows). Exit status 1 when the checker finds anything (a
confirmed message lost, duplicated, out of order, a phantom, a partial unit of work), when the
members do not converge, or when their memory grew by more than `MAX_GROWTH` from the end of the
first ten minutes (a sixth of a shorter run) to the end of the run. Memory is compared as the
median resident size over every member of two windows (`memory_growth`), so a member that
restarted after a kill does not count as shrinking.

A backlog that grows makes memory grow for a reason that is no leak: the store keeps what its
consumers have not taken yet. So the soak also reads the messages stored every sample and fails
with that reason when the backlog of the same two windows grew (`backlog_growth`): the load was
more than the consumers take (the chaos workload's standard durable acknowledges synchronously,
one message at a time; at 60 messages a second per publisher it fell behind on this machine and
its backlog, not a leak, was the first soak's growth).
The first SIGINT (Ctrl-C) or SIGTERM ends the faults early: the cluster is still healed,
drained, audited and stopped, and the run is judged on the minutes it ran (`stopped_early` in
the JSON); a second one stops every process at once, without a verdict (exit status 130).
`--trace-memory` starts the members with Python's allocation tracing and, at the end of the run,
collects each member's top allocation sites (`memory-top-<member>.txt`: where the memory went;
the members run slower, so its figures are not the untraced run's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from strongroom.aio import wait_event
from strongroom.chaos.cluster import ClusterSpec
from strongroom.chaos.context import Fault, FaultContext
from strongroom.chaos.faults import KillLeader
from strongroom.chaos.runner import ScenarioResult, format_table, run_scenario
from strongroom.chaos.uowload import UowConfig
from strongroom.chaos.workload import WorkloadConfig
from strongroom.client import Client
from strongroom.errors import StrongroomError
from strongroom.observability.memtrace import REPORT_NAME

__all__ = ["MAX_GROWTH", "SOAK_RATE", "Sample", "Soak", "backlog_growth", "memory_growth", "main"]

log = logging.getLogger("strongroom.chaos.soak")

MAX_GROWTH = 0.10
"""The largest rise of the members' median resident memory a soak passes with."""
SOAK_RATE = 25.0
"""Messages per second per publisher of the soak's workload: what its synchronously acknowledging
consumer keeps up with, leader kills included, on a 2-core machine."""
SOAK_UOW_QUEUE = "soak.uow.q"
"""The soak's units of work: a queue whose UOWs live 300 s (`chaos.cluster.realm_text`), so the
status a completed UOW leaves (2.5 KiB each, kept a lifetime after completion: a day by
default) is gone within the run; with the default the soak's memory grew by its 1,000 UOWs a
minute, as configured."""
BACKLOG_SLACK = 2000
"""Stored messages the backlog may rise by between the two windows (a kill's catch-up) before
the soak says its consumers fell behind."""
SAMPLE_SECONDS = 10.0
"""How often every member's resident memory is read."""


@dataclass(frozen=True)
class Sample:
    """One reading of a member's resident memory."""

    at: float
    """Seconds since the faults began."""
    member: str
    rss_bytes: int


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _windows(seconds: float) -> tuple[float, float, float]:
    """(start, width, final start): the baseline window after the first ten minutes (a sixth of
    a run shorter than an hour) and the run's last twelfth."""
    width = min(300.0, seconds / 12)
    return min(600.0, seconds / 6), width, seconds - width


def _baseline_start(times: list[float], start: float, width: float) -> float:
    """Where the baseline window begins: at `start`, or, when no reading falls in the window
    there (a short run, a run stopped early: readings are `SAMPLE_SECONDS` apart), at the first
    reading after it."""
    if any(start <= at < start + width for at in times):
        return start
    return min((at for at in times if at >= start), default=start)


def memory_growth(samples: list[Sample], seconds: float) -> tuple[float, float, float]:
    """(baseline, final, growth): the median resident size of every member in the window after
    the first ten minutes (a sixth of a run shorter than an hour) and in the run's last twelfth,
    and how much the second is above the first (0.05: 5 %)."""
    start, width, end = _windows(seconds)
    start = _baseline_start([s.at for s in samples if s.rss_bytes], start, width)
    baseline = [s.rss_bytes for s in samples if start <= s.at < min(start + width, end) and s.rss_bytes]
    final = [s.rss_bytes for s in samples if s.at >= end and s.rss_bytes]
    if not baseline or not final:
        raise ValueError(f"too few memory samples for a run of {seconds:.0f} s (baseline {len(baseline)}, "
                         f"final {len(final)})")
    first, last = statistics.median(baseline), statistics.median(final)
    return first, last, last / first - 1.0


def backlog_growth(backlog: list[tuple[float, int]], seconds: float) -> tuple[float, float]:
    """(baseline, final): the median count of stored messages in the two windows of
    `memory_growth` (0, 0 when a window has no reading)."""
    start, width, end = _windows(seconds)
    start = _baseline_start([at for at, _ in backlog], start, width)
    baseline = [n for at, n in backlog if start <= at < min(start + width, end)]
    final = [n for at, n in backlog if at >= end]
    if not baseline or not final:
        return 0.0, 0.0
    return float(statistics.median(baseline)), float(statistics.median(final))


@dataclass
class Soak(Fault):
    """Leader SIGKILLs every `kill_every` seconds, memory readings every `SAMPLE_SECONDS`, and
    the side load (last-value and time-to-live messages) for as long as the run lasts."""

    kill_every: float = 180.0
    samples: list[Sample] = field(default_factory=list)
    backlog: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the faults began, messages stored): the most any answering member holds."""
    pending: dict[str, int] = field(default_factory=dict)
    """Each durable's pending messages at the last reading (`destination/durable`)."""
    kills: list[float] = field(default_factory=list)
    side_published: int = 0
    side_errors: int = 0
    trace_memory: bool = False
    """Members trace their allocations; their top sites are collected at the end (`reports`)."""
    reports: dict[str, str] = field(default_factory=dict)
    stopped_at: float = 0.0
    """Seconds into the faults when an operator stopped the run (`stop`); 0: it ran its length."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def stop(self) -> None:
        """End the faults now (the first SIGINT or SIGTERM): the run then heals, drains and is
        judged on what it ran."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether `stop` was asked."""
        return self._stop.is_set()

    async def run(self, ctx: FaultContext, until: float) -> None:
        began = time.monotonic()
        side = asyncio.create_task(self._side_load(ctx.cluster.endpoints()))
        killer = KillLeader("kill-leader", "")
        next_kill = began + self.kill_every
        next_line = began
        try:
            while time.monotonic() < until:
                if self.stopping:
                    self.stopped_at = time.monotonic() - began
                    print(f"soak stopped at {self.stopped_at:.0f} s: healing, draining and judging what ran "
                          f"(a second signal ends it at once)", flush=True)
                    break
                now = time.monotonic()
                self._sample(ctx, now - began)
                await self._read_backlog(ctx, now - began)
                if now >= next_line:
                    next_line = now + 60.0
                    print(self._progress(now - began, until - began), flush=True)
                if now >= next_kill and now + 3 * ctx.ttl + 10 < until:
                    self.kills.append(now - began)
                    ctx.round += 1
                    await killer.round(ctx)
                    next_kill = time.monotonic() + self.kill_every
                now = time.monotonic()
                await wait_event(self._stop, max(0.0, min(SAMPLE_SECONDS, until - now, max(0.1, next_kill - now))))
            self._sample(ctx, time.monotonic() - began)  # the run's end is in the last window
            if self.trace_memory:
                await self._collect_reports(ctx)
        finally:
            side.cancel()
            await asyncio.gather(side, return_exceptions=True)

    def _sample(self, ctx: FaultContext, at: float) -> None:
        for pid, member in ctx.cluster.pid_labels().items():
            if member != "client":
                self.samples.append(Sample(at, member, rss_bytes(pid)))

    async def _read_backlog(self, ctx: FaultContext, at: float) -> None:
        statuses = await ctx.cluster.statuses(timeout=2.0)
        best = max(statuses.values(), key=lambda st: st.applied_index, default=None)
        if best is None:
            return
        self.backlog.append((at, sum(store.messages for store in best.stores)))
        self.pending = {f"{d.destination}/{d.name}": d.pending_messages for store in best.stores
                        for d in store.durables}

    async def _collect_reports(self, ctx: FaultContext, wait: float = 60.0) -> None:
        """Ask every member for its top allocation sites (SIGUSR2) and keep what each wrote."""
        asked: dict[str, tuple[Path, float]] = {}
        for pid, member in ctx.cluster.pid_labels().items():
            if member == "client":
                continue
            path = ctx.cluster.data_dir(member) / REPORT_NAME
            before = path.stat().st_mtime if path.exists() else 0.0
            try:
                os.kill(pid, signal.SIGUSR2)
            except ProcessLookupError:
                continue
            asked[member] = (path, before)
        deadline = time.monotonic() + wait  # a snapshot of every traced block takes a while
        while asked and time.monotonic() < deadline:
            for member, (path, before) in list(asked.items()):
                if path.exists() and path.stat().st_mtime > before:
                    self.reports[member] = path.read_text()
                    del asked[member]
            await asyncio.sleep(0.5)
        for member in asked:
            log.warning("no memory report from %s within %.0f s", member, wait)

    async def round(self, ctx: FaultContext) -> None:  # pragma: no cover - `run` drives the soak
        raise NotImplementedError

    def _progress(self, elapsed: float, total: float) -> str:
        latest: dict[str, int] = {}
        for s in self.samples:
            latest[s.member] = s.rss_bytes
        rss = ", ".join(f"{m} {b / 2**20:.0f} MiB" for m, b in sorted(latest.items()))
        stored = f"{self.backlog[-1][1]} messages stored" if self.backlog else "backlog not read yet"
        return (f"  soak {elapsed / 60:4.1f}/{total / 60:.0f} min: {len(self.kills)} leader kills, "
                f"{self.side_published} side messages, {stored}; resident {rss}")

    async def _side_load(self, endpoints: list[str]) -> None:
        """A last-value durable kept up to date on 20 keys, and messages with a time-to-live
        that nobody consumes; errors around a kill are counted and ridden out."""
        async with Client(endpoints, timeout=15) as client:
            latest = None
            i = 0
            while True:
                try:
                    if latest is None:
                        latest = await client.subscribe("soak.lv", "latest", kind="last-value")
                    await client.publish("soak.lv", b"price %d" % i, fields={"key": i % 20})
                    await client.publish("soak.ttl.q", b"x" * 200)
                    self.side_published += 2
                    if i % 10 == 0:  # the latest value of a key (last-value: nothing to acknowledge)
                        try:
                            await latest.next(timeout=0.05)
                        except TimeoutError:
                            pass
                except (TimeoutError, StrongroomError) as exc:
                    self.side_errors += 1
                    log.info("side load: %s", exc)
                    latest = None
                    await asyncio.sleep(0.5)
                i += 1
                await asyncio.sleep(0.02)


def plot(samples: list[Sample], kills: list[float], path: Path, title: str,
         backlog: list[tuple[float, int]] | None = None) -> None:
    """Resident memory per member over the run and, below it, the messages stored, the leader
    kills as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, low) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, height_ratios=(3, 1.3))
    for member in sorted({s.member for s in samples}):
        mine = [s for s in samples if s.member == member]
        ax.plot([s.at / 60 for s in mine], [s.rss_bytes / 2**20 for s in mine], label=member, linewidth=1.2)
    low.plot([at / 60 for at, _ in backlog or []], [n for _, n in backlog or []], color="black", linewidth=1.0)
    for at in kills:
        ax.axvline(at / 60, color="grey", linewidth=0.6, linestyle=":")
        low.axvline(at / 60, color="grey", linewidth=0.6, linestyle=":")
    low.set_xlabel("minutes (dotted: leader SIGKILL)")
    ax.set_ylabel("resident memory (MiB)")
    low.set_ylabel("messages stored")
    low.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    low.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class SoakResult:
    """What a soak found."""

    scenario: ScenarioResult
    soak: Soak
    seconds: float
    max_growth: float = MAX_GROWTH
    baseline: float = 0.0
    final: float = 0.0
    growth: float = 0.0
    memory_error: str = ""
    backlog_baseline: float = 0.0
    backlog_final: float = 0.0

    @property
    def backlog_grew(self) -> bool:
        """The consumers fell behind: the memory verdict would measure the backlog."""
        return self.backlog_final > 1.5 * self.backlog_baseline + BACKLOG_SLACK

    @property
    def passed(self) -> bool:
        return (self.scenario.passed and not self.memory_error and self.growth <= self.max_growth
                and not self.backlog_grew)

    def as_dict(self) -> dict[str, object]:
        c = self.scenario.check
        return {"passed": self.passed, "minutes": round(self.seconds / 60, 1),
                "stopped_early": bool(self.soak.stopped_at), "leader_kills": len(self.soak.kills),
                "operations": c.operations, "confirmed": c.confirmed, "lost": c.lost_messages,
                "duplicated": len(c.duplicated), "phantom": len(c.phantom), "order": len(c.order),
                "uows_confirmed": c.uows_confirmed, "uow_violations": c.uow_violations,
                "converged": self.scenario.converged, "side_messages": self.soak.side_published,
                "side_errors": self.soak.side_errors, "rss_baseline_mib": round(self.baseline / 2**20, 1),
                "rss_final_mib": round(self.final / 2**20, 1), "rss_growth": round(self.growth, 4),
                "memory_error": self.memory_error, "max_gap_seconds": round(c.longest_gap_seconds, 2),
                "backlog_baseline": self.backlog_baseline, "backlog_final": self.backlog_final,
                "backlog_grew": self.backlog_grew, "pending_at_end": self.soak.pending,
                "errors": self.scenario.errors}


async def soak(minutes: float, kill_every: float, out: Path, max_growth: float = MAX_GROWTH,
               trace_memory: bool = False, rate: float = SOAK_RATE) -> SoakResult:
    """Run one soak in `out`; the cluster is gone when this returns."""
    seconds = minutes * 60
    spec = ClusterSpec(extra_env={"PYTHONTRACEMALLOC": "1"}) if trace_memory else ClusterSpec()
    fault = Soak("soak", f"{minutes:g} min of mixed load, a leader SIGKILL every {kill_every:g} s",
                 spec=spec, kill_every=kill_every, trace_memory=trace_memory)
    config = WorkloadConfig(rate=rate, uows=UowConfig(queue=SOAK_UOW_QUEUE))
    with _stopped_by_signals(fault):
        scenario = await run_scenario(fault, seconds, out, config=config)
    seconds = fault.stopped_at or seconds  # windows of what ran
    result = SoakResult(scenario, fault, seconds, max_growth)
    result.backlog_baseline, result.backlog_final = backlog_growth(fault.backlog, seconds)
    try:
        result.baseline, result.final, result.growth = memory_growth(fault.samples, seconds)
    except ValueError as exc:
        result.memory_error = str(exc)
    (out / "memory.json").write_text(json.dumps([s.__dict__ for s in fault.samples]))
    (out / "backlog.json").write_text(json.dumps(fault.backlog))
    for member, text in fault.reports.items():
        (out / f"memory-top-{member}.txt").write_text(text)
    if fault.samples:
        plot(fault.samples, fault.kills, out / "memory.png",
             f"soak: {seconds / 60:.1f} min{' (stopped early)' if fault.stopped_at else ''}, "
             f"{len(fault.kills)} leader kills, median resident memory "
             f"{result.growth * 100:+.1f}% after the first window", fault.backlog)
    return result


@contextlib.contextmanager
def _stopped_by_signals(fault: Soak) -> Iterator[None]:
    """While the soak runs, the first SIGINT or SIGTERM ends its faults early (`Soak.stop`: the
    cluster is still healed, drained, judged and stopped); the second cancels the run, whose
    clean-up still stops every process it started."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal(number: int) -> None:
        if fault.stopping:
            print(f"soak: {signal.Signals(number).name} again: stopping every process now", flush=True)
            if task is not None:
                task.cancel()
            return
        fault.stop()

    for number in signals:
        loop.add_signal_handler(number, on_signal, number)
    try:
        yield
    finally:
        for number in signals:
            loop.remove_signal_handler(number)


def main(argv: list[str] | None = None) -> None:
    """The `make soak` entry point."""
    parser = argparse.ArgumentParser(prog="python -m strongroom.chaos.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="length of the run (default 60)")
    parser.add_argument("--kill-every", type=float, default=180.0,
                        help="seconds between leader SIGKILLs (default 180)")
    parser.add_argument("--out", type=Path, default=None, help="keep history, logs and memory.png here "
                        "(default: a new temporary directory, kept)")
    parser.add_argument("--max-growth", type=float, default=MAX_GROWTH,
                        help="largest memory growth that passes, 0.1 = 10%% (default; a run of a few minutes "
                             "is still warming up and measures nothing)")
    parser.add_argument("--rate", type=float, default=SOAK_RATE,
                        help=f"messages per second per publisher (default {SOAK_RATE:g}: what the workload's "
                             f"synchronously acknowledging consumer keeps up with here)")
    parser.add_argument("--trace-memory", action="store_true",
                        help="trace the members' allocations and write each one's top sites to "
                             "memory-top-MEMBER.txt at the end (slower members)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (the last lines)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.kill_every <= 0 or args.rate <= 0:
        parser.error("--minutes, --kill-every and --rate must be above 0")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = args.out or Path(tempfile.mkdtemp(prefix="strongroom-soak-"))
    print(f"soak: {args.minutes:g} min, a leader SIGKILL every {args.kill_every:g} s; results in {out}", flush=True)
    try:
        result = asyncio.run(soak(args.minutes, args.kill_every, out, args.max_growth, args.trace_memory,
                                  args.rate))
    except asyncio.CancelledError:
        print(f"soak cancelled: every process it started is stopped; history and logs: {out}", flush=True)
        sys.exit(130)
    print()
    if result.soak.stopped_at:
        print(f"stopped early, after {result.seconds / 60:.1f} of {args.minutes:g} min: judged on what ran")
    print(format_table([result.scenario]))
    print(f"\nresident memory (median of every member): {result.baseline / 2**20:.1f} MiB after the first window, "
          f"{result.final / 2**20:.1f} MiB at the end ({result.growth * 100:+.1f}%, at most "
          f"{args.max_growth * 100:.0f}% passes){'; ' + result.memory_error if result.memory_error else ''}")
    print(f"messages stored (the most any member held; median): {result.backlog_baseline:.0f} after the first "
          f"window, {result.backlog_final:.0f} at the end"
          + (f": THE BACKLOG GREW, the consumers did not keep up with the load (lower --rate); pending at the "
             f"end: {result.soak.pending}" if result.backlog_grew else ""))
    print(f"memory plot: {out / 'memory.png'}; history and logs: {out}")
    for member in sorted(result.soak.reports):
        print(f"top allocation sites of {member}: {out / f'memory-top-{member}.txt'}")
    if not result.scenario.passed:
        print(result.scenario.describe())
    print("PASS" if result.passed else "FAIL")
    if args.json:
        print(json.dumps(result.as_dict()))
    sys.exit(0 if result.passed else 1)


if __name__ == "__main__":
    main()
