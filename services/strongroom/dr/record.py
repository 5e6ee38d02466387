"""A site's DR record: which role its set of a cluster plays, and in which generation.

Each site keeps, in its own etcd, `/strongroom/clusters/<c>/dr` (`keys.dr_key`): a JSON
`DrRecord`. Without one, a site's role is the realm's: the standby set's members are the
standby, every other member the primary, both of generation 0. Activation, fencing and demotion
(docs/dr.md) write it, each with a compare-and-swap on the revision they read, so two operators
(or an operator and a fencing call) cannot both win.

The **generation** is carried in the high bits of every epoch (`epoch_of`): a leader's epoch is
`generation << 40 | create_revision of its leader key` (plus the cluster's epoch base, 0 until
etcd went back: `persistence/election.py`). The two sites' etcd revisions are
unrelated, so only the generation orders their epochs: activation raises it by one, every epoch
of the new primary is higher than every epoch of the old, and the log's epochs keep growing
across the sites. 2**40 revisions is more than an etcd reaches in its life (a million writes a
second for twelve days would).

The one rule of fencing (`superseded`): a primary that learns of a primary of a newer
generation is fenced: it accepts no write until an operator demotes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.etcd import EtcdClient
from strongroom.keys import dr_key

__all__ = [
    "GENERATION_SHIFT",
    "DrRecord",
    "DrRole",
    "default_record",
    "epoch_of",
    "generation_of",
    "read_record",
    "superseded",
    "write_record",
]

GENERATION_SHIFT = 40
"""Bits of an epoch below the generation: an etcd create revision fits in them."""


def epoch_of(generation: int, revision: int) -> int:
    """The epoch of a leader key created at `revision` in a site of `generation`."""
    if revision >= 1 << GENERATION_SHIFT:
        raise ValueError(f"etcd revision {revision} does not fit below the generation bits")
    return generation << GENERATION_SHIFT | revision


def generation_of(epoch: int) -> int:
    """The DR generation an epoch belongs to."""
    return epoch >> GENERATION_SHIFT


class DrRole(str, Enum):
    """What a site's set of members does for its cluster."""

    PRIMARY = "primary"
    """Serves clients; its committed log is what a standby receives."""
    STANDBY = "standby"
    """Serves no client; takes the primary's committed log from the DR service."""
    FENCED = "fenced"
    """A primary that learnt of a newer one: serves no client and takes nothing shipped until an
    operator demotes it (`strongroom dr demote`)."""


@dataclass(frozen=True)
class DrRecord:
    """A site's role for one cluster, as its etcd keeps it."""

    role: DrRole
    generation: int = 0
    """The generation of this site's epochs."""
    peer: tuple[str, ...] = ()
    """host:port addresses of the other site's members (or one address in front of them): where
    a standby reads the primary's log, where a primary looks for a newer primary, where an
    activated site's DR service tells the old primary it is fenced."""
    newer_generation: int = 0
    """Fenced: the generation of the primary that superseded this site."""
    since_index: int = 0
    """The last index both sites' logs share. A primary by activation: the last index it held of
    the previous generation (its first entry of its own generation follows it). A fenced site:
    the newer primary's, as it said (0 until it did); a demoted one cuts its log back to it."""
    changed_at: float = 0.0
    """Unix time the record was written (0: the realm's default, never written)."""
    reason: str = ""
    """Why it was written, in words (who activated, fenced or demoted, and how)."""
    revision: int = field(default=0, compare=False)
    """etcd mod_revision the record was read at (0: no record in etcd). Not stored."""

    @property
    def serves_clients(self) -> bool:
        return self.role is DrRole.PRIMARY

    def to_bytes(self) -> bytes:
        data = asdict(self)
        del data["revision"]
        data["role"] = self.role.value
        data["peer"] = list(self.peer)
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, revision: int = 0) -> DrRecord:
        data = json.loads(raw)
        return cls(role=DrRole(data["role"]), generation=int(data.get("generation", 0)),
                   peer=tuple(data.get("peer", ())), newer_generation=int(data.get("newer_generation", 0)),
                   since_index=int(data.get("since_index", 0)), changed_at=float(data.get("changed_at", 0.0)),
                   reason=str(data.get("reason", "")), revision=revision)

    def changed(self, **changes: object) -> DrRecord:
        """This record with `changes`, stamped now."""
        return replace(self, changed_at=time.time(), **changes)  # type: ignore[arg-type]

    def told(self, cluster: str, addresses: Sequence[str], member: str) -> rpb.GenerationInfo:
        """This site as the other is told it (`CompareGeneration`): its role and generation, where
        it is reached, who says so, and (a primary) the last index both sites share."""
        return rpb.GenerationInfo(cluster=cluster, role=self.role.value, generation=self.generation,
                                  addresses=list(addresses), member=member, newer_generation=self.newer_generation,
                                  since_index=self.since_index if self.role is DrRole.PRIMARY else 0)

    def describe(self) -> str:
        """The role in words, for logs and errors."""
        text = f"{self.role.value} of generation {self.generation}"
        if self.role is DrRole.FENCED:
            text += f" (superseded by generation {self.newer_generation})"
        return text


def default_record(standby_set: bool, standby_primary: Sequence[str], standby_members: Sequence[str]) -> DrRecord:
    """A site's role before any record was written: the realm's. `standby_set`: the site runs the
    cluster's standby set (whose peer is the realm's `standby.primary`); otherwise it runs the
    primary set, whose peer is the standby members' addresses the realm gives (possibly none)."""
    if standby_set:
        return DrRecord(DrRole.STANDBY, peer=tuple(standby_primary))
    return DrRecord(DrRole.PRIMARY, peer=tuple(standby_members))


def superseded(mine: DrRecord, their_role: DrRole, their_generation: int) -> bool:
    """Whether a site of role `mine` must fence itself on learning that the other site is a
    `their_role` of `their_generation`: only a primary, and only by a newer primary."""
    return mine.role is DrRole.PRIMARY and their_role is DrRole.PRIMARY and their_generation > mine.generation


async def read_record(etcd: EtcdClient, cluster: str, default: DrRecord) -> DrRecord:
    """The site's record for `cluster`, or `default` when none was written."""
    kv = await etcd.get(dr_key(cluster))
    if kv is None:
        return default
    return DrRecord.from_bytes(kv.value, kv.mod_revision)


async def write_record(etcd: EtcdClient, cluster: str, record: DrRecord, read: DrRecord) -> bool:
    """Store `record` if the site's record is still the one `read` was (its revision); False when
    someone wrote it in between (read it again and decide again)."""
    return await etcd.put_if_version(dr_key(cluster), record.to_bytes(), read.revision)
