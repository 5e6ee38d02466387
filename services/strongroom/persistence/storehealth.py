"""Whether a member can write its own storage, and what the leader does when members cannot.

A member whose storage write fails (disk full, a RocksDB write error, files gone) says so
(`StorageHealth.failed`): in its status, and to the leader in every append answer
(`AppendResponse.cannot_store`). It probes its storage (`Storage.probe`: a synced write larger
than a page) every PROBE_SECONDS while it cannot store, and every IDLE_PROBE_SECONDS otherwise
(an idle member writes nothing else), and counts as able to store again only once a probe
succeeds: a small write may still fit in a page the write-ahead log holds on a full disk.

The leader decides with `by_disk` (pure): when fewer than a majority of the members (itself
included) can store and one of them said it cannot, the persistent store is unavailable (cause
`disk`), enforced at once as an operator's disconnect is (docs/store-operations.md); once a
majority can store again, the store takes no new units of work (cause `disk`) until an operator
allows them, as a store connected again does. A leader that cannot store itself while a majority
of the others can hands its leadership over to them instead (`hand_over_to_others`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.storage import Storage
from strongroom.persistence.storestate import StoreCause, StoreRecord, StoreState

__all__ = ["IDLE_PROBE_SECONDS", "PROBE_SECONDS", "MemberStorage", "StorageHealth", "by_disk",
           "hand_over_to_others"]

log = logging.getLogger("strongroom.storehealth")

PROBE_SECONDS = 0.5
"""How often a member that cannot store probes its storage."""
IDLE_PROBE_SECONDS = 2.0
"""How often a member that can store probes it (it finds a disk that filled while it was idle)."""


class StorageHealth:
    """Whether this member can write its storage now (see the module's docstring)."""

    def __init__(self, storage: Storage, member: str) -> None:
        self._storage = storage
        self.member = member
        self.reason = ""
        """Why this member cannot write its storage ("": it can)."""
        self.since = 0.0
        """Unix seconds since it cannot ("": 0)."""
        self.on_change: Callable[[], None] | None = None
        """Called when it starts or stops being able to store (the leader decides again)."""

    @property
    def usable(self) -> bool:
        """This member can write its storage (as far as its last write or probe says)."""
        return not self.reason

    def failed(self, exc: BaseException | str) -> None:
        """A write of this member's storage failed with `exc`: it cannot store from now on,
        until a probe succeeds."""
        if self.reason:
            return
        reason = f"cannot write its storage: {exc}" if isinstance(exc, str) else \
            f"cannot write its storage: {type(exc).__name__}: {exc}"
        self.reason, self.since = reason, time.time()
        log.error("member %s %s; commands that need persistence are refused while a majority cannot store "
                  "(it probes its storage every %.1fs)", self.member, reason, PROBE_SECONDS)
        self._changed()

    def probe(self) -> bool:
        """Probe the storage now: whether it can be written (and the state updated)."""
        try:
            self._storage.probe()
        except Exception as exc:  # noqa: BLE001 - any write error: the storage is unusable
            self.failed(exc)
            return False
        if self.reason:
            log.warning("member %s can write its storage again (it could not since %s: %s)", self.member,
                        time.strftime("%H:%M:%S", time.localtime(self.since)), self.reason)
            self.reason, self.since = "", 0.0
            self._changed()
        return True

    async def store_unstored(self, lg: ReplicatedLog, alive: Callable[[], bool]) -> None:
        """A leader whose log write failed: write the entry it kept unstored again every
        PROBE_SECONDS, while `alive`, until the write succeeds."""
        while alive() and lg.unstored:
            await asyncio.sleep(PROBE_SECONDS)
            try:
                lg.store_last(keep=True)
            except Exception as exc:  # noqa: BLE001 - still failing
                self.failed(exc)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def run(self) -> None:
        """Probe the storage for the life of the member (until cancelled)."""
        if not self._storage.durable:
            return
        while True:
            await asyncio.sleep(PROBE_SECONDS if self.reason else IDLE_PROBE_SECONDS)
            self.probe()


@dataclass(frozen=True)
class MemberStorage:
    """One member's storage as the leader last heard of it."""

    member: str
    cannot_store: str = ""
    """Why it cannot write its storage ("": it can, or said nothing)."""
    reachable: bool = True
    """The leader's replication to it works (the leader itself: True)."""

    @property
    def can_store(self) -> bool:
        return self.reachable and not self.cannot_store


def _names(members: list[MemberStorage]) -> str:
    return ", ".join(f"{m.member} ({m.cannot_store})" if m.cannot_store else f"{m.member} (unreachable)"
                     for m in members)


def by_disk(record: StoreRecord, members: list[MemberStorage], majority: int, leader: str,
            now: float | None = None) -> StoreRecord | None:
    """The record the members' storage calls for, or None when the state stays as it is:

    - the members that said they cannot store leave fewer than `majority` (unreachable members
      are not counted against: whether they store is not known, and unreachable ones are the
      quorum watchdog's, which steps the leader aside), while the store is not unavailable
      already: unavailable, cause `disk`;
    - unavailable for that cause (by this leader or an earlier one) and a majority can store
      again, the leader among them: no new units of work, cause `disk`.

    An operator's disconnect is never lifted here, and a store an operator connected or a
    capacity state is left alone while a majority can store."""
    stamp = time.time() if now is None else now
    unusable = [m for m in members if not m.can_store]
    usable = len(members) - len(unusable)
    said = [m for m in unusable if m.cannot_store]
    if len(members) - len(said) < majority and record.state is not StoreState.UNAVAILABLE:
        return StoreRecord(StoreState.UNAVAILABLE, stamp,
                           f"storage unusable on {_names(unusable)}: {usable} of {len(members)} members can store, "
                           f"{majority} needed", StoreCause.DISK, leader, record.revision)
    me = next((m for m in members if m.member == leader), None)
    if record.state is StoreState.UNAVAILABLE and record.cause is StoreCause.DISK and usable >= majority \
            and me is not None and me.can_store:
        return StoreRecord(StoreState.NO_NEW_UOW, stamp,
                           f"storage usable again on {usable} of {len(members)} members: taking no new units of "
                           f"work until an operator allows them", StoreCause.DISK, leader, record.revision)
    return None


def hand_over_to_others(members: list[MemberStorage], majority: int, leader: str) -> bool:
    """A leader that cannot store itself hands its leadership over when the others that did not
    say they cannot store form a majority without it (an unreachable one may well store: a
    member slow to answer under load must not keep a leader that cannot write): they elect a
    leader whose store works, and persistent work goes on there (this leader's non-replicated
    stores go with it, as at any leader change). With fewer, it stays: no other member could
    commit either, and it keeps serving what needs no persistence."""
    return sum(1 for m in members if m.member != leader and not m.cannot_store) >= majority
