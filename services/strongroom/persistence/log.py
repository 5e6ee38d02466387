"""The replicated log of one member: entries since the last snapshot, backed by its storage.

Entries carry (index, epoch) and a batch of operations that apply atomically. The log enforces
the append consistency check: entries are accepted after `prev_index` only if this log holds
`prev_index` with `prev_epoch`; a conflicting suffix is truncated before the new entries land.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.observability.tallies import Tallies
from strongroom.persistence.storage import LoadedState, Storage
from strongroom.tracing import traced

__all__ = ["ReplicatedLog", "AppendOutcome", "LOG_FORMAT", "KEEP_APPLIED", "LIFETIMES_LOG_FORMAT", "ORIGIN_LOG_FORMAT",
           "DELIVERY_COUNTS_LOG_FORMAT", "PRODUCERS_LOG_FORMAT", "PUBLICATION_LOG_FORMAT", "UOW_LOG_FORMAT"]


class AppendOutcome:
    """Result of a follower-side append."""

    __slots__ = ("ok", "conflict_index", "needs_snapshot")

    def __init__(self, ok: bool, conflict_index: int = 0, needs_snapshot: bool = False) -> None:
        self.ok = ok
        self.conflict_index = conflict_index
        self.needs_snapshot = needs_snapshot


# The log format this member reads and writes: 2 adds PublishBatchOp, 3 SuspendDurablesOp and
# DeleteDurableOp, 4 UowOp and ClockOp (units of work), 5 lifetimes on the pseudo-clock (see
# LIFETIMES_LOG_FORMAT) and publications on durable topics (UowOp kinds SUBSCRIBE, UNSUBSCRIBE,
# EXPIRE_SUBSCRIPTIONS; UowDefinition.publication), 6 forwarded messages (ORIGIN_LOG_FORMAT), 7
# forgetting idle producers' dedup windows (PRODUCERS_LOG_FORMAT). A member registers it in etcd;
# a leader writes an operation (or a field) of format N only once every member of its cluster has
# registered N or later.
LOG_FORMAT = 7

UOW_LOG_FORMAT = 4
"""Units of work and the pseudo-clock: `UowOp` and `ClockOp`."""
PUBLICATION_LOG_FORMAT = 5
"""Publications on durable topics and durable subscriptions (`UowOp` kinds SUBSCRIBE,
UNSUBSCRIBE, EXPIRE_SUBSCRIPTIONS; `UowDefinition.publication`)."""
LIFETIMES_LOG_FORMAT = 5
"""Lifetimes on the pseudo-clock: message time-to-lives (`PublishOp.expires_clock`,
`ExpireOp.clock`) and the use and expiry of durables (`DurableUseOp`, `AckOp.clock`,
`CreateDurableOp.clock`, `DeleteDurableOp.expiry`). A member of format 4 would not know them
(it would keep such a message for ever, or delete a durable whatever its use), so until every
member reads format 5 time-to-lives stay on the wall clock and no durable expires."""
ORIGIN_LOG_FORMAT = 6
"""Messages forwarded by routers (`PublishOp.forwarded`) and the origin marks. A member of format
5 would skip the field and store a re-sent message again, so until every member reads format 6
a publish that carries an origin is refused (LOG_FORMAT_PENDING)."""

PRODUCERS_LOG_FORMAT = 7
"""`ForgetProducersOp`: a member of format 6 would stop applying at it, so until every member
reads format 7 no producer's deduplication window is forgotten."""
DELIVERY_COUNTS_LOG_FORMAT = 7
"""`DeliveryCountsOp`: until every member reads format 7 delivery counts stay the leader's."""

# Applied entries kept in memory (parsed and serialised) below the newest applied one: a
# follower a few rounds behind is sent them from memory; older ones are read back from storage.
KEEP_APPLIED = 16


class ReplicatedLog:
    """Entries after `snapshot_index`: in storage, and in memory until applied.

    Every entry's epoch stays in memory. The entries themselves stay only until they are
    applied (and KEEP_APPLIED more), when storage holds them: a log in memory of every entry
    since the last snapshot would grow by each round's bytes, twice (parsed and serialised),
    until the next compaction. `release` drops them; `entry`, `slice` and `raw_slice` read a
    dropped entry back from storage. A log without durable storage (mode `memory`) keeps them.
    """

    def __init__(self, storage: Storage, loaded: LoadedState, tallies: Tallies | None = None) -> None:
        self.storage = storage
        self.tallies = tallies or Tallies()
        """The member's counters: how long each log write took."""
        self.reset(loaded)

    def reset(self, loaded: LoadedState) -> None:
        """Hold what storage holds (at start, and after storage rolled the log back)."""
        self.snapshot_index = loaded.snapshot_index
        self.snapshot_epoch = loaded.snapshot_epoch
        # Position i holds index snapshot_index + 1 + i; None once released from memory.
        self.entries: list[rpb.LogEntry | None] = list(loaded.entries)
        # Serialised form of each entry, made once (storage and every follower's Append use it).
        self.raws: list[bytes | None] = [None] * len(self.entries)
        self.epochs: list[int] = [e.epoch for e in loaded.entries]
        # Entries up to this index may be released from memory (never past the applied index).
        self._released = self.snapshot_index
        self.unstored = False
        """The last entry is a leader's that its storage could not write yet (`store_last`)."""

    @property
    def last_index(self) -> int:
        """Index of the last entry (the snapshot's index if the log is empty)."""
        return self.snapshot_index + len(self.epochs)

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry."""
        return self.epochs[-1] if self.epochs else self.snapshot_epoch

    @property
    def first_index(self) -> int:
        """Index of the first entry still held."""
        return self.snapshot_index + 1

    def epoch_at(self, index: int) -> int | None:
        """Epoch of the entry at `index`; None if it is compacted away or beyond the end."""
        if index == self.snapshot_index:
            return self.snapshot_epoch
        if index < self.snapshot_index or index > self.last_index:
            return None
        return self.epochs[index - self.snapshot_index - 1]

    def entry(self, index: int) -> rpb.LogEntry:
        """The entry at `index` (must be held), from memory or read back from storage."""
        entry = self.entries[index - self.snapshot_index - 1]
        if entry is None:
            entry = rpb.LogEntry.FromString(self.storage.read_entry(index))
        return entry

    def slice(self, from_index: int, max_entries: int, max_bytes: int = 32 * 1024 * 1024) -> list[rpb.LogEntry]:
        """Entries from `from_index` (>= first_index): at most `max_entries`, and no more than
        `max_bytes` unless a single entry is larger (one entry always goes)."""
        start = from_index - self.snapshot_index - 1
        raws = self.raw_slice(from_index, max_entries, max_bytes)
        held = self.entries[start:start + len(raws)]
        return [e if e is not None else rpb.LogEntry.FromString(raw) for e, raw in zip(held, raws)]

    def raw_slice(self, from_index: int, max_entries: int, max_bytes: int = 32 * 1024 * 1024) -> list[bytes]:
        """Like `slice`, the entries serialised."""
        start = from_index - self.snapshot_index - 1
        out: list[bytes] = []
        total = 0
        for i in range(start, min(start + max_entries, len(self.epochs))):
            raw = self.raws[i]
            if raw is None:
                entry = self.entries[i]
                if entry is None:  # released: read back, not kept
                    raw = self.storage.read_entry(self.snapshot_index + 1 + i)
                elif self.storage.durable:
                    # Loaded at start: the bytes as stored (as the leader made them), not the
                    # entry serialised again (its fields may come out in another order), so
                    # every member holds and sends the same bytes for an entry.
                    raw = self.raws[i] = self.storage.read_entry(self.snapshot_index + 1 + i)
                else:
                    raw = self.raws[i] = entry.SerializeToString()
            total += len(raw)
            if total > max_bytes and out:
                break
            out.append(raw)
        return out

    def append_local(self, entry: rpb.LogEntry, raw: bytes | None = None) -> None:
        """Leader: store a new entry at last_index + 1 in one batch (`raw`: the entry already
        serialised)."""
        self.add_local(entry, raw)
        self.store_last()

    def add_local(self, entry: rpb.LogEntry, raw: bytes | None = None) -> None:
        """Leader: a new entry at last_index + 1, in memory only, for the replicators to send
        while this member stores it: `store_last` must follow before this member answers
        anyone about its log."""
        assert entry.index == self.last_index + 1, (entry.index, self.last_index)
        self.entries.append(entry)
        self.raws.append(raw if raw is not None else entry.SerializeToString())
        self.epochs.append(entry.epoch)

    @traced("lwrite")
    def store_last(self, keep: bool = False) -> None:
        """Store the entry `add_local` added (fsynced in disk-sync); if that fails, it is
        dropped from memory too, so the log never holds an entry its storage does not, unless
        `keep`: a leader that goes on when its storage fails keeps it `unstored` (its followers
        may hold it) and stores it again before anything else, or drops it when its term ends."""
        entry, raw = self.entries[-1], self.raws[-1]
        try:
            self._write([entry], raws=[raw])  # type: ignore[list-item]
        except BaseException:
            self.unstored = keep
            if not keep:
                self._drop_last()
            raise
        self.unstored = False

    def drop_unstored(self) -> None:
        """Forget the entry `store_last` kept unstored, if there is one (a leader's term ends)."""
        if self.unstored:
            self.unstored = False
            self._drop_last()

    def _drop_last(self) -> None:
        del self.entries[-1]
        del self.raws[-1]
        del self.epochs[-1]

    def release(self, applied_index: int) -> None:
        """Entries applied up to `applied_index` are done with, but for the last KEEP_APPLIED:
        drop them from memory (storage keeps them) if storage is durable."""
        through = applied_index - KEEP_APPLIED
        if through <= self._released or not self.storage.durable:
            return
        entries, raws, base = self.entries, self.raws, self.snapshot_index + 1
        for i in range(self._released + 1 - base, through + 1 - base):
            entries[i] = None
            raws[i] = None
        self._released = through

    def append_from_leader(self, prev_index: int, prev_epoch: int, entries: list[rpb.LogEntry],
                           commit_index: int | None = None, raws: list[bytes] | None = None) -> AppendOutcome:
        """Follower: the consistency check, conflict truncation, then one batched write.
        `raws`: the entries as the leader serialised them (stored as they are)."""
        if prev_index < self.snapshot_index:
            # Our compacted prefix is committed; skip entries it already covers.
            skip = self.snapshot_index - prev_index
            if skip >= len(entries):
                return AppendOutcome(True)
            prev_index = self.snapshot_index
            prev_epoch = entries[skip - 1].epoch
            entries = entries[skip:]
            if raws is not None:
                raws = raws[skip:]
        mine = self.epoch_at(prev_index)
        if mine is None:
            return AppendOutcome(False, conflict_index=self.last_index)
        if mine != prev_epoch:
            # Everything from prev_index on is suspect; the leader backs up below it.
            return AppendOutcome(False, conflict_index=max(self.snapshot_index, prev_index - 1))
        # Skip entries we already hold with the same epoch; truncate at the first conflict.
        new: list[rpb.LogEntry] = []
        new_raws: list[bytes] | None = None
        truncate_after: int | None = None
        for i, entry in enumerate(entries):
            held = self.epoch_at(entry.index)
            if held != entry.epoch:
                if held is not None:
                    truncate_after = entry.index - 1
                new = entries[i:]
                new_raws = raws[i:] if raws is not None else None
                break
        if truncate_after is not None:
            self._drop_after(truncate_after)
        if new or truncate_after is not None or commit_index is not None:
            self._write(new, truncate_after=truncate_after, commit_index=commit_index, raws=new_raws)
        self.entries.extend(new)
        self.raws.extend(new_raws if new_raws is not None else [None] * len(new))
        self.epochs.extend(e.epoch for e in new)
        return AppendOutcome(True)

    def _write(self, entries: list[rpb.LogEntry], truncate_after: int | None = None,
               commit_index: int | None = None, raws: list[bytes] | None = None) -> None:
        """Write entries to storage, timed (the member's log-write histogram)."""
        began = time.perf_counter()
        self.storage.append(entries, truncate_after=truncate_after, commit_index=commit_index, raws=raws)
        self.tallies.log_write_seconds.observe(time.perf_counter() - began)

    def truncate_after(self, index: int) -> None:
        """Drop every entry above `index` (a new leader adopting another member's log)."""
        if index >= self.last_index:
            return
        self._drop_after(index)
        self.storage.append([], truncate_after=index)

    def _drop_after(self, index: int) -> None:
        """Forget, in memory, the entries above `index` (storage drops them in the same call)."""
        self._released = min(self._released, index)
        at = index - self.snapshot_index
        del self.entries[at:]
        del self.raws[at:]
        del self.epochs[at:]

    def compact(self, through_index: int, epoch: int, snapshot: Sequence[bytes]) -> None:
        """Store `snapshot` (the parts of the state after `through_index`) and drop the entries it covers
        (storage keeps them from its oldest restore point on, for a roll back)."""
        if through_index <= self.snapshot_index:
            return
        self.storage.save_snapshot(through_index, epoch, snapshot)
        self.compacted(through_index, epoch)

    def compacted(self, through_index: int, epoch: int) -> None:
        """Storage holds the snapshot of the state after `through_index` (saved by `compact`, or
        by a compaction in the background): drop the entries it covers from memory."""
        del self.entries[:through_index - self.snapshot_index]
        del self.raws[:through_index - self.snapshot_index]
        del self.epochs[:through_index - self.snapshot_index]
        self.snapshot_index = through_index
        self._released = max(self._released, through_index)
        self.snapshot_epoch = epoch

    def install_snapshot(self, index: int, epoch: int, snapshot: Sequence[bytes]) -> None:
        """Replace the whole log by a leader's snapshot (its parts)."""
        self.storage.replace_with_snapshot(index, epoch, snapshot)
        self.replaced(index, epoch)

    def replaced(self, index: int, epoch: int) -> None:
        """Storage holds only a snapshot at `index` now (`install_snapshot`, or an install
        written a batch at a time): the log in memory starts after it."""
        self.entries = []
        self.raws = []
        self.epochs = []
        self.snapshot_index = index
        self.snapshot_epoch = epoch
        self._released = index
