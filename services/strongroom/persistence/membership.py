"""Who the members of this member's cluster are, and how to reach them.

Every member registers a `MemberRecord` at its member key in etcd (`strongroom.keys`), under its
lease: its gRPC address, its replication link address (if it takes appends on one) and the log
format it reads. `Membership` watches those records for the member's cluster and answers the
questions the rest of the member asks: who the peers are, how many make a majority, where a
peer listens, whether every peer reads a log format.

The realm names the members the cluster should have (`names`); the voters are the members whose
promises and acknowledgments count now (`voters`, followed in etcd: `configuration.py`). They
differ while a leader carries out a realm version that changes the member list (`reconfig.py`):
the leader then replicates to every member of either (`peers`) and counts majorities of the
voters. A DR standby set's voters are its realm list, fixed for the life of the process (a
realm version that changes that set is logged and not applied).

Processes beside the members that call them (the router) find them with `MemberAddresses`:
the realm's address where it names one, else the member's registration, followed as members
move or a realm version adds them; `member_addresses` reads them once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from strongroom.etcd import EtcdClient
from strongroom.keys import members_prefix, voters_key
from strongroom.persistence.configuration import VoterRecord, freeze_holders, load_voters, majority
from strongroom.realm.model import Cluster, Member

__all__ = ["MemberAddresses", "MemberRecord", "Membership", "member_addresses"]

log = logging.getLogger("strongroom.membership")


@dataclass(frozen=True)
class MemberRecord:
    """What a member registers in etcd about itself."""

    address: str
    """host:port of its gRPC server."""
    replication: str | None = None
    """host:port of its replication link; None: appends go to it over gRPC."""
    log_format: int = 1
    """The log format it reads (a member of a version before formats registers none: 1)."""

    def to_bytes(self) -> bytes:
        """The stored JSON."""
        record: dict[str, object] = {"address": self.address, "log_format": self.log_format}
        if self.replication:
            record["replication"] = self.replication
        return json.dumps(record).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> MemberRecord | None:
        """A stored record, or None if it is not one."""
        try:
            data = json.loads(raw)
            address = data["address"]
        except (ValueError, KeyError, TypeError):
            return None
        fmt = data.get("log_format")
        return cls(address=address, replication=data.get("replication") or None,
                   log_format=fmt if isinstance(fmt, int) else 1)


class Membership:
    """The members of one cluster as this member sees them: the realm's list, and where each
    one registered."""

    def __init__(self, etcd: EtcdClient, cluster: Cluster, member: str, address: str, fixed: bool = False) -> None:
        self._etcd = etcd
        self.cluster = cluster
        """The cluster's realm definition in force (its settings change with realm versions)."""
        self.member = member
        self.fixed = fixed
        """The voters are the realm's list, which does not change while the process runs (a DR
        standby set: what it stores is the primary's log, not its own decisions)."""
        self.record = VoterRecord(tuple(m.name for m in cluster.members))
        """The voters as last read from etcd (the realm's list while it holds no record)."""
        self.changed = asyncio.Event()
        """Set when a realm version changes the member list or the voters change (the leader's
        `Reconfiguration` waits on it)."""
        # Every registration read, by member name, members of the realm or not (one a later
        # realm version adds may register first).
        self._registrations: dict[str, bytes] = {}
        self._addresses: dict[str, str] = {m.name: m.address for m in cluster.members if m.address}
        self._addresses[member] = address
        # Peers' replication link addresses (None: they registered none).
        self._links: dict[str, str | None] = {}
        # The log format each peer registered it reads, and the lowest of them (None: to be
        # computed again; asked on every publish batch and acknowledgment).
        self._formats: dict[str, int] = {}
        self._lowest_format: int | None = None

    # --- questions ------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Every member the realm names for the cluster, in realm order."""
        return [m.name for m in self.cluster.members]

    @property
    def voters(self) -> tuple[str, ...]:
        """The members whose promises and acknowledgments count."""
        return self.record.voters

    def everyone(self) -> list[str]:
        """The realm's members, then the voters it no longer names (being removed) and, while
        no record is written, the members with state it no longer names."""
        names = self.names
        return names + list(dict.fromkeys(v for v in (*self.voters, *self.record.also) if v not in names))

    def peers(self) -> list[str]:
        """Every member but this one that a leader replicates to: the realm's members and the
        voters (members being added are learners until they vote)."""
        return [n for n in self.everyone() if n != self.member]

    def majority(self) -> int:
        """How many voters (this one included, if it is one) make a majority."""
        return majority(len(self.voters))

    def votes(self) -> bool:
        """This member is a voter: it may lead, and its promise counts."""
        return self.member in self.voters

    def set_voters(self, record: VoterRecord, fresh: bool = True) -> None:
        """The voters as etcd holds them now. A record not `fresh` (a watch event) that is older
        than the one held is not taken: the reply to the leader's own write and the watch event
        of an earlier one come in either order, and a view two changes behind would count
        majorities that need not meet the current ones."""
        if not fresh and not record.newer_than(self.record):
            log.debug("voters record of revision %d (epoch %d) is older than the one held (%d, epoch %d)",
                      record.revision, record.epoch, self.record.revision, self.record.epoch)
            return
        if record.voters != self.record.voters:
            log.info("voters of cluster %s: %s", self.cluster.name, ", ".join(record.voters))
            self.changed.set()
        self.record = record
        self._lowest_format = None

    def address_of(self, name: str) -> str | None:
        """Where a member listens (its realm address, else its etcd registration)."""
        return self._addresses.get(name)

    def link_of(self, name: str) -> str | None:
        """Where a peer takes appends on its replication link; None: it registered none, appends
        go to it over gRPC."""
        return self._links.get(name)

    def appends_via(self, name: str) -> str:
        """How a leader sends `name` appends: "link", "grpc", or "" (this member, or a peer not
        registered yet)."""
        if name == self.member or name not in self._links:
            return ""
        return "link" if self._links[name] else "grpc"

    def all_read(self, log_format: int) -> bool:
        """Whether every other member registered that it reads `log_format` (or newer)."""
        lowest = self._lowest_format
        if lowest is None:
            lowest = self._lowest_format = min((self._formats.get(name, 1) for name in self.peers()),
                                               default=sys.maxsize)
        return lowest >= log_format

    # --- changes --------------------------------------------------------------------------------

    def update(self, cluster: Cluster) -> bool:
        """A new realm version's definition of the cluster: its settings, addresses and member
        list take effect (the voters follow the member list as the leader changes them); False
        (nothing changes) if it changes the member list of a set whose voters are `fixed`."""
        changed = [m.name for m in cluster.members] != self.names
        if changed and self.fixed:
            return False
        self.cluster = cluster
        self._lowest_format = None
        for m in cluster.members:
            if m.address:
                self._addresses[m.name] = m.address
        if changed:
            for name, raw in self._registrations.items():
                self.note(name, raw)
            self.changed.set()
        return True

    async def load_voters(self) -> VoterRecord:
        """Read the voters from etcd now (a new leader, before it counts anything)."""
        if not self.fixed:
            self.set_voters(await load_voters(self._etcd, self.cluster.name, self.names))
        return self.record

    async def freeze_holders(self, epoch: int, lease: int) -> VoterRecord | None:
        """A new leader with no record: the members with state written down beside the realm's
        list before it sends an entry (`configuration.freeze_holders`); None if it could not be
        written (the record moved on, or the leader key is no longer held)."""
        if self.fixed:
            return self.record
        record = await freeze_holders(self._etcd, self.cluster.name, self.record, epoch, lease)
        if record is not None and record is not self.record:
            log.info("cluster %s has no voters record: %s written down as the members with state, counted beside "
                     "the realm's %s", self.cluster.name, ", ".join(record.also), ", ".join(record.voters))
            self.set_voters(record)
        return record

    async def follow_voters(self) -> None:
        """Follow the voters in etcd (runs until cancelled; retries while etcd is away)."""
        if self.fixed:
            return
        async for kind, kv in self._etcd.follow(voters_key(self.cluster.name)):
            record = VoterRecord.from_bytes(kv.value, kv.mod_revision) if kind == "PUT" else None
            if record is not None:
                self.set_voters(record, fresh=False)
                continue
            if kind == "PUT":
                log.error("the voters record of cluster %s cannot be read; the realm's member list counts, "
                          "with the members that hold state, until a leader writes it again", self.cluster.name)
            # No record (etcd lost its data) or a damaged one: as a new leader would count.
            try:
                self.set_voters(await load_voters(self._etcd, self.cluster.name, self.names))
            except Exception as exc:  # noqa: BLE001 - etcd away again: the next event reads it
                log.warning("cannot read the voters of cluster %s: %s", self.cluster.name, exc)

    async def watch(self) -> None:
        """Follow the members' registrations in etcd (runs until cancelled; retries while etcd is
        away)."""
        prefix = members_prefix(self.cluster.name)
        async for kind, kv in self._etcd.follow(prefix, prefix=True):
            if kind == "PUT":
                self.note(kv.key[len(prefix):], kv.value)

    def note(self, name: str, raw: bytes) -> None:
        """A member's registration record, as read from etcd."""
        self._registrations[name] = raw
        member = self.cluster.member(name)
        if member is None:
            return
        record = MemberRecord.from_bytes(raw)
        if record is None:
            return
        link = record.replication
        if self._links.get(name, "") != link:  # "": not heard of yet (a link is None or an address)
            log.info("member %s takes appends %s", name, f"on its replication link at {link}" if link else "over gRPC")
            self._links[name] = link
        if self._formats.get(name) != record.log_format:
            log.info("member %s reads log format %d", name, record.log_format)
            self._formats[name] = record.log_format
            self._lowest_format = None
        if member.address:
            return
        if self._addresses.get(name) != record.address:
            log.info("member %s registered at %s", name, record.address)
        self._addresses[name] = record.address


class MemberAddresses:
    """Where the members of a cluster listen, for a process that calls them: each member's
    address as the realm names it, else as it registered in the cluster's etcd (its
    `MemberRecord` at its member key), followed (`follow`) as members move (register again at
    another address) and as realm versions add or remove members (`update`). A registration that
    goes away (the member down, its lease lapsed) keeps its last address: the member comes back
    there, or registers its new one."""

    def __init__(self, etcd: EtcdClient, cluster: str, members: list[Member]) -> None:
        self._etcd = etcd
        self.cluster = cluster
        self._members = list(members)
        # Registered addresses by member name (members of the realm or not: one a later realm
        # version adds may register first).
        self._registered: dict[str, str] = {}

    def addresses(self) -> list[str]:
        """The known addresses of the members, in realm order (a member neither named nor
        registered yet is left out)."""
        out: list[str] = []
        for m in self._members:
            address = m.address or self._registered.get(m.name)
            if address and address not in out:
                out.append(address)
        return out

    def complete(self) -> bool:
        """Every member's address is known."""
        return all(m.address or m.name in self._registered for m in self._members)

    def update(self, members: list[Member]) -> bool:
        """A realm version's members of the cluster; True if the addresses changed."""
        before = self.addresses()
        self._members = list(members)
        return self.addresses() != before

    def note(self, name: str, raw: bytes) -> bool:
        """A member's registration record as read from etcd; True if the addresses changed."""
        record = MemberRecord.from_bytes(raw)
        if record is None or self._registered.get(name) == record.address:
            return False
        before = self.addresses()
        self._registered[name] = record.address
        return self.addresses() != before

    async def read(self) -> None:
        """Read the registrations once."""
        prefix = members_prefix(self.cluster)
        for kv in await self._etcd.get_prefix(prefix):
            self.note(kv.key[len(prefix):], kv.value)

    async def follow(self, on_change: Callable[[list[str]], Awaitable[None]]) -> None:
        """Follow the registrations (runs until cancelled; retries while etcd is away), calling
        `on_change` with the addresses after each change."""
        prefix = members_prefix(self.cluster)
        async for kind, kv in self._etcd.follow(prefix, prefix=True):
            if kind == "PUT" and self.note(kv.key[len(prefix):], kv.value):
                addresses = self.addresses()
                log.info("members of %s are at %s", self.cluster, ",".join(addresses))
                await on_change(addresses)


async def member_addresses(etcd: EtcdClient, cluster: str, members: list[Member], patience: float = 10.0) -> list[str]:
    """The gRPC addresses of a cluster's `members` (a set of the realm: the primary's, or at a
    standby site the standby set's) as `MemberAddresses` knows them: once every member is
    known, or after `patience` seconds with the ones known then (waiting on until at least one
    is). Read once: a tool that runs for long follows them with `MemberAddresses.follow`, or
    reads them again when none answers."""
    directory = MemberAddresses(etcd, cluster, members)
    started = time.monotonic()
    waited = False
    while True:
        if not directory.complete():
            try:
                await directory.read()
            except Exception as exc:  # noqa: BLE001 - etcd away: look again
                log.warning("cannot read the members of %s: %s", cluster, exc)
        found = directory.addresses()
        if directory.complete() or (found and time.monotonic() - started >= patience):
            return found
        if not waited and time.monotonic() - started >= patience:
            log.warning("no member of %s registered yet; waiting", cluster)
            waited = True
        await asyncio.sleep(0.5)
