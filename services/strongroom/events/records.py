"""What the state machine notes for the store event log while it applies an entry.

The apply runs once per message on every member, so it builds no rows: it notes, per operation,
only what the entry itself does not say (`RecordKind`), as a small tuple whose first item is the
operation's position in the entry. `strongroom.events.rows` later turns the entry, the apply's
results and these notes into rows. Tuples, not classes: one is made per operation (per message
only for rare operations: expiry, discards at a limit, dead letters, replays).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple

__all__ = ["Applied", "Record", "RecordKind"]


class RecordKind(IntEnum):
    """The second item of a record; the items after it are listed per kind."""

    HOLDERS = 1
    """(op, HOLDERS, destination durables, content durables): after a publish operation, the
    durables that could hold its messages; a stored message is pending for those that want it."""
    STORED = 2
    """(op, STORED, seq, store, destination, size, producer, wanting durables): a message stored
    by an operation other than a publish (a dead letter's copy)."""
    DURABLE = 3
    """(op, DURABLE, durable, EventKind, reason): a durable was created (deleted, expired,
    suspended, resumed: `StateMachine.note_durable` is the one place to emit those)."""
    ACKED = 4
    """(op, ACKED, durable, sequences it released)."""
    EXPIRED = 5
    """(op, EXPIRED, seq, store, destination, size, reason)."""
    DISCARDED = 6
    """(op, DISCARDED, seq, store, destination, size, the limit)."""
    DEAD_LETTERED = 7
    """(op, DEAD_LETTERED, durable, seq, store, destination, size); deliveries, target and reason
    come from the DeadLetterOp."""
    REPLAYED = 8
    """(op, REPLAYED, durable, sequences made pending, sequences released)."""
    UOW = 9
    """(op, UOW, uow id, store, destination, status, messages, bytes, operation, target): a unit
    of work changed state (one per UOW a UowOp changed; status `DELETED` once its status lifetime
    ended). Store and destination are where it was when the operation applied; target is the
    dead-letter queue a backout moved it to (else None)."""


Record = tuple[Any, ...]
"""One note: (operation position, RecordKind, ...)."""


class Applied(NamedTuple):
    """One applied entry as the event journal keeps it until its rows are published."""

    index: int
    epoch: int
    time: float
    """The entry's time (the leader's clock at append; 0 from an older leader)."""
    entry: Any
    """The entry itself while this member may build its rows soon (leading); None otherwise:
    read back from the log when needed."""
    results: list[object]
    records: list[Record]
