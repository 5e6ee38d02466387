"""`CommittedReader`: follows a cluster's committed-entry stream across its members.

The DR service reads the primary's log with it (docs/dr.md). It opens
`ReplicationService.StreamCommitted` at one of the cluster's addresses from the index after the
last entry it handed on; when that member goes away (the stream fails, ends, or stays silent for
three heartbeats: a member cut off without a closed connection) or is stale (it says it has not
heard from a leader for `stale_after` seconds: a follower cut off from its leader, whose commit
index no longer moves), it opens the stream at the next address after the same index. Entries
are identical at every member that holds them, so the batches it yields continue exactly where
they stopped: no index is skipped and none comes twice (a snapshot, when the index wanted was
compacted at the member, replaces everything before it). Waits between attempts follow the
client's one retry policy (`RetryPolicy`), and it never gives up unless told a non-retriable
error.

The member read first is picked at random. The reader stays with a member until it fails, so
always starting at the first address would put the stream's load on that one member, in a set
started in order usually the leader (the busiest member); at random, a follower serves it two
times out of three in a set of three.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Sequence

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.client.retry import RetryPolicy
from strongroom.dr.transport import CommittedStream
from strongroom.errors import ConnectionFailed, DataCorruption, StrongroomError
from strongroom.persistence.committed import CommittedBatch

__all__ = ["FOLLOW", "SILENT_HEARTBEATS", "CommittedReader"]

log = logging.getLogger("strongroom.dr")

FOLLOW = RetryPolicy(timeout=math.inf, initial_delay=0.1, max_delay=2.0)
"""Waits between attempts while no member of the cluster can be read (never gives up)."""
SILENT_HEARTBEATS = 3
"""A stream with no message for this many heartbeats is taken as broken."""
STALE_SECONDS = 10.0
"""A member that has not heard from a leader for this long (it says so in every message) is
left for another: its commit index no longer moves (a follower cut off from its leader)."""


class _Stale(Exception):
    """The member being read has not heard from a leader for too long."""


class CommittedReader:
    """The committed log of the cluster at `addresses`, from `from_index` on, as batches."""

    def __init__(self, addresses: Sequence[str], from_index: int, heartbeat: float = 1.0, max_entries: int = 0,
                 policy: RetryPolicy = FOLLOW, stale_after: float = STALE_SECONDS, start: int | None = None) -> None:
        """`start`: the position in `addresses` of the member read first (default: one at random)."""
        if not addresses:
            raise ValueError("a reader needs at least one address")
        self.addresses = list(addresses)
        self.next_index = from_index
        """The index the next batch starts at (after a snapshot: the snapshot's index + 1)."""
        self.heartbeat = heartbeat
        self.max_entries = max_entries
        self.policy = policy
        self.stale_after = stale_after
        self.commit_index = 0
        """The highest commit index a member reported."""
        self.member = ""
        """The member being read."""
        self.reconnects = 0
        """How often the stream was opened again after a failure."""
        self.heard_at = 0.0
        """Monotonic time of the last message from a member (0: none yet)."""
        self.leader_silence = math.inf
        """How long the member last read had not heard from a leader, as it said."""
        self._at = random.randrange(len(self.addresses)) if start is None else start
        self._last_epoch = 0  # of the last entry yielded (0: none yet)

    @property
    def address(self) -> str:
        """The address read now (or tried next)."""
        return self.addresses[self._at % len(self.addresses)]

    def fresh(self) -> bool:
        """The cluster looks alive from here: a member spoke within the last few heartbeats and
        had heard from its leader recently."""
        return (self.heard_at > 0 and time.monotonic() - self.heard_at < SILENT_HEARTBEATS * self.heartbeat
                and self.leader_silence < self.stale_after)

    async def batches(self) -> AsyncIterator[CommittedBatch]:
        """Batches from `next_index` on, forever (heartbeats included: empty `entries`)."""
        outage = self.policy.outage(started=False)
        while True:
            address = self.address
            try:
                async for batch in self._read(address):
                    outage.progress()
                    yield batch
                err: StrongroomError = ConnectionFailed(f"{address} ended the committed-entry stream",
                                                        {"address": address})
            except DataCorruption:
                raise
            except StrongroomError as exc:
                if not exc.retriable:
                    raise
                err = exc
            except TimeoutError:
                err = ConnectionFailed(f"{address} sent nothing for {SILENT_HEARTBEATS} heartbeats",
                                       {"address": address})
            except _Stale as stale:
                err = ConnectionFailed(str(stale), {"address": address})
            outage.failed(address, err)
            log.info("committed-entry stream from %s lost at index %d: %s", address, self.next_index, err.message)
            self._at += 1
            self.reconnects += 1
            delay = outage.next_delay()
            await asyncio.sleep(delay if delay is not None else self.policy.max_delay)

    async def _read(self, address: str) -> AsyncIterator[CommittedBatch]:
        stream = CommittedStream(address, rpb.StreamCommittedRequest(
            from_index=self.next_index, heartbeat_ms=max(1, int(self.heartbeat * 1000)), max_entries=self.max_entries))
        try:
            while True:
                msg = await stream.read(SILENT_HEARTBEATS * self.heartbeat)
                if msg is None:
                    return
                self.heard_at = time.monotonic()
                self.leader_silence = msg.leader_silence_seconds
                if msg.leader_silence_seconds > self.stale_after:
                    raise _Stale(f"{msg.member} has not heard from a leader for {msg.leader_silence_seconds:.1f} s")
                yield self._accept(msg)
        finally:
            await stream.close()

    def _accept(self, msg: rpb.CommittedEntries) -> CommittedBatch:
        start = self.next_index
        if msg.snapshot_index:
            if msg.snapshot_index + 1 < start:
                raise DataCorruption(f"{msg.member} sent a snapshot at {msg.snapshot_index}, before index {start} "
                                     f"that was asked for")
            start = msg.snapshot_index + 1
        if msg.first_index != start:
            raise DataCorruption(f"{msg.member} sent entries from {msg.first_index}; index {start} was next")
        if not msg.snapshot_index and self._last_epoch and msg.prev_epoch != self._last_epoch:
            raise DataCorruption(f"{msg.member}'s entry {start - 1} is of epoch {msg.prev_epoch}, the one read before "
                                 f"of epoch {self._last_epoch}: the addresses are not all one cluster's members")
        if msg.entries:
            self._last_epoch = rpb.LogEntry.FromString(msg.entries[-1]).epoch
        elif msg.snapshot_index:
            self._last_epoch = msg.snapshot_epoch
        self.next_index = start + len(msg.entries)
        self.commit_index = max(self.commit_index, msg.commit_index)
        self.member = msg.member
        return CommittedBatch(msg.first_index, list(msg.entries), msg.commit_index, msg.snapshot, msg.snapshot_index,
                              msg.snapshot_epoch, msg.member, msg.prev_epoch, msg.leader_silence_seconds,
                              msg.applied_index, msg.stored_messages, msg.acked_messages)
