"""The disaster-recovery configurations (issue 22): the disk-sync cluster with a standby set
attached, beside the same cluster without one, in the same round.

Issue 22 requires that clients never wait for the standby: the primary's publish and ack latency
must not change when a standby is attached, slow, partitioned or down. Three configurations run
the main workloads (`confirm` first: its p50/p99 are the figures the issue names) on the realm
of `disk-sync` (bench/ours.py), with a standby set added to its cluster:

- `disk-sync-standby`: the standby site as `strongroom up` runs it (the local launcher, as for
  `examples/dr.yaml`): its own etcd and realm service, three standby members (s1-s3) and the DR
  service (`strongroom-dr`), which reads the primary's committed-entry stream and ships it to
  the standby leader. The workloads start once the standby holds everything the primary has
  committed; each workload's meter counts the standby site's CPU too (its members and the DR
  service). Afterwards: how long the standby took to hold what `confirm` committed, how far it
  was behind when the workloads ended, and how long it took to catch up.
- `disk-sync-standby-niced`: the same, then the standby site's processes (members, DR service,
  etcd, realm service) put at the lowest CPU priority (nice 19) before the workloads: they get
  the CPU time the primary and the client leave, so the standby's work no longer competes with
  the primary's for the cores (the disk is still shared), as at a site of its own; it falls
  behind while the primary keeps the cores busy: a slow standby.
- `disk-sync-standby-stopped`: the same, then the three standby members are stopped (SIGSTOP)
  before the workloads, as a standby site that hangs or is cut off without a closed connection:
  the DR service's `ShipEntries` gets no answer (it waits up to its timeout, then again), and
  its stream from the primary stays open, unread. They are continued (SIGCONT) only to be
  stopped with the rest.

Every process runs on this one machine: the standby site shares the primary's cores and disk,
which separate sites would not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from bench.common import CpuMeter, Progress, free_port, proc_cpu_seconds
from bench.ours import CLUSTER, StrongroomTarget, realm_for
from strongroom.channels import open_channel

__all__ = ["BASELINE", "CONFIRM_CPU_FIGURES", "NICE", "NICED_CONFIG", "SHIPPING_CONFIGS", "STANDBY_CONFIG",
           "STANDBY_CONFIGS", "STANDBY_FIGURES", "STANDBY_RATIOS", "STOPPED_CONFIG", "StandbyMeter", "StandbyTarget",
           "renice", "standby_figure_applies"]

BASELINE = "disk-sync"
"""The configuration the standby ones are compared with: the same cluster, no standby."""
STANDBY_CONFIG = "disk-sync-standby"
NICED_CONFIG = "disk-sync-standby-niced"
STOPPED_CONFIG = "disk-sync-standby-stopped"
STANDBY_CONFIGS = (STANDBY_CONFIG, NICED_CONFIG, STOPPED_CONFIG)
SHIPPING_CONFIGS = (STANDBY_CONFIG, NICED_CONFIG)
NICE = 19
"""The niced standby site's CPU priority: the lowest."""

CAUGHT_UP_TIMEOUT = 60.0
"""Seconds the standby may take to hold what the primary committed before the workloads."""
CATCH_UP_TIMEOUT = 120.0
"""Seconds the standby may take to catch up after the workloads (not timed into them)."""
POLL = 0.01

# figure key -> (label, unit, higher is better): what only the standby configurations measure.
STANDBY_FIGURES: dict[str, tuple[str, str, bool]] = {
    "confirm.standby_cpu_s_per_1k": ("standby site CPU, confirm", "s/1k msgs", False),
    "confirm.dr_cpu_s_per_1k": ("DR service CPU, confirm", "s/1k msgs", False),
    "pipelined.standby_cpu_s_per_1k": ("standby site CPU, pipelined x1", "s/1k msgs", False),
    "pipelined.dr_cpu_s_per_1k": ("DR service CPU, pipelined x1", "s/1k msgs", False),
    "standby.after_confirm_s": ("standby lag when confirm ends", "s", False),
    "standby.behind_entries": ("standby behind when the workloads end", "entries", False),
    "standby.catch_up_s": ("standby catch-up after the workloads", "s", False),
}
CONFIRM_CPU_FIGURES: dict[str, tuple[str, str, bool]] = {
    "confirm.leader_cpu_s_per_1k": ("primary leader CPU, confirm", "s/1k msgs", False),
    "confirm.servers_cpu_s_per_1k": ("primary members CPU, confirm", "s/1k msgs", False),
}
"""What every Strongroom configuration measures during `confirm` (not in the main table): beside
the standby site's CPU, what the primary spends."""
SHIPPING_ONLY = ("standby.after_confirm_s", "standby.catch_up_s")
"""Figures of the standby that ships: a stopped standby never catches up."""

# (ours, against, figure, target): with a standby against without, the same round. No target:
# the issue says "does not change"; on one machine the standby's work shares the cores.
STANDBY_RATIOS: list[tuple[str, str, str, float | None]] = [
    (config, BASELINE, figure, None)
    for config in STANDBY_CONFIGS
    for figure in ("confirm.msgs_per_s", "confirm.p50_ms", "confirm.p99_ms", "pipelined.msgs_per_s",
                   "consume.msgs_per_s", "pipelined_x16.msgs_per_s")
]


def standby_figure_applies(config: str, figure: str) -> bool | None:
    """Whether `config` measures a figure of STANDBY_FIGURES; None for any other figure."""
    if figure not in STANDBY_FIGURES:
        return None
    if figure in SHIPPING_ONLY:
        return config in SHIPPING_CONFIGS
    return config in STANDBY_CONFIGS


def renice(pid: int, nice: int) -> None:
    """Set the CPU priority of every thread of a process (nice is per thread on Linux; threads
    started later inherit their starter's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)


class StandbyMeter(CpuMeter):
    """CpuMeter, plus the CPU seconds of the standby site's processes (standby members and DR
    service together, and the DR service alone) per thousand messages."""

    def __init__(self, leader_pid: int, server_pids: list[int], standby_pids: list[int], dr_pid: int) -> None:
        super().__init__(leader_pid, server_pids)
        self.standby_pids = [*standby_pids, dr_pid]
        self.dr_pid = dr_pid
        self._standby0 = self._dr0 = 0.0

    def _standby(self) -> float:
        return sum(proc_cpu_seconds(p) for p in self.standby_pids)

    def start(self) -> StandbyMeter:
        super().start()
        self._standby0, self._dr0 = self._standby(), proc_cpu_seconds(self.dr_pid)
        return self

    def stop(self, messages: int) -> dict[str, float]:
        out = super().stop(messages)
        k = max(messages, 1) / 1000.0
        out["standby_cpu_s_per_1k"] = (self._standby() - self._standby0) / k
        out["dr_cpu_s_per_1k"] = (proc_cpu_seconds(self.dr_pid) - self._dr0) / k
        return out


class StandbyTarget(StrongroomTarget):
    """`disk-sync` with a standby set attached: shipping (`disk-sync-standby`), shipping at the
    lowest CPU priority (`disk-sync-standby-niced`), or with its members stopped
    (`disk-sync-standby-stopped`)."""

    def __init__(self, config: str, work_dir: Path, progress: Progress) -> None:
        if config not in STANDBY_CONFIGS:
            raise ValueError(f"not a standby configuration: {config}")
        super().__init__(config, work_dir, progress)
        self.stopped = config == STOPPED_CONFIG
        self.niced = config == NICED_CONFIG
        self.standby_pids: list[int] = []
        """The standby members' pids."""
        self.dr_pid = 0
        self.paused: list[int] = []
        """Standby members stopped with SIGSTOP (continued before they are stopped)."""
        self.dr_address = ""
        self.after_confirm_s: float | None = None
        self._dr_channel: Any = None

    def realm_text(self) -> str:
        return realm_for(self.storage, self.events_dir, primary=[f"127.0.0.1:{free_port()}" for _ in range(3)])

    async def start(self) -> None:
        from strongroom.local.launcher import standby_site

        await super().start()
        members = self.cluster.standbys[CLUSTER]
        dr = self.cluster.drs[CLUSTER]
        self.standby_pids = [p.pid for p in members.values()]
        self.dr_pid, self.dr_address = dr.pid, dr.address
        self.progress.begin(f"{self.config}: waiting for the standby to hold the primary's log")
        if await self._held(await self._primary_commit(), CAUGHT_UP_TIMEOUT) is None:
            raise RuntimeError(f"the standby did not hold the primary's committed log within {CAUGHT_UP_TIMEOUT:.0f} s"
                               f"; see {dr.log}")
        if self.niced:
            site = self.cluster.sites[standby_site(CLUSTER)]
            realm = [site.realm_service.pid] if site.realm_service is not None else []
            for pid in [*self.standby_pids, dr.pid, site.etcd.pid, *realm]:
                renice(pid, NICE)
        if self.stopped:
            for proc in members.values():
                os.kill(proc.pid, signal.SIGSTOP)
                self.paused.append(proc.pid)

    async def stop(self) -> None:
        paused, self.paused = self.paused, []
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        channel, self._dr_channel = self._dr_channel, None
        try:
            if channel is not None:
                await channel.close()
        finally:
            await super().stop()

    def _meter(self) -> CpuMeter:
        return StandbyMeter(self.leader_pid, self.server_pids, self.standby_pids, self.dr_pid).start()

    async def confirm(self, n: int) -> dict[str, Any]:
        result = await super().confirm(n)
        if not self.stopped:
            # Not timed: how long after the last confirmation the standby held all of it.
            self.after_confirm_s = await self._held(await self._primary_commit(), CATCH_UP_TIMEOUT)
        return result

    async def standby_figures(self) -> dict[str, float]:
        """After the workloads (not timed): entries the standby is behind the primary's commit
        index, whether the DR service read the primary's leader, and (shipping) how long the
        standby took to hold what `confirm` committed and to catch up."""
        commit = await self._primary_commit()
        dr = await self._dr_status()
        out = {"behind_entries": float(max(0, commit - dr.standby_last_index)),
               "dr_reads_leader": 1.0 if dr.primary_member == self.leader else 0.0}
        self.notes.append(f"the DR service read the primary's {dr.primary_member or 'no member'}"
                          + (" (its leader)" if dr.primary_member == self.leader else f" (leader {self.leader})"))
        if self.after_confirm_s is not None:
            out["after_confirm_s"] = self.after_confirm_s
        if not self.stopped:
            took = await self._held(commit, CATCH_UP_TIMEOUT)
            if took is None:
                self.notes.append(f"the standby did not catch up within {CATCH_UP_TIMEOUT:.0f} s of the workloads")
            else:
                out["catch_up_s"] = took
        return out

    async def _primary_commit(self) -> int:
        """The primary leader's commit index."""
        for st in await self.client.status():
            if st.role == "leader":
                return int(st.commit_index)
        raise RuntimeError("no primary member answers as leader")

    async def _dr_status(self, timeout: float = 30.0) -> Any:
        """The DR service's `DrService.Status` (retried while it does not answer yet)."""
        import grpc

        from strongroom.api.v1 import dr_pb2, dr_pb2_grpc

        if self._dr_channel is None:
            self._dr_channel = open_channel(self.dr_address, [])
        stub = dr_pb2_grpc.DrServiceStub(self._dr_channel)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await stub.Status(dr_pb2.DrStatusRequest(), timeout=2.0)
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.1)

    async def _held(self, index: int, timeout: float) -> float | None:
        """Seconds until the standby leader holds `index` (as the DR service reports it), or
        None after `timeout`."""
        t0 = time.perf_counter()
        while True:
            if (await self._dr_status()).standby_last_index >= index:
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                return None
            await asyncio.sleep(POLL)
