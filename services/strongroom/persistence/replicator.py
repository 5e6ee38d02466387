"""Leader side of replication: one task per follower sending what it is missing.

Each round of the leader's group commit becomes one append per follower carrying every entry
the follower lacks (normally just the new one), written on one long-lived connection per
follower (`transport.FollowerConnection`: the follower's replication link when it registered
one, else its gRPC `AppendStream`). A follower whose log has fallen behind the leader's
compacted prefix gets the state machine snapshot first, then the log suffix.

A new commit index alone does not make a round of its own at once: the next append carries it,
and if none comes within COMMIT_NOTICE_SECONDS an empty append does. One append per follower per
confirmed publish instead of two; a follower applies committed entries a few milliseconds later,
which nothing waits for (clients talk to the leader, and a new leader recovers the log anyway).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Protocol

from strongroom.aio import cancel_and_wait
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.limits import APPEND_BATCH_BYTES
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.snapshot_source import PeerSnapshot
from strongroom.persistence.snapshots import snapshot_chunks
from strongroom.persistence.transport import FollowerConnection, PeerUnreachable

__all__ = ["HEARTBEAT_SECONDS", "PeerReplicator", "Replicating"]

log = logging.getLogger("strongroom.replicator")

MAX_ENTRIES_PER_APPEND = 256
HEARTBEAT_SECONDS = 0.25
SNAPSHOT_TIMEOUT = 5.0
COMMIT_NOTICE_SECONDS = 0.005


class Leader(Protocol):
    """What a replicator needs of the term it replicates for (`LeaderTerm`)."""

    epoch: int
    member: str

    @property
    def log(self) -> ReplicatedLog: ...

    @property
    def commit_index(self) -> int: ...

    @property
    def events_published(self) -> int: ...

    def alive(self) -> bool: ...

    def on_match(self, peer: str) -> None: ...

    def observe_higher_epoch(self, epoch: int, reason: str) -> None: ...

    def snapshot_for_peer(self) -> PeerSnapshot: ...


class Replicating(Protocol):
    """A follower's replicator, as the term drives it (`PeerReplicator`)."""

    match_index: int
    reachable: bool
    last_ack: float
    cannot_store: str
    cannot_store_since: float

    def start(self) -> None: ...

    def kick(self) -> None: ...

    def commit_advanced(self) -> None: ...

    async def stop(self) -> None: ...


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class PeerReplicator:
    """Keeps one follower's log up to date with the leader's for one term."""

    def __init__(self, leader: Leader, connection: FollowerConnection) -> None:
        self.leader = leader
        self.connection = connection
        self.peer = connection.peer
        self.epoch = leader.epoch
        self.next_index = leader.log.last_index + 1
        self.match_index = 0
        self.reachable = False
        # Monotonic time of the last answer from the peer (the leader's quorum watchdog).
        self.last_ack = 0.0
        self.cannot_store = ""
        """Why the peer cannot write its storage, as its last append answer said ("": it can)."""
        self.cannot_store_since = 0.0
        """Unix seconds since its answers say so (0 while they do not)."""
        self._kicked = False
        self._waiter: asyncio.Future[None] | None = None
        self._commit_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._warned_address = False

    def start(self) -> None:
        """Start the replication task."""
        self._task = asyncio.create_task(self._run(), name=f"replicate-{self.peer}")

    def kick(self) -> None:
        """New entries: send now."""
        self._kicked = True
        if self._waiter is not None:
            _wake(self._waiter)

    def commit_advanced(self) -> None:
        """A new commit index: the next append carries it; send one for it alone if no append
        goes within COMMIT_NOTICE_SECONDS."""
        if self._commit_timer is None:
            self._commit_timer = asyncio.get_running_loop().call_later(COMMIT_NOTICE_SECONDS, self._commit_notice)

    def _commit_notice(self) -> None:
        self._commit_timer = None
        self.kick()

    async def _idle(self, timeout: float) -> None:
        """Wait for a kick, at most `timeout` seconds (a heartbeat is due then)."""
        if not self._kicked:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        self._kicked = False

    async def stop(self) -> None:
        """Stop the task and close the connection."""
        if self._commit_timer is not None:
            self._commit_timer.cancel()
            self._commit_timer = None
        if self._task is not None:
            await cancel_and_wait(self._task)
        await self.connection.close()

    async def _run(self) -> None:
        backoff = 0.05
        conn = self.connection
        while True:
            if not conn.connect():
                if not self._warned_address:
                    log.info("no address known yet for peer %s", self.peer)
                    self._warned_address = True
                self.reachable = False
                await asyncio.sleep(0.2)
                continue
            try:
                progressed = await self._send_once()
                if not self.reachable:
                    log.info("peer %s reachable at %s (next index %d)", self.peer, conn.address, self.next_index)
                self.reachable = True
                backoff = 0.05
            except Exception as exc:  # noqa: BLE001 - every failure: reconnect and retry
                if not isinstance(exc, PeerUnreachable):
                    # Never let this follower's replication end silently.
                    log.exception("replicating to %s failed; starting over", self.peer)
                elif self.reachable:
                    log.info("peer %s unreachable: %s", self.peer, exc)
                self.reachable = False
                # Re-resolve: the peer may have restarted on another address.
                conn.reset()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            if progressed and self.match_index < self.leader.log.last_index:
                continue
            await self._idle(HEARTBEAT_SECONDS)

    async def _send_once(self) -> bool:
        leader = self.leader
        if leader.epoch != self.epoch or not leader.alive():
            await asyncio.sleep(0.1)
            return False
        lg = leader.log
        if self.next_index <= lg.snapshot_index:
            await self._send_snapshot()
            return True
        prev_index = self.next_index - 1
        prev_epoch = lg.epoch_at(prev_index)
        if prev_epoch is None:
            self.next_index = lg.last_index + 1
            return False
        raws = lg.raw_slice(self.next_index, MAX_ENTRIES_PER_APPEND, APPEND_BATCH_BYTES)
        if self._commit_timer is not None:
            # This append carries the commit index.
            self._commit_timer.cancel()
            self._commit_timer = None
        resp = await self.connection.append(self.epoch, leader.member, prev_index, prev_epoch, leader.commit_index,
                                            raws, leader.events_published)
        self.last_ack = time.monotonic()
        if resp.cannot_store != self.cannot_store:
            self.cannot_store, self.cannot_store_since = resp.cannot_store, time.time() if resp.cannot_store else 0.0
            log.warning("peer %s %s", self.peer, resp.cannot_store or "can write its storage again")
        if resp.promised_epoch > self.epoch:
            leader.observe_higher_epoch(resp.promised_epoch, f"peer {self.peer} promised a newer epoch")
            return False
        if not resp.ok and resp.cannot_store:
            return False  # nothing stored: sent again at the next heartbeat
        if resp.ok:
            sent_last = prev_index + len(raws)
            if sent_last > self.match_index:
                self.match_index = sent_last
                leader.on_match(self.peer)
            self.next_index = sent_last + 1
            return bool(raws)
        if resp.needs_snapshot:
            self.next_index = lg.snapshot_index
            return True
        # Consistency check failed: back up to just after what the follower can match.
        leader.log.tallies.backtracks[self.peer] += 1
        self.next_index = max(1, min(resp.conflict_index + 1, self.next_index - 1))
        return True

    async def _send_snapshot(self) -> None:
        leader = self.leader
        index, epoch, parts, size = leader.snapshot_for_peer()
        log.info("sending snapshot at index %d (about %d bytes) to %s", index, size, self.peer)
        chunks = snapshot_chunks(parts, self.epoch, leader.member, index, epoch)
        resp = await self.connection.install_snapshot(chunks, timeout=max(SNAPSHOT_TIMEOUT, size / 20e6 + 30))
        self.last_ack = time.monotonic()
        if resp.promised_epoch > self.epoch:
            leader.observe_higher_epoch(resp.promised_epoch, f"peer {self.peer} promised a newer epoch")
            return
        if resp.ok:
            leader.log.tallies.snapshots_sent[self.peer] += 1
            self.next_index = index + 1
            if index > self.match_index:
                self.match_index = index
                leader.on_match(self.peer)
