"""The committed-entry stream: a member's committed log entries from an index on, as they commit.

The one seam that readers of the log outside the cluster share (the DR service first; see
`docs/dr.md`). Any member serves it, from what it has applied (every applied entry is
committed): the entries exactly as they are in its log (serialised `LogEntry`, same index and
epoch), in order and without gaps, then new ones as they are applied. Each batch carries the
member's commit index (and its applied index with the messages stored through it, for a
reader's lag in messages); when nothing new is applied for `heartbeat` seconds an empty batch
carries it alone. When the next index wanted lies in the compacted prefix (at the start, or
because this member compacted or installed a snapshot while the reader lagged) the batch first
carries the member's state snapshot at its applied index, and the entries after it.

Entries are identical at every member that holds them, so a reader that loses the stream opens
it again, at any member, from the index after the last one it received.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import InvalidArgument, LogDiverged
from strongroom.persistence.log import ReplicatedLog
from strongroom.persistence.replica import Replica

__all__ = ["DEFAULT_BATCH_ENTRIES", "DEFAULT_HEARTBEAT_SECONDS", "CommittedBatch", "Lag", "committed_entries",
           "stored_messages"]

DEFAULT_BATCH_ENTRIES = 256
"""Entries per batch unless the reader asks for fewer."""
DEFAULT_HEARTBEAT_SECONDS = 1.0
"""An empty batch with the commit index at least this often while nothing commits."""
MAX_BATCH_BYTES = 8 * 1024 * 1024
"""A batch holds no more entry bytes than this unless a single entry is larger."""


def stored_messages(replica: Replica) -> int:
    """Messages stored through `replica`'s applied index: its state's next message sequence - 1.
    Sequences are given in log order, one per message stored, so every member that applied the
    same index says the same, and the count only grows along the log."""
    return replica.state.next_seq - 1


class Lag:
    """How far a copy of a log (a standby's) is behind the log it copies (the primary's): the
    source's commit index as last heard, the copy's last index, and since when the copy has not
    held everything the source had committed; and in messages: the messages stored at the source
    through its applied index as last heard, against the copy's through its own applied index
    (`stored_messages`, each measured at that side's applied index)."""

    def __init__(self) -> None:
        self.source_commit = 0
        """The source's commit index as last heard."""
        self.held = 0
        """The copy's last index as last heard."""
        self.source_messages = 0
        """Messages stored at the source through its applied index, as last heard."""
        self.held_messages = 0
        """Messages stored at the copy through its applied index, as last heard."""
        self.source_acks = 0
        """Messages acknowledged at the source through its applied index, as last heard."""
        self.held_acks = 0
        """Messages acknowledged at the copy through its applied index, as last heard."""
        self._caught_up_at = time.monotonic()

    def note(self, source_commit: int = 0, held: int | None = None, source_messages: int = 0,
             held_messages: int | None = None, source_acks: int = 0, held_acks: int | None = None) -> None:
        """What was heard: the source's commit index and stored messages (they only grow; a
        member read later may report less than one read before), the copy's last index and
        stored messages."""
        self.source_commit = max(self.source_commit, source_commit)
        self.source_messages = max(self.source_messages, source_messages)
        self.source_acks = max(self.source_acks, source_acks)
        if held_acks is not None:
            self.held_acks = held_acks
        if held is not None:
            self.held = held
        if held_messages is not None:
            self.held_messages = held_messages
        if self.held >= self.source_commit:
            self._caught_up_at = time.monotonic()

    @property
    def entries(self) -> int:
        """Entries behind (0 when caught up)."""
        return max(0, self.source_commit - self.held)

    @property
    def messages(self) -> int:
        """Messages the source had stored that the copy has not (0 when caught up)."""
        return max(0, self.source_messages - self.held_messages)

    @property
    def acks(self) -> int:
        """Acknowledgments the source had applied that the copy has not (0 when caught up)."""
        return max(0, self.source_acks - self.held_acks)

    @property
    def seconds(self) -> float:
        """Seconds since the copy last held everything the source had committed (0 while it does)."""
        return time.monotonic() - self._caught_up_at if self.entries else 0.0


@dataclass(frozen=True)
class CommittedBatch:
    """One message of the stream."""

    first_index: int
    """The index of the first entry of `entries` (the snapshot's index + 1 after a snapshot)."""
    entries: list[bytes]
    """Serialised `LogEntry`s, consecutive from `first_index` (empty: a heartbeat)."""
    commit_index: int
    """The serving member's commit index when the batch was made."""
    snapshot: bytes = b""
    snapshot_index: int = 0
    snapshot_epoch: int = 0
    member: str = ""
    """The serving member (set by the reader's side)."""
    prev_epoch: int = 0
    """The epoch of the entry at `first_index - 1` (0 before index 1)."""
    leader_silence: float = 0.0
    """Seconds since the serving member last heard from a leader (0 on a serving leader)."""
    applied_index: int = 0
    """The serving member's applied index when the batch was made."""
    stored_messages: int = 0
    """Messages stored through `applied_index` at the serving member (`stored_messages`)."""
    acked_messages: int = 0
    """Messages acknowledged through `applied_index` at the serving member (per durable)."""


async def committed_entries(replica: Replica, from_index: int, max_entries: int = 0, heartbeat: float = 0.0,
                            leader_silence: Callable[[], float] = lambda: 0.0) -> AsyncIterator[CommittedBatch]:
    """The stream of `replica`'s committed entries from `from_index` (>= 1) on; it ends only when
    the caller stops reading (or the member stops). `leader_silence()`: seconds since the member
    last heard from a leader, carried by every batch."""
    if from_index < 1:
        raise InvalidArgument(f"from_index must be 1 or more, not {from_index}")
    if max_entries < 0 or heartbeat < 0:
        raise InvalidArgument("max_entries and heartbeat_ms must not be negative")
    batch = max_entries or DEFAULT_BATCH_ENTRIES
    beat = heartbeat or DEFAULT_HEARTBEAT_SECONDS
    log = replica.log

    def made(first: int, entries: list[bytes], snapshot: tuple[bytes, int, int] = (b"", 0, 0)) -> CommittedBatch:
        return CommittedBatch(first, entries, replica.commit_index, *snapshot, prev_epoch=log.epoch_at(first - 1) or 0,
                              leader_silence=leader_silence(), applied_index=replica.state.applied_index,
                              stored_messages=stored_messages(replica), acked_messages=replica.state.acked_messages)

    wanted = from_index
    while True:
        changed = replica.applied_changed()
        applied = replica.state.applied_index
        if wanted <= log.snapshot_index:
            # Compacted (or replaced by a snapshot) before we got there: the state instead.
            index, epoch, parts = replica.snapshot()
            wanted = index + 1
            entries = log.raw_slice(wanted, batch, MAX_BATCH_BYTES) if index < applied else []
            # In one message (the stream's format): its parts joined (snapshots.py).
            yield made(wanted, entries, (b"".join(parts), index, epoch))
        elif wanted <= applied:
            entries = log.raw_slice(wanted, min(batch, applied - wanted + 1), MAX_BATCH_BYTES)
            yield made(wanted, entries)
        else:
            try:
                await asyncio.wait_for(asyncio.shield(changed), beat)
            except TimeoutError:
                yield made(wanted, [])
            continue
        wanted += len(entries)


def shipped_entries(lg: ReplicatedLog, first_index: int, raws: list[bytes], snapshot: bytes, snapshot_index: int,
                    snapshot_epoch: int, prev_epoch: int | None) -> list[rpb.LogEntry]:
    """The entries the DR service ships to a standby leader (serialised, from `first_index`),
    decoded and checked against the standby's log `lg`: InvalidArgument for an entry that does
    not decode, entries that are not consecutive, a snapshot without its state or not followed
    by its index + 1; LogDiverged when the sites hold different histories (the snapshot's index,
    or the entry before the entries, is of another epoch here than `snapshot_epoch` /
    `prev_epoch` at the primary). Nothing is stored either way."""
    try:
        entries = [rpb.LogEntry.FromString(raw) for raw in raws]
    except Exception:  # noqa: BLE001 - a payload that is not a LogEntry
        raise InvalidArgument("a shipped entry does not decode as a LogEntry") from None
    if any(e.index != first_index + i for i, e in enumerate(entries)):
        raise InvalidArgument(f"shipped entries are not consecutive from index {first_index}")
    if snapshot_index:
        if not snapshot or first_index != snapshot_index + 1:
            raise InvalidArgument(f"a shipped snapshot at index {snapshot_index} must carry the state and be "
                                  f"followed by index {snapshot_index + 1}")
        held = lg.epoch_at(snapshot_index)
        if held is not None and held != snapshot_epoch:
            raise LogDiverged(f"the primary's snapshot at index {snapshot_index} is of epoch {snapshot_epoch}; "
                              f"the standby's entry there is of epoch {held}: the sites hold different histories")
    if entries and prev_epoch is not None:
        held = lg.epoch_at(first_index - 1)
        if held is None and snapshot_index == first_index - 1:
            held = snapshot_epoch
        if held is not None and held != prev_epoch:
            raise LogDiverged(f"shipped entries from index {first_index} follow an entry of epoch {prev_epoch} at "
                              f"the primary; the standby's entry {first_index - 1} is of epoch {held}: the sites "
                              f"hold different histories")
    return entries
