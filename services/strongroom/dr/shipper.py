"""`Shipper`: the DR service's work: the primary's committed log into the standby set.

It asks the standby set's leader where the standby's log ends (`ShipEntries` with nothing in
it), follows the primary's committed-entry stream from the index after (`CommittedReader`, any
primary member), and hands the entries to the standby leader (`ShipEntries`, through the
client's `Connection`: the leader found and followed as clients find it, the one retry policy;
`transport.py` holds the gRPC calls).

Pipelined: the stream is read ahead (`ReadAhead`, up to READ_AHEAD_BYTES / READ_AHEAD_ENTRIES)
while a `ShipEntries` call is in flight, and the batches read meanwhile travel as one request
(consecutive batches coalesced up to SHIP_MAX_BYTES / SHIP_MAX_ENTRIES; a snapshot alone). A
primary that commits one entry at a time streams one entry per message; shipped one call each,
a standby behind it catches up no faster than one round trip per entry.
A batch the standby does not take (its leader changed and the new one holds less, or the shipper
restarted) starts it over from the standby's last index, what was read ahead dropped: the
standby's log is the one truth of how far shipping got, so nothing is skipped and nothing
applied twice. A snapshot in the stream (the primary compacted what the standby lacks) replaces
the standby's state. The primary's heartbeats (its commit index and stored messages) reach the
standby leader on a request of their own when nothing is waiting to be shipped, else with the
entries.

Status, for `DrService` and `strongroom status`: the primary's commit index as the stream last
said, the standby's last index, entries behind, messages behind (the messages stored at the
primary through its applied index as the stream last said, against the standby's through its own:
`Lag`), and the seconds since the standby last held everything the primary had committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from strongroom.aio import cancel_and_wait, with_timeout
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.client.retry import RetryPolicy
from strongroom.dr.reader import FOLLOW, CommittedReader
from strongroom.dr.transport import StandbyCalls
from strongroom.errors import DataCorruption, LogDiverged, NoLeaderError, StrongroomError
from strongroom.persistence.committed import CommittedBatch, Lag

__all__ = ["READ_AHEAD_BYTES", "READ_AHEAD_ENTRIES", "SHIP_MAX_BYTES", "SHIP_MAX_ENTRIES", "ReadAhead",
           "ShipStatus", "Shipper"]

log = logging.getLogger("strongroom.dr")

SHIP_MAX_BYTES = 4 * 1024 * 1024
"""Entry bytes one ShipEntries carries at most (a single stream batch larger than this travels
alone: a batch of the stream is never split)."""
SHIP_MAX_ENTRIES = 4096
"""Entries one ShipEntries carries at most (likewise)."""
READ_AHEAD_BYTES = 2 * SHIP_MAX_BYTES
"""Bytes read from the primary and not shipped yet past which the reader waits: the next request
gathers while one is in flight."""
READ_AHEAD_ENTRIES = 2 * SHIP_MAX_ENTRIES
"""Entries read and not shipped yet past which the reader waits."""


def _size(batch: CommittedBatch) -> int:
    return sum(len(raw) for raw in batch.entries) + len(batch.snapshot)


def _heartbeat(batch: CommittedBatch) -> bool:
    return not batch.entries and not batch.snapshot


class ReadAhead:
    """The primary's batches read and not shipped yet (bounded), taken as requests: consecutive
    batches coalesced, a snapshot alone, a heartbeat only when nothing else waits."""

    def __init__(self, max_bytes: int = READ_AHEAD_BYTES, max_entries: int = READ_AHEAD_ENTRIES,
                 ship_bytes: int = SHIP_MAX_BYTES, ship_entries: int = SHIP_MAX_ENTRIES) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.ship_bytes, self.ship_entries = ship_bytes, ship_entries
        self._batches: deque[tuple[CommittedBatch, int]] = deque()  # with its size
        self._bytes = self._entries = 0
        self._beat = False
        self._failure: BaseException | None = None
        self._changed = asyncio.Condition()

    @property
    def entries(self) -> int:
        """Entries read and not taken yet."""
        return self._entries

    async def put(self, batch: CommittedBatch) -> None:
        """Hold `batch` (a heartbeat is only remembered); waits while the read-ahead is full."""
        async with self._changed:
            if _heartbeat(batch):
                self._beat = True
            else:
                await self._changed.wait_for(lambda: self._bytes < self.max_bytes and self._entries < self.max_entries)
                size = _size(batch)
                self._batches.append((batch, size))
                self._bytes += size
                self._entries += len(batch.entries)
            self._changed.notify_all()

    async def fail(self, err: BaseException) -> None:
        """The reader stopped with `err`: `take` raises it once what was read before is taken."""
        async with self._changed:
            self._failure = err
            self._changed.notify_all()

    async def take(self) -> CommittedBatch:
        """What the next ShipEntries carries: the batches held, from the oldest, coalesced while
        they are consecutive entries within the request's bounds (a snapshot batch alone); a
        heartbeat (no entries) when none is held and the stream sent one since the last request.
        Waits for either; raises what stopped the reader once nothing read before it is left."""
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._batches) or self._beat or self._failure is not None)
            self._beat = False  # a request with entries carries the primary's figures too
            if not self._batches:
                if self._failure is not None:
                    raise self._failure
                return CommittedBatch(0, [], 0)
            first, size = self._batches.popleft()
            taken, entries, last = size, list(first.entries), first
            while self._batches and not first.snapshot:
                nxt, more = self._batches[0]
                if (nxt.snapshot or nxt.first_index != first.first_index + len(entries)
                        or taken + more > self.ship_bytes or len(entries) + len(nxt.entries) > self.ship_entries):
                    break
                self._batches.popleft()
                entries.extend(nxt.entries)
                taken += more
                last = nxt
            self._bytes -= taken
            self._entries -= len(entries)
            self._changed.notify_all()
        if last is first:
            return first
        return replace(first, entries=entries, commit_index=last.commit_index, applied_index=last.applied_index,
                       stored_messages=last.stored_messages, acked_messages=last.acked_messages)


@dataclass(frozen=True)
class ShipStatus:
    """How far the standby is behind the primary."""

    primary_commit_index: int
    """The primary's commit index, as its stream last reported it."""
    standby_last_index: int
    """The standby leader's last index (all of it committed), as its last answer said."""
    entries_behind: int
    seconds_behind: float
    """Seconds since the standby last held everything the primary reported committed (0 while
    it does)."""
    primary_member: str
    """The primary member being read."""
    reconnects: int
    """How often the primary's stream was opened again after a failure."""
    restarts: int
    """How often shipping started over from the standby's last index."""
    bytes_shipped: int = 0
    """Bytes of entries and snapshots handed to the standby leader (and taken)."""
    snapshots_shipped: int = 0
    messages_behind: int = 0
    """Messages the primary had stored (through its applied index, as its stream last said) that
    the standby has not (through its applied index, as its leader last said)."""
    primary_stored_messages: int = 0
    standby_stored_messages: int = 0
    batches_shipped: int = 0
    """ShipEntries calls that carried entries or a snapshot (and were taken)."""
    acks_behind: int = 0
    """Acknowledgments the primary had applied that the standby has not (each at its applied index)."""


class Shipper:
    """Ships one cluster's committed log from its primary set to its standby set."""

    def __init__(self, primary: Sequence[str], standby: Sequence[str], heartbeat: float = 1.0) -> None:
        self.primary = list(primary)
        self.standby = StandbyCalls(list(standby), FOLLOW)
        self.heartbeat = heartbeat
        self.lag = Lag()
        """The primary's commit index and stored messages as its stream says, the standby's last
        index and stored messages as its leader answers."""
        self._reader: CommittedReader | None = None
        self.restarts = 0
        self.bytes_shipped = 0
        self.snapshots_shipped = 0
        self.batches_shipped = 0

    def status(self) -> ShipStatus:
        lag, reader = self.lag, self._reader
        return ShipStatus(lag.source_commit, lag.held, lag.entries, lag.seconds,
                          reader.member if reader is not None else "", reader.reconnects if reader else 0,
                          self.restarts, self.bytes_shipped, self.snapshots_shipped, lag.messages,
                          lag.source_messages, lag.held_messages, self.batches_shipped, lag.acks)

    def primary_fresh(self) -> bool:
        """The primary's stream is alive and its members hear from a leader (`CommittedReader.fresh`)."""
        return self._reader is not None and self._reader.fresh()

    def heard_at(self) -> float:
        """Monotonic time the primary's stream last said anything (0: it never did)."""
        return self._reader.heard_at if self._reader is not None else 0.0

    def heard_seconds_ago(self) -> float:
        """Seconds since the primary's stream last said anything (-1: it never did)."""
        heard = self.heard_at()
        return time.monotonic() - heard if heard else -1.0

    async def standby_end(self, within: float) -> rpb.ShipEntriesResponse:
        """Where the standby's log ends (and its stored messages), as its leader says now: found and
        waited for under the retry policy for at most `within` seconds. NoLeaderError (retriable)
        when no leader answered in that time; a refusal that is not retriable as it is."""
        policy = RetryPolicy(timeout=within, unreachable_timeout=within, initial_delay=0.1, max_delay=1.0)
        try:
            answer = await with_timeout(self.standby.ship(rpb.ShipEntriesRequest(), policy.outage()), within)
        except TimeoutError:
            raise NoLeaderError(f"no member of the standby set answered as its leader within {within:.0f} s") from None
        except StrongroomError as err:
            if not err.retriable:
                raise
            raise NoLeaderError(f"the standby set had no leader that answered within {within:.0f} s "
                                f"({err.message})") from None
        self._note(answer)
        return answer

    async def run(self) -> None:
        """Ship until cancelled. Raises LogDiverged (or DataCorruption) when the two sites hold
        different histories: that is for an operator to decide, never retried."""
        while True:
            try:
                answer = await self._ship(rpb.ShipEntriesRequest())
                self._note(answer)
                await self._follow(answer.last_index + 1)
            except (LogDiverged, DataCorruption):
                raise
            except StrongroomError as err:
                # Refused at the standby for now (e.g. an error it does not retry): start over.
                log.error("shipping to the standby stopped: %s; starting over", err.message)
                await asyncio.sleep(FOLLOW.max_delay)
            except Exception:
                log.exception("shipping to the standby failed; starting over")
                await asyncio.sleep(FOLLOW.max_delay)
            self.restarts += 1

    async def _follow(self, from_index: int) -> None:
        """Ship the primary's batches from `from_index` until the standby does not take one: the
        stream read ahead by a task of its own while this one ships."""
        reader = self._reader = CommittedReader(self.primary, from_index, heartbeat=self.heartbeat)
        ahead = ReadAhead()
        log.info("shipping the primary's committed log from index %d (reading %s first)", from_index, reader.address)
        reading = asyncio.create_task(self._read(reader, ahead), name="read-primary")
        try:
            await self._ship_ahead(ahead)
        finally:
            await cancel_and_wait(reading)

    async def _read(self, reader: CommittedReader, ahead: ReadAhead) -> None:
        try:
            async with contextlib.aclosing(reader.batches()) as batches:
                async for batch in batches:
                    self.lag.note(batch.commit_index, source_messages=batch.stored_messages,
                                  source_acks=batch.acked_messages)
                    await ahead.put(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the shipping side, which raises it
            await ahead.fail(exc)

    async def _ship_ahead(self, ahead: ReadAhead) -> None:
        lag = self.lag
        while True:
            batch = await ahead.take()
            if _heartbeat(batch):
                # The standby learns the primary's commit index and stored messages (its lag).
                self._note(await self._ship(rpb.ShipEntriesRequest(primary_commit_index=lag.source_commit,
                                                                   primary_stored_messages=lag.source_messages)))
                continue
            answer = await self._ship(_request(batch, lag))
            self._note(answer)
            if not answer.accepted:
                log.info("the standby's log ends at %d, before %d: shipping again from there",
                         answer.last_index, batch.first_index)
                return
            self.bytes_shipped += _size(batch)
            self.batches_shipped += 1
            self.snapshots_shipped += 1 if batch.snapshot_index else 0

    async def _ship(self, request: rpb.ShipEntriesRequest) -> rpb.ShipEntriesResponse:
        return await self.standby.ship(request)

    def _note(self, answer: rpb.ShipEntriesResponse) -> None:
        self.lag.note(held=answer.last_index, held_messages=answer.stored_messages, held_acks=answer.acked_messages)

    async def close(self) -> None:
        await self.standby.close()


def _request(batch: CommittedBatch, lag: Lag) -> rpb.ShipEntriesRequest:
    return rpb.ShipEntriesRequest(first_index=batch.first_index, entries=batch.entries,
                                  primary_commit_index=lag.source_commit, snapshot=batch.snapshot,
                                  snapshot_index=batch.snapshot_index, snapshot_epoch=batch.snapshot_epoch,
                                  prev_epoch=batch.prev_epoch, primary_stored_messages=lag.source_messages)
