"""Several faults at once: two faults of the catalogue injected together, drawn with a seed.

A pair `a+b` runs a round of `a` and, a moment into it (0-2 s, from the scenario's seeded random
source), a round of `b`, over and over, on a cluster that has what both need (proxies, shims,
tmpfs data dirs). Safety is judged as for one fault: nothing confirmed lost, phantom, reordered
or duplicated beyond the redelivery rules, nothing confirmed by a fenced member, no unit of work
partial or lost, every member agreeing at the end. Each fault's own liveness bound (a newer
leader within its time) is written down but not held against the pair: the other fault may
rightly keep the cluster without a leader meanwhile (etcd down while the leader is killed).
After both are healed a leader must serve within 60 s, as after every scenario.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass, replace

from strongroom.chaos.cluster import ClusterSpec
from strongroom.chaos.faults import FAULTS, Fault, FaultContext

__all__ = ["PAIRABLE", "Pair", "fault_named", "merged_spec", "random_pairs"]

PAIRABLE = [name for name in FAULTS if name not in ("dr", "disk-full", "packet-loss", "corrupt-member",
                                                     "rot-member")]
"""Faults a pair may draw: not `dr` (a second site; its own scenario), `disk-full` (it fills the
leader's disk and then a follower's in each round: two faults already; `disk-full-follower`
pairs), `packet-loss` (it needs a network namespace of its own) nor, for now, `corrupt-member` and `rot-member`
(newer than the seeded draws the README's table and CI use: adding it would change them)."""

SEPARATOR = "+"


def merged_spec(a: ClusterSpec, b: ClusterSpec) -> ClusterSpec:
    """A cluster with what both specs need; the storage and compaction of the one that is not
    the default (disk-async for a lost-write fault of that mode)."""
    default = ClusterSpec()
    storage = a.storage if a.storage != default.storage else b.storage
    return replace(a, storage=storage, proxy_members=a.proxy_members or b.proxy_members,
                   proxy_etcd=a.proxy_etcd or b.proxy_etcd, fsync_journal=a.fsync_journal or b.fsync_journal,
                   clock_shift=a.clock_shift or b.clock_shift, tmpfs_mb=max(a.tmpfs_mb, b.tmpfs_mb),
                   compact_after_entries=min(a.compact_after_entries, b.compact_after_entries),
                   extra_env={**a.extra_env, **b.extra_env})


@dataclass
class Pair(Fault):
    """Two faults at once (see the module)."""

    first: Fault | None = None
    second: Fault | None = None

    async def run(self, ctx: FaultContext, until: float) -> None:
        ctx.liveness_bounds = False
        await super().run(ctx, until)

    async def round(self, ctx: FaultContext) -> None:
        assert self.first is not None and self.second is not None
        delay = ctx.rng.uniform(0.0, 2.0)
        second = self.second

        async def later() -> None:
            await asyncio.sleep(delay)
            await second.round(ctx)
        await asyncio.gather(self.first.round(ctx), later())


def fault_named(name: str) -> Fault:
    """A fault of the catalogue, or a pair `a+b` of two different pairable ones; KeyError with
    what is known otherwise."""
    if name in FAULTS:
        return FAULTS[name]
    parts = name.split(SEPARATOR)
    if len(parts) != 2 or parts[0] == parts[1] or not all(p in PAIRABLE for p in parts):
        raise KeyError(f"unknown fault {name!r}: a fault of {', '.join(FAULTS)}, or two different ones of "
                       f"{', '.join(PAIRABLE)} joined by {SEPARATOR!r}")
    a, b = FAULTS[parts[0]], FAULTS[parts[1]]
    return Pair(name, f"{a.name} and {b.name} at once", merged_spec(a.spec, b.spec), a, b)


def random_pairs(count: int, seed: int) -> list[str]:
    """`count` different pairs drawn from the pairable faults with `seed`."""
    combos = [f"{a}{SEPARATOR}{b}" for a, b in itertools.combinations(PAIRABLE, 2)]
    return random.Random(seed).sample(combos, min(count, len(combos)))
