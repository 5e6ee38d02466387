"""`PStore`: a member's view of its cluster's persistent store, and the leader's enforcement of it.

Every member follows the store's record in the cluster's etcd (`storestate.py`), the way
`DrSite` follows the DR record, so the member that leads next knows the state before it serves.
The leader enforces it on its term (`LeaderTerm.enforce_store`): while the store is unavailable,
commands that need persistence get PSTORE_UNAVAILABLE and no timeout runs on it; while it takes
no new units of work, producing commands get NO_NEW_UOW. The fronts (messaging, maps, units of
work, publications) ask the term which commands those are; this module decides the state.

Operators change the state through any member (`change`): the leader writes the record and
enforces it before it answers; a member that knows another leader says NOT_LEADER; without a
leader any member writes it and the next leader enforces it. The leader also watches what the
store holds against the realm's capacity: an available store over it takes no new units of work
by itself (enforced at once, written to etcd and logged). And it watches whether the members can
write their own storage (`storehealth.py`): fewer than a majority can, and the store is unavailable
(cause `disk`) at once; a majority can again, and it takes no new units of work; a leader that
cannot store itself while a majority of the others can hands its leadership over to them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from strongroom.errors import (
    NotLeaderError,
    PersistenceUnavailable,
    StrongroomError,
    UnknownCluster,
)
from strongroom.etcd import EtcdClient
from strongroom.keys import pstore_key
from strongroom.persistence.election import LeaderInfo
from strongroom.persistence.replica import Replica
from strongroom.persistence.storehealth import MemberStorage, by_disk, hand_over_to_others
from strongroom.persistence.storestate import (
    AVAILABLE_RECORD,
    StoreCause,
    StoreAction,
    StoreRecord,
    StoreState,
    StoreView,
    after,
    by_capacity,
    no_new_error,
    over_capacity,
    read_record,
    read_record_at,
    unavailable_error,
    usage_of,
    write_record,
)
from strongroom.persistence.term import STORAGE_FAILURE_PAUSE, LeaderTerm
from strongroom.realm.model import Cluster

__all__ = ["CAPACITY_CHECK_SECONDS", "PStore"]

log = logging.getLogger("strongroom.pstore")

CAPACITY_CHECK_SECONDS = 0.1
"""How often the leader compares what the store holds with its capacity (when it has one)."""
CHANGE_ATTEMPTS = 5
"""An operator's change lost this many compare-and-swaps in a row (others writing): refused."""


class Member(Protocol):
    """What the store's state needs of its member (`PersistenceNode`)."""

    cluster_name: str
    member: str
    term: LeaderTerm | None
    leader: LeaderInfo | None
    replica: Replica

    @property
    def cluster(self) -> Cluster: ...

    def is_leader_role(self) -> bool: ...

    async def hand_over(self, reason: str, err: Exception | None = None, pause: float = 0.0,
                        term: LeaderTerm | None = None) -> None: ...

    def in_background(self, work: Coroutine[Any, Any, None]) -> None: ...


class PStore:
    """The persistent store's state of a member's cluster (see the module's docstring)."""

    def __init__(self, etcd: EtcdClient, member: Member) -> None:
        self._etcd = etcd
        self._member = member
        self.cluster = member.cluster_name
        self.record = AVAILABLE_RECORD
        """The record in force, as this member last read it from etcd."""
        # The etcd revision of the newest record seen (a read and the watch may overlap).
        self._seen = 0
        # The leader's capacity record, in force before it is written to etcd (None: none).
        self._capacity: StoreRecord | None = None
        # The leader's record of its members' storage (`_check_disk`), in force before it is written.
        self._disk: StoreRecord | None = None
        member.replica.health.on_change = self._check_disk
        self._handing_over: LeaderTerm | None = None  # the term handed over for its storage

    # --- the state -------------------------------------------------------------------------------

    @property
    def effective(self) -> StoreRecord:
        """The state in force here: the record, or the leader's disk or capacity record not yet
        written."""
        return self._disk or self._capacity or self.record

    def over(self) -> str:
        """Why the store is over its capacity now, as this member applied it ("": it is not)."""
        return over_capacity(usage_of(self._member.replica.state), self._member.cluster.persistent_store)

    def view(self) -> StoreView:
        """The store as this member answers for it."""
        member = self._member
        term = member.term
        leading = term is not None and term.serving and member.is_leader_role()
        health = member.replica.health
        failures = [(member.member, health.reason, health.since)] if health.reason else []
        if leading and term is not None:
            failures += [(name, rep.cannot_store, rep.cannot_store_since) for name, rep in term.replicators.items()
                         if rep.cannot_store]
        return StoreView(self.cluster, self.effective, usage_of(member.replica.state),
                         member.cluster.persistent_store, self.over(), member.member, leading, tuple(failures))

    def _set(self, record: StoreRecord, seen: int) -> None:
        """A record read from etcd (or just written) at revision `seen`: in force unless a newer
        one was seen already."""
        if seen < self._seen:
            return
        changed = (record.state, record.since) != (self.effective.state, self.effective.since)
        self._seen, self.record, self._capacity, self._disk = max(seen, self._seen), record, None, None
        if changed:
            log.warning("cluster %s: the persistent store is %s", self.cluster, record.describe())
            self._enforce()

    def _enforce(self) -> None:
        """Enforce the state in force on this member's term, if it leads."""
        term = self._member.term
        if term is None:
            return
        record = self.effective
        unavailable = unavailable_error(self.cluster, record) if record.state is StoreState.UNAVAILABLE else None
        no_new = no_new_error(self.cluster, record) if record.state is StoreState.NO_NEW_UOW else None
        backed = term.enforce_store(unavailable, no_new, in_flight=record.cause is StoreCause.DISK)
        if backed:
            log.warning("cluster %s: %d submission(s) queued for the log backed out (the persistent store is "
                        "unavailable): their callers get PSTORE_UNAVAILABLE", self.cluster, backed)

    # --- following etcd --------------------------------------------------------------------------

    async def follow(self) -> None:
        """Keep `record` current from the cluster's etcd, probe this member's own storage
        (`StorageHealth.run`) and scrub it (`Scrub.run`), until cancelled."""
        replica = self._member.replica
        probe = asyncio.create_task(replica.health.run(), name="storage-probe")
        scrub = asyncio.create_task(replica.scrub.run(), name="storage-scrub")
        try:
            await self._follow()
        finally:
            probe.cancel()
            scrub.cancel()

    async def _follow(self) -> None:
        async for kind, kv in self._etcd.follow(pstore_key(self.cluster)):
            try:
                record = StoreRecord.from_bytes(kv.value, kv.mod_revision) if kind == "PUT" else AVAILABLE_RECORD
            except (ValueError, KeyError) as exc:
                log.error("cluster %s: the persistent store's record in etcd is not readable (%s); keeping %s",
                          self.cluster, exc, self.record.describe())
                continue
            self._set(record, kv.mod_revision)

    async def lead(self, term: LeaderTerm) -> None:
        """A new term, before it serves: the record read afresh, the pseudo-clock started (or
        standing still, while the store is unavailable), the state enforced, and the capacity and
        the members' storage watched while the term lasts."""
        self._capacity = self._disk = None  # records of an earlier term not written: decided afresh
        try:
            self._set(*await read_record_at(self._etcd, self.cluster))
        except Exception as exc:  # noqa: BLE001 - etcd away: the followed record stands
            log.warning("cluster %s: cannot read the persistent store's state (%s); enforcing %s", self.cluster,
                        exc, self.record.describe())
        term.start_clock()
        self._enforce()
        term.run(self._watch(term), "pstore-watch")

    # --- the capacity and the members' storage ----------------------------------------------------

    async def _watch(self, term: LeaderTerm) -> None:
        """While `term` lasts: the members' storage and the capacity decided every
        CAPACITY_CHECK_SECONDS, a new record in force at once here, then in etcd for every
        member (written again until it is)."""
        while term.alive():
            await asyncio.sleep(CAPACITY_CHECK_SECONDS)
            self._check_disk()
            self._check_capacity()
            pending = self._disk or self._capacity
            if pending is None:
                continue
            try:
                written = await write_record(self._etcd, self.cluster, pending)
                if written is None:  # someone else wrote it meanwhile: decide again on theirs
                    self._set(*await read_record_at(self._etcd, self.cluster))
                else:
                    self._set(written, written.revision)
            except Exception as exc:  # noqa: BLE001 - etcd away: in force here, written later
                log.warning("cluster %s: cannot record the persistent store's state in etcd yet: %s", self.cluster,
                            exc)

    def _check_capacity(self) -> None:
        """An available store over its capacity takes no new units of work."""
        member = self._member
        capacity = member.cluster.persistent_store
        if self._capacity is not None or not (capacity.capacity_messages or capacity.capacity_bytes):
            return
        record = by_capacity(self.effective, self.over(), member.member)
        if record is None:
            return
        self._capacity = record
        log.warning("cluster %s: the persistent store is over its capacity (%s): it takes no new units of "
                    "work; consumers drain it, then `strongroom store allow-new --cluster %s`",
                    self.cluster, self.over(), self.cluster)
        self._enforce()

    def _check_disk(self) -> None:
        """The serving leader decides on its members' storage (`storehealth.py`): called when this
        member's own storage fails or works again, and every CAPACITY_CHECK_SECONDS."""
        member = self._member
        term = member.term
        if term is None or not term.serving or not term.alive():
            return
        health = member.replica.health
        members = [MemberStorage(member.member, health.reason)] + [
            MemberStorage(name, rep.cannot_store, rep.reachable) for name, rep in term.replicators.items()]
        majority = term.membership.majority()
        if not health.usable and hand_over_to_others(members, majority, member.member):
            if self._handing_over is term:
                return
            self._handing_over = term
            log.error("cluster %s: leader %s %s; a majority of the others can store: handing over", self.cluster,
                      member.member, health.reason)
            member.in_background(member.hand_over("storage failed", PersistenceUnavailable(
                f"member {member.member} {health.reason}"), STORAGE_FAILURE_PAUSE, term))
            return
        record = by_disk(self.effective, members, majority, member.member)
        if record is None:
            return
        self._disk = record
        log.warning("cluster %s: the persistent store is %s", self.cluster, record.describe())
        self._enforce()

    # --- operators --------------------------------------------------------------------------------

    async def change(self, cluster: str, action: StoreAction, reason: str = "") -> StoreView:
        """An operator disconnects or connects the store, or allows new units of work: the record
        written (compare-and-swap) and, at the leader, enforced before this returns. StoreStateError
        when the state does not allow it (nothing changed); NotLeaderError at a member that knows
        another leader; UnknownCluster for another cluster; PersistenceUnavailable when etcd does
        not answer."""
        member = self._member
        if cluster != self.cluster:
            raise UnknownCluster(f"member {member.member} is of cluster {self.cluster!r}, not {cluster!r}")
        leader = member.leader
        if not member.is_leader_role() and leader is not None and leader.member != member.member:
            raise NotLeaderError(f"member {member.member} does not lead cluster {self.cluster}; {leader.member} does "
                                 f"and enforces the store's state", leader.member, leader.address)
        for _ in range(CHANGE_ATTEMPTS):
            try:
                current = await read_record(self._etcd, self.cluster)
                new = after(current, action, self.cluster, member.member, reason,
                            self.over() if action is StoreAction.ALLOW_NEW else "")
                written = await write_record(self._etcd, self.cluster, new)
            except StrongroomError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd away: nothing written
                raise PersistenceUnavailable(f"cannot reach the etcd of cluster {self.cluster} to change its "
                                             f"persistent store's state: {exc}") from None
            if written is not None:
                log.warning("cluster %s: %s by an operator at member %s", self.cluster, action.value, member.member)
                self._set(written, written.revision)
                return self.view()
        raise PersistenceUnavailable(f"the persistent store's state of cluster {self.cluster} kept changing while it "
                                     f"was written ({CHANGE_ATTEMPTS} attempts); try again")

    async def read(self, cluster: str) -> StoreView:
        """The store as the cluster's etcd says now (`GetPersistentStore`; "" names this member's
        cluster). UnknownCluster for another cluster; NotLeaderError at a member that knows another
        leader (the leader's answer names every member that cannot store); PersistenceUnavailable
        when etcd does not answer."""
        member = self._member
        if cluster and cluster != self.cluster:
            raise UnknownCluster(f"member {member.member} is of cluster {self.cluster!r}, not {cluster!r}")
        leader = member.leader
        if not member.is_leader_role() and leader is not None and leader.member != member.member:
            raise NotLeaderError(f"member {member.member} does not lead cluster {self.cluster}; {leader.member} does "
                                 f"and knows which members can store", leader.member, leader.address)
        try:
            record, read_at = await read_record_at(self._etcd, self.cluster)
        except Exception as exc:  # noqa: BLE001
            raise PersistenceUnavailable(f"cannot read the persistent store's state of cluster {self.cluster} "
                                         f"from etcd: {exc}") from None
        self._set(record, read_at)
        return self.view()
