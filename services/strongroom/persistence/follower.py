"""The follower side of replication: what a member answers to the leader and to a recovering one.

- `handle_promise`: a new leader asks for a promise of its epoch (and learns how far our log goes).
- `handle_append`: entries from the leader of the promised epoch, after the consistency check
  (we must hold `prev_index` with `prev_epoch`); the leader's commit index comes with them.
- `handle_fetch`: a recovering leader reads our log (or our snapshot, past our compaction).
- `handle_snapshot`: the leader replaces our state by its snapshot.

Fencing is here: a call of an epoch older than the one promised is refused, a newer one is
promised (durably) before anything else, and a member that leads an older epoch steps down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Protocol

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import StaleEpochError, StrongroomError
from strongroom.persistence.election import LeaderInfo
from strongroom.persistence.membership import Membership
from strongroom.persistence.replica import Replica
from strongroom.persistence.snapshot_source import peer_snapshot
from strongroom.persistence.snapshots import IncomingSnapshot, snapshot_chunks
from strongroom.persistence.term import LeaderTerm
from strongroom.tracing import traced

__all__ = ["Follower", "Member"]

log = logging.getLogger("strongroom.follower")


class Member(Protocol):
    """What the follower side needs of its member (`PersistenceNode`)."""

    term: LeaderTerm | None
    leader: LeaderInfo | None

    async def step_down(self, reason: str, err: Exception | None = None) -> None: ...


class Follower:
    """Answers the leader's replication calls."""

    def __init__(self, replica: Replica, membership: Membership, member: Member) -> None:
        self.replica = replica
        self.membership = membership
        self.member = member
        self._apply_soon = False  # an apply of newly committed entries is scheduled
        self.last_heard = time.monotonic()
        """When a leader's append (entries or a commit notice) was last accepted (monotonic; the
        start until then): how current this member's commit index is."""

    async def _accept_epoch(self, epoch: int, leader: str) -> bool:
        replica = self.replica
        if epoch < replica.promised_epoch:
            return False
        if epoch == replica.promised_epoch and replica.promised_to and leader != replica.promised_to:
            # Two members claim one epoch: etcd issued it twice (it went back, e.g. restarted
            # without its data). The first keeps it; the other's election raises the epoch base.
            log.warning("refused %s: epoch %d was promised to %s", leader, epoch, replica.promised_to)
            return False
        replica.promise(epoch, leader)
        term = self.member.term
        if term is not None and epoch > term.epoch:
            await self.member.step_down(f"member {leader} leads with epoch {epoch}")
        return True

    def _refusal(self, conflict_index: int | None = None, needs_snapshot: bool = False) -> rpb.AppendResponse:
        replica = self.replica
        resp = rpb.AppendResponse(ok=False, promised_epoch=replica.promised_epoch, last_index=replica.log.last_index,
                                  needs_snapshot=needs_snapshot)
        if conflict_index is not None:
            resp.conflict_index = conflict_index
        return resp

    async def handle_promise(self, req: rpb.PromiseRequest) -> rpb.PromiseResponse:
        """A new leader asks for our promise."""
        ok = await self._accept_epoch(req.epoch, req.leader)
        replica = self.replica
        return rpb.PromiseResponse(ok=ok, promised_epoch=replica.promised_epoch, last_index=replica.log.last_index,
                                   last_epoch=replica.log.last_epoch, commit_index=replica.commit_index,
                                   synced=replica.synced, member=self.membership.member)

    @traced("fappend")
    async def handle_append(self, req: rpb.AppendRequest | rpb.AppendRequestRaw,
                            entries: list[rpb.LogEntry] | None = None,
                            raws: list[bytes] | None = None) -> rpb.AppendResponse:
        """Entries from the leader of the promised epoch (`entries`, and their serialised form
        `raws`, when the request carries them serialised)."""
        if entries is None:
            assert isinstance(req, rpb.AppendRequest)
            entries = list(req.entries)
        async with self.replica.changing:
            try:
                answer = await self._append(req, entries, raws)
            except StrongroomError:
                raise
            except Exception as exc:  # noqa: BLE001 - a storage write failed: say so, store nothing
                self.replica.health.failed(exc)
                answer = self._refusal(conflict_index=self.replica.log.last_index)
            answer.cannot_store = self.replica.health.reason
            return answer

    async def _append(self, req: rpb.AppendRequest | rpb.AppendRequestRaw, entries: list[rpb.LogEntry],
                      raws: list[bytes] | None) -> rpb.AppendResponse:
        replica = self.replica
        if not await self._accept_epoch(req.epoch, req.leader):
            return self._refusal()
        term = self.member.term
        if term is not None and req.epoch == term.epoch:
            return self._refusal()
        leader = self.member.leader
        if leader is None or leader.epoch != req.epoch:
            address = self.membership.address_of(req.leader) or ""
            self.member.leader = LeaderInfo(req.leader, address, req.epoch)
        lg = replica.log
        if req.prev_index > lg.last_index:
            return self._refusal(conflict_index=lg.last_index)
        if entries and not replica.stored:
            try:
                await replica.mark_stored()
            except Exception as exc:  # noqa: BLE001 - cannot record it: do not acknowledge
                log.warning("cannot record stored state in etcd: %s", exc)
                return self._refusal(conflict_index=lg.last_index)
        matched = req.prev_index + len(entries)
        new_commit = min(req.commit_index, matched)
        outcome = lg.append_from_leader(req.prev_index, req.prev_epoch, entries,
                                        commit_index=max(new_commit, replica.commit_index), raws=raws)
        if not outcome.ok:
            return self._refusal(conflict_index=outcome.conflict_index, needs_snapshot=outcome.needs_snapshot)
        if new_commit > replica.commit_index:
            replica.commit_index = new_commit
            # Applied right after this answer is written, not before: the leader waits
            # for the answer, nobody waits for a follower's apply.
            if not self._apply_soon:
                self._apply_soon = True
                asyncio.get_running_loop().call_soon(self._apply_deferred)
        if req.events_published and replica.events is not None:
            # The leader published the store events up to there: ours are no longer needed.
            replica.events.trim(min(req.events_published, replica.state.applied_index))
        if not replica.synced and req.commit_index <= matched:
            # We hold everything the leader has committed: count toward majorities again.
            replica.set_synced(True)
            log.info("caught up to the leader's commit index %d; synced", req.commit_index)
        self.last_heard = time.monotonic()
        return rpb.AppendResponse(ok=True, promised_epoch=replica.promised_epoch, last_index=lg.last_index)

    def _apply_deferred(self) -> None:
        self._apply_soon = False
        self.replica.apply_committed()

    async def handle_fetch(self, req: rpb.FetchRequest) -> rpb.FetchResponse:
        """A recovering leader reads our log."""
        replica = self.replica
        if req.epoch < replica.promised_epoch:
            raise StaleEpochError(f"epoch {req.epoch} is older than promised {replica.promised_epoch}")
        resp = rpb.FetchResponse(last_index=replica.log.last_index)
        start = req.from_index
        if start <= replica.log.snapshot_index:
            # Our applied state is at a known index and covers the compacted prefix.
            if req.streamed_snapshot:  # FetchSnapshot sends the latest restore point (or the state)
                resp.snapshot_streamed = True
                resp.snapshot_index = replica.log.snapshot_index
                resp.snapshot_epoch = replica.log.snapshot_epoch
                return resp
            index, epoch, parts = replica.snapshot()  # a caller of an earlier version: in one message
            resp.snapshot = b"".join(parts)
            resp.snapshot_index = index
            resp.snapshot_epoch = epoch
            start = index + 1
        if req.raw:
            resp.raw_entries.extend(replica.log.raw_slice(start, req.max_entries or 512))
        else:
            resp.entries.extend(replica.log.slice(start, req.max_entries or 512))
        return resp

    async def handle_fetch_snapshot(self, req: rpb.FetchSnapshotRequest) -> AsyncIterator[rpb.SnapshotChunk]:
        """A recovering leader reads our state, as a snapshot's parts."""
        replica = self.replica
        if req.epoch < replica.promised_epoch:
            raise StaleEpochError(f"epoch {req.epoch} is older than promised {replica.promised_epoch}")
        index, epoch, parts, _ = peer_snapshot(replica)
        async for chunk in snapshot_chunks(parts, replica.promised_epoch, self.membership.member, index, epoch):
            yield chunk

    async def handle_snapshot(self, chunks: AsyncIterator[rpb.SnapshotChunk]) -> rpb.InstallSnapshotResponse:
        """Replace our state by the leader's snapshot: its chunks go to a file as they come
        (our state stays as it is until the last one), then it is installed a part at a time."""
        replica = self.replica
        first: rpb.SnapshotChunk | None = None
        incoming = replica.incoming_snapshot()
        try:
            async for chunk in chunks:
                if first is None:
                    first = chunk
                    if not await self._accept_epoch(chunk.epoch, chunk.leader):
                        return rpb.InstallSnapshotResponse(ok=False, promised_epoch=replica.promised_epoch)
                incoming.add(chunk)
            incoming.complete()
            if first is None:
                return rpb.InstallSnapshotResponse(ok=False, promised_epoch=replica.promised_epoch)
            return await self._install(first, incoming)
        finally:
            incoming.discard()

    async def _install(self, first: rpb.SnapshotChunk, incoming: IncomingSnapshot) -> rpb.InstallSnapshotResponse:
        replica = self.replica
        async with self.replica.changing:
            if first.epoch < replica.promised_epoch:
                return rpb.InstallSnapshotResponse(ok=False, promised_epoch=replica.promised_epoch)
            try:
                await replica.mark_stored()
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot record stored state in etcd: %s", exc)
                return rpb.InstallSnapshotResponse(ok=False, promised_epoch=replica.promised_epoch)
            await replica.install_stepwise(first.last_index, first.last_epoch, incoming)
            replica.tallies.snapshots_installed += 1
            log.info("installed snapshot at index %d from %s (%d parts, %d bytes)", first.last_index, first.leader,
                     len(incoming), incoming.size)
            return rpb.InstallSnapshotResponse(ok=True, promised_epoch=replica.promised_epoch,
                                               last_index=replica.log.last_index)
