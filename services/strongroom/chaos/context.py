"""What a fault acts on (`FaultContext`: the cluster, the history, the workload, the seeded
random source) and what a fault is (`Fault`: a named loop of rounds on a cluster of its spec).
The catalogue is `chaos.faults`."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from strongroom.chaos.cluster import ChaosCluster, ClusterSpec
from strongroom.chaos.history import INFO, History
from strongroom.chaos.workload import Workload
from strongroom.local.leader import NoLeader, wait_for_leader

__all__ = ["Fault", "FaultContext"]


@dataclass
class FaultContext:
    """What a fault acts on and records into."""

    cluster: ChaosCluster
    history: History
    workload: Workload
    rng: random.Random
    round: int = 0
    first_shape: int = -1
    leader_epoch: int = 0
    """Epoch of the leader `leader()` last returned."""
    liveness_bounds: bool = True
    """A missed liveness bound is a `violation` (False: a note; two faults at once, `pairs`)."""

    @property
    def ttl(self) -> float:
        return float(self.cluster.spec.lease_ttl)

    def note(self, detail: str, member: str | None = None, **values: Any) -> None:
        """Record a fault step."""
        self.history.record("nemesis", INFO, "fault", detail=detail, member=member, **values)

    def fence(self, member: str, kind: str, start: float, end: float, detail: str) -> None:
        """`member` must confirm nothing invoked (kind `invoked`) or answered (kind `completed`)
        between `start` and `end`."""
        self.history.record("nemesis", INFO, "fence", member=member, kind=kind, start=start, end=end, detail=detail)

    async def leader(self, timeout: float = 15.0) -> str | None:
        """The serving leader (its epoch in `leader_epoch`), or None if there is none within
        `timeout`."""
        try:
            found = await wait_for_leader(self.cluster.answering, timeout)
        except NoLeader:
            self._missed(f"no serving leader for {timeout:.0f}s between fault rounds")
            return None
        self.leader_epoch = found.epoch
        return found.member

    def expect_new_leader(self, within: float, after: str) -> asyncio.Task[None]:
        """A leader of a newer epoch than `leader_epoch` must serve within `within` seconds;
        if none does, a `violation` is recorded (the checker's liveness findings)."""
        epoch = self.leader_epoch
        start = time.monotonic()

        async def watch() -> None:
            try:
                found = await wait_for_leader(self.cluster.answering, within - (time.monotonic() - start),
                                              newer_than=epoch, interval=0.2)
            except NoLeader:
                self._missed(f"no leader of an epoch newer than {epoch} within {within:.0f}s after {after}")
                return
            self.note(f"new leader {found.member} (epoch {found.epoch}) {time.monotonic() - start:.1f}s "
                      f"after {after}", found.member)

        return asyncio.create_task(watch())

    def _missed(self, detail: str) -> None:
        """A liveness bound was missed."""
        if self.liveness_bounds:
            self.history.record("nemesis", INFO, "violation", detail=detail)
        else:
            self.note(f"(not held against several faults at once) {detail}")

    def followers(self, leader: str) -> list[str]:
        """Running members other than `leader`."""
        return [n for n in self.cluster.names if n != leader and self.cluster.alive(n)]


@dataclass
class Fault:
    """A named fault: the cluster it needs and one round of injection."""

    name: str
    description: str
    spec: ClusterSpec = field(default_factory=ClusterSpec)

    async def run(self, ctx: FaultContext, until: float) -> None:
        """Rounds until `until` (a round that started finishes)."""
        while time.monotonic() < until:
            ctx.round += 1
            await self.round(ctx)

    async def round(self, ctx: FaultContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def after_heal(self, ctx: FaultContext) -> list[str]:
        """Checks once everything was healed, before publishing stops; what failed (none by
        default)."""
        return []
