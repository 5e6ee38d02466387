"""`Shipper`: the DR service's work: the primary's committed log into the standby set.

It asks the standby set's leader where the standby's log ends (`ShipEntries` with nothing in
it), follows the primary's committed-entry stream from the index after (`CommittedReader`, any
primary member), and hands every batch to the standby leader (`ShipEntries`, through the
client's `Connection`: the leader found and followed as clients find it, the one retry policy;
`transport.py` holds the gRPC calls).
A batch the standby does not take (its leader changed and the new one holds less, or the shipper
restarted) starts it over from the standby's last index: the standby's log is the one truth of
how far shipping got, so nothing is skipped and nothing applied twice. A snapshot in the stream
(the primary compacted what the standby lacks) replaces the standby's state.

Status, for `DrService` and `strongroom status`: the primary's commit index as the stream last
said, the standby's last index, entries behind, and the seconds since the standby last held
everything the primary had committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.reader import FOLLOW, CommittedReader
from strongroom.dr.transport import StandbyCalls
from strongroom.errors import DataCorruption, LogDiverged, StrongroomError
from strongroom.persistence.committed import CommittedBatch, Lag

__all__ = ["ShipStatus", "Shipper"]

log = logging.getLogger("strongroom.dr")

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


class Shipper:
    """Ships one cluster's committed log from its primary set to its standby set."""

    def __init__(self, primary: Sequence[str], standby: Sequence[str], heartbeat: float = 1.0) -> None:
        self.primary = list(primary)
        self.standby = StandbyCalls(list(standby), FOLLOW)
        self.heartbeat = heartbeat
        self.lag = Lag()
        """The primary's commit index as its stream says, the standby's last index as it answers."""
        self._reader: CommittedReader | None = None
        self.restarts = 0
        self.bytes_shipped = 0
        self.snapshots_shipped = 0

    def status(self) -> ShipStatus:
        lag, reader = self.lag, self._reader
        return ShipStatus(lag.source_commit, lag.held, lag.entries, lag.seconds,
                          reader.member if reader is not None else "", reader.reconnects if reader else 0,
                          self.restarts, self.bytes_shipped, self.snapshots_shipped)

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

    async def standby_last_index(self) -> int:
        """Where the standby's log ends, as its leader says now."""
        answer = await self._ship(rpb.ShipEntriesRequest())
        self._note(answer)
        return answer.last_index

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
        """Ship the primary's batches from `from_index` until the standby does not take one."""
        reader = self._reader = CommittedReader(self.primary, from_index, heartbeat=self.heartbeat)
        log.info("shipping the primary's committed log from index %d", from_index)
        async with contextlib.aclosing(reader.batches()) as batches:
            await self._ship_batches(batches)

    async def _ship_batches(self, batches: AsyncIterator[CommittedBatch]) -> None:
        lag = self.lag
        async for batch in batches:
            lag.note(batch.commit_index)
            if not batch.entries and not batch.snapshot:
                # A heartbeat: the standby learns the primary's commit index (its lag).
                self._note(await self._ship(rpb.ShipEntriesRequest(primary_commit_index=lag.source_commit)))
                continue
            answer = await self._ship(_request(batch, lag.source_commit))
            self._note(answer)
            if answer.accepted:
                self.bytes_shipped += sum(len(raw) for raw in batch.entries) + len(batch.snapshot)
                self.snapshots_shipped += 1 if batch.snapshot_index else 0
            if not answer.accepted:
                log.info("the standby's log ends at %d, before %d: shipping again from there",
                         answer.last_index, batch.first_index)
                return

    async def _ship(self, request: rpb.ShipEntriesRequest) -> rpb.ShipEntriesResponse:
        return await self.standby.ship(request)

    def _note(self, answer: rpb.ShipEntriesResponse) -> None:
        self.lag.note(held=answer.last_index)

    async def close(self) -> None:
        await self.standby.close()


def _request(batch: CommittedBatch, primary_commit: int) -> rpb.ShipEntriesRequest:
    return rpb.ShipEntriesRequest(first_index=batch.first_index, entries=batch.entries,
                                  primary_commit_index=primary_commit, snapshot=batch.snapshot,
                                  snapshot_index=batch.snapshot_index, snapshot_epoch=batch.snapshot_epoch,
                                  prev_epoch=batch.prev_epoch)
