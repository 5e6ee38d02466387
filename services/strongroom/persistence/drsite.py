"""`DrSite`: a member's view of its site's DR role for its cluster (docs/dr.md).

The role and generation live in the site's etcd (`DrRecord`, `dr/record.py`); without a record
the realm decides (the standby set's members are the standby). The member reads the record
before it campaigns, follows it while it runs (activation, fencing and demotion take effect
without a restart: the node hands leadership over and campaigns again in the new role), and
answers the other site's `CompareGeneration`: a primary told of a newer primary fences its site.

A primary's new leader asks the other site (`superseded_by_peer`) before it writes anything: a
primary site that comes back after the standby was activated learns it at once, and its first
leader serves no write. When the other site does not answer (it is down, or cut off) the leader
serves: clients never wait for the standby; the activated site's DR service keeps telling the
old primary until it hears it (`dr/fencer.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.record import DrRecord, DrRole, read_record, superseded, write_record
from strongroom.errors import InvalidArgument, PersistenceUnavailable
from strongroom.etcd import EtcdClient
from strongroom.keys import dr_key
from strongroom.persistence.transport import PeerUnreachable, compare_generation

__all__ = ["DrSite"]

log = logging.getLogger("strongroom.dr")


class DrSite:
    """The DR role of the site a member runs at, for the member's cluster."""

    def __init__(self, etcd: EtcdClient, cluster: str, member: str, default: DrRecord,
                 own_addresses: Callable[[], Sequence[str]]) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.member = member
        self.default = default
        self.record = default
        """The record in force, as this member last read it."""
        self._own_addresses = own_addresses

    @property
    def role(self) -> DrRole:
        return self.record.role

    async def load(self) -> DrRecord:
        """Read the site's record (before campaigning)."""
        self.record = await read_record(self.etcd, self.cluster, self.default)
        return self.record

    async def follow(self, on_change: Callable[[DrRecord, DrRecord], None]) -> None:
        """Keep `record` current; `on_change(old, new)` when the role or generation changes."""
        async for kind, kv in self.etcd.follow(dr_key(self.cluster)):
            new = DrRecord.from_bytes(kv.value, kv.mod_revision) if kind == "PUT" else self.default
            old, self.record = self.record, new
            if (old.role, old.generation) != (new.role, new.generation):
                log.warning("cluster %s at this site: %s -> %s (%s)", self.cluster, old.describe(), new.describe(),
                            new.reason or "the realm's default")
                on_change(old, new)

    def info(self) -> rpb.GenerationInfo:
        """This site as the other one is told it."""
        r = self.record
        return rpb.GenerationInfo(cluster=self.cluster, role=r.role.value, generation=r.generation,
                                  addresses=list(self._own_addresses()), member=self.member,
                                  newer_generation=r.newer_generation)

    async def learn(self, theirs: rpb.GenerationInfo) -> rpb.GenerationInfo:
        """The other site says what it is: fence this site if a newer primary superseded it.
        This site, after that."""
        if theirs.cluster != self.cluster:
            raise InvalidArgument(f"the call is about cluster {theirs.cluster!r}; this member is of {self.cluster!r}")
        try:
            role = DrRole(theirs.role)
        except ValueError:
            raise InvalidArgument(f"unknown DR role {theirs.role!r} (primary, standby or fenced)") from None
        while True:
            try:
                current = await read_record(self.etcd, self.cluster, self.default)
            except Exception as exc:  # noqa: BLE001 - etcd away: the caller asks again
                raise PersistenceUnavailable(f"cannot read the DR record of {self.cluster}: {exc}") from None
            if not superseded(current, role, theirs.generation):
                return self.info()
            fenced = current.changed(role=DrRole.FENCED, newer_generation=theirs.generation,
                                     peer=tuple(theirs.addresses) or current.peer,
                                     reason=f"{theirs.member or 'the other site'} is the primary of generation "
                                            f"{theirs.generation}; this site was the primary of generation "
                                            f"{current.generation}")
            if await write_record(self.etcd, self.cluster, fenced, current):
                log.critical("cluster %s: fenced: %s", self.cluster, fenced.reason)
                self.record = fenced
                return self.info()

    async def superseded_by_peer(self) -> bool:
        """A primary's new leader, before its first write: ask the other site; True when it
        turned out to be a newer primary (this site is fenced now). False when this site is not
        a primary, knows no other site, or none of its addresses answered in time."""
        if self.record.role is not DrRole.PRIMARY or not self.record.peer:
            return False
        mine = self.info()
        answers = await asyncio.gather(*(self._ask(a, mine) for a in self.record.peer))
        for answer in answers:
            if answer is not None:
                await self.learn(answer)
        return self.record.role is DrRole.FENCED

    async def _ask(self, address: str, mine: rpb.GenerationInfo) -> rpb.GenerationInfo | None:
        try:
            return await compare_generation(address, mine)
        except PeerUnreachable as exc:
            log.info("the other site of %s at %s did not say its DR role: %s", self.cluster, address, exc)
            return None
