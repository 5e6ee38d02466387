"""How a newly elected member becomes a leader that can serve: promises, then the best log.

A new leader reads the cluster's voters from etcd (`configuration.py`; a member that is not one
does not lead), collects promises of its epoch from a majority of *synced* voters (members that
hold everything a leader committed; members being added promise too, but do not count), adopts the most advanced log among them (fetching the
entries it lacks, or that member's snapshot if it compacted them) and drops what it holds beyond
that log (entries of older epochs that never committed). Its term then appends a no-op in its
own epoch and serves once that no-op commits.

If every member answers and none holds state (a `memory` cluster restarted whole), the cluster
starts empty; a disk cluster does not (every member lost what it had acknowledged: a damaged
store moved aside, wiped disks), except a DR standby set, which the DR service then fills. A
recovery that finds no synced majority within 2 x TTL gives up, so another
member can try.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import NoQuorumError, NotVoterError, PersistenceUnavailable, StaleEpochError
from strongroom.persistence.configuration import majority
from strongroom.persistence.membership import Membership
from strongroom.persistence.replica import Replica
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import StorageMode

__all__ = ["PeerCalls", "Recovery", "most_advanced"]


def most_advanced(answered: list[rpb.PromiseResponse], voters: tuple[str, ...],
                  also: tuple[str, ...] = ()) -> rpb.PromiseResponse | None:
    """The most advanced log among the synced members that promised, once they are a majority of
    `voters` and (with no voters record) of `also` too; None until they are. Every member counted
    is a candidate, those of `also` the realm no longer lists included: a majority of `also` meets
    every majority that committed before the realm changed, and the member where they meet may
    be one of them."""
    synced = [r for r in answered if r.synced and (r.member in voters or r.member in also)]
    if sum(r.member in voters for r in synced) < majority(len(voters)):
        return None
    if also and sum(r.member in also for r in synced) < majority(len(also)):
        return None
    return max(synced, key=lambda r: (r.last_epoch, r.last_index))

log = logging.getLogger("strongroom.recovery")

FETCH_BATCH = 512


class PeerCalls(Protocol):
    """The calls recovery makes to peers (`transport.PeerClient`)."""

    async def promise(self, address: str, epoch: int, leader: str) -> rpb.PromiseResponse | None: ...

    async def fetch(self, address: str, epoch: int, from_index: int, max_entries: int) -> rpb.FetchResponse: ...

    async def close(self) -> None: ...


class Recovery:
    """Brings a new term's log up to the most advanced log of a majority."""

    def __init__(self, replica: Replica, membership: Membership, peers: PeerCalls, lease: Callable[[], int],
                 site_is_standby: Callable[[], bool] = lambda: False) -> None:
        self.replica = replica
        self.membership = membership
        self.peers = peers
        self.lease = lease
        self.site_is_standby = site_is_standby

    def may_start_empty(self) -> bool:
        """Whether a cluster none of whose members holds state may start empty: a memory cluster
        (it keeps nothing by design) and a DR standby set (the DR service ships it a full copy)
        may; a disk cluster may not: it would lose what it confirmed."""
        return (self.replica.storage_mode == StorageMode.MEMORY or self.site_is_standby()
                or self.membership.cluster.is_standby_member(self.replica.member))

    async def recover(self, term: LeaderTerm) -> None:
        """Gather promises and adopt the best log (raises if that is not possible now)."""
        best = await self.gather_promises(term)
        if best is not None:
            await self.adopt_log(term, best)
        await self.replica.mark_stored()

    async def gather_promises(self, term: LeaderTerm) -> tuple[str, rpb.PromiseResponse] | None:
        """Promises from a majority of synced members; returns the most advanced peer if it is
        ahead of us (None if we are the most advanced)."""
        replica = self.replica
        epoch = term.epoch
        mine = rpb.PromiseResponse(ok=True, promised_epoch=epoch, last_index=replica.log.last_index,
                                   last_epoch=replica.log.last_epoch, commit_index=replica.commit_index,
                                   synced=replica.synced, member=term.member)
        delay = 0.05
        waits = 0
        membership = self.membership
        cluster = membership.cluster
        # The voters as etcd holds them now: read after this member was elected, so the last
        # change an earlier leader made is in it, and no earlier leader can make another.
        record = await membership.load_voters()
        if record.also:
            # Written down before this term sends an entry: members it catches up store entries
            # too, and must not be taken for members with state by the next recovery.
            frozen = await membership.freeze_holders(epoch, self.lease())
            if frozen is None:
                raise PersistenceUnavailable(f"the voters record of cluster {cluster.name} moved on, or the "
                                             f"leader key is no longer held, during recovery for epoch {epoch}")
            record = frozen
        voters = record.voters
        # With no record written yet, the members that hold state count beside the realm's
        # list: in this recovery and in every commit of the term until the record is written
        # (`VoterRecord.also`, `Reconfiguration.run`).
        term.joint = record.also or None
        if term.member not in voters:
            raise NotVoterError(f"member {term.member} is not a voter of cluster {cluster.name} "
                                f"(voters: {', '.join(voters)}): it may not lead")
        give_up = time.monotonic() + 2 * cluster.lease_ttl_seconds
        while True:
            if not term.alive():
                raise PersistenceUnavailable("deposed during recovery")
            if time.monotonic() > give_up:
                raise NoQuorumError(f"no majority of synced members answered epoch {epoch}")
            replies = await asyncio.gather(*(self._ask(peer, term) for peer in self.membership.peers()))
            answered = [mine] + [r for r in replies if r is not None and r.ok]
            for r in replies:
                if r is not None and not r.ok and r.promised_epoch >= epoch:
                    # Promised to a newer leader, or this epoch to another member (etcd issued
                    # it twice): the promise is ours too, so our next election goes above it.
                    replica.promise(r.promised_epoch)
                    raise StaleEpochError(f"{r.member} promised epoch {r.promised_epoch}")
            synced = [r for r in answered if r.synced and r.member in voters]
            best = most_advanced(answered, voters, record.also)
            if best is not None:
                if (best.last_epoch, best.last_index) > (replica.log.last_epoch, replica.log.last_index):
                    return best.member, best
                return None
            if {r.member for r in answered} >= set(voters) and not synced:
                # Every member lost its state (a memory cluster restarted whole): there is
                # nothing left to recover; start over from the empty state.
                if not self.may_start_empty():
                    raise NoQuorumError(
                        f"every member of cluster {cluster.name} lost the state it had acknowledged (a damaged "
                        f"store moved aside, a wiped disk): the cluster does not start empty on its own, which "
                        f"would lose what it confirmed (docs/store-operations.md, \"A damaged store\")")
                log.warning("no member holds state; cluster %s starts empty", cluster.name)
                return None
            waits += 1
            if waits % 20 == 1:
                log.info("epoch %d: waiting for promises from a majority of synced members "
                         "(answered: %s; synced: %s; voters: %s%s)", epoch, [r.member for r in answered],
                         [r.member for r in synced], list(voters),
                         f"; with no voters record, a majority of {list(record.also)} too" if record.also else "")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _ask(self, peer: str, term: LeaderTerm) -> rpb.PromiseResponse | None:
        address = self.membership.address_of(peer)
        if address is None:
            return None
        return await self.peers.promise(address, term.epoch, term.member)

    async def adopt_log(self, term: LeaderTerm, best: tuple[str, rpb.PromiseResponse]) -> None:
        """Fetch the entries the most advanced member has beyond our committed prefix."""
        replica = self.replica
        lg = replica.log
        name, resp = best
        address = self.membership.address_of(name)
        if address is None:
            raise PersistenceUnavailable(f"no address for {name}")
        log.info("adopting log of %s (last %d/%d) from index %d", name, resp.last_epoch, resp.last_index,
                 replica.commit_index + 1)
        next_index = replica.commit_index + 1
        while next_index <= resp.last_index:
            fetched = await self.peers.fetch(address, term.epoch, next_index, FETCH_BATCH)
            if fetched.snapshot_streamed:
                # Compacted there: its state, as a snapshot's parts, then its entries after it.
                incoming = replica.incoming_snapshot()
                try:
                    first = await self.peers.fetch_snapshot(address, term.epoch, incoming)
                    # Off the event loop where it can be (the lease keeps being renewed
                    # meanwhile); a newer leader's appends wait for it, and one that promised
                    # meanwhile has ended this term (its step-down cancels the install).
                    async with replica.changing:
                        if replica.promised_epoch > term.epoch:
                            raise PersistenceUnavailable(f"member {replica.promised_to} leads a newer epoch "
                                                         f"({replica.promised_epoch})")
                        await replica.install_stepwise(first.last_index, first.last_epoch, incoming)
                    replica.tallies.snapshots_installed += 1
                finally:
                    incoming.discard()
                log.info("installed the state of %s at index %d (%d parts, %d bytes)", name, first.last_index,
                         len(incoming), incoming.size)
                next_index = first.last_index + 1
                continue
            if fetched.snapshot:  # a member of an earlier version: its state in one message
                replica.install(fetched.snapshot_index, fetched.snapshot_epoch, [fetched.snapshot])
                next_index = fetched.snapshot_index + 1
            # Stored as the member stores them (a member of an earlier version sends parsed
            # entries: those are serialised again here).
            raws = list(fetched.raw_entries) or None
            entries = [rpb.LogEntry.FromString(raw) for raw in raws] if raws else list(fetched.entries)
            if not entries:
                break
            # Our committed prefix matches theirs; the first entry that differs truncates
            # our (uncommitted) suffix.
            outcome = lg.append_from_leader(next_index - 1, lg.epoch_at(next_index - 1) or 0, entries, raws=raws)
            if not outcome.ok:
                raise PersistenceUnavailable("adopted log does not match our committed prefix")
            next_index = entries[-1].index + 1
        # Entries of ours beyond the adopted log's end are from older epochs: drop them.
        lg.truncate_after(resp.last_index)
