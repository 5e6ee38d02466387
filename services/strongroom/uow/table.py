"""Units of work as replicated state: the statuses, the transitions, the pseudo-clock.

`UowTable` is deterministic: every member applies the same `UowOp`s in the same order and
holds the same units of work. The leader decides (what to deliver, what timed out) and writes
the decision into the log; applying checks it once more against the state, so a decision that
raced another (two receivers, a timeout and a commit) changes nothing and says why.

Statuses and transitions (EntireX's), by the operation that makes them:

| from                        | operation         | to                                      |
|-----------------------------|-------------------|-----------------------------------------|
| (new)                       | OPEN              | RECEIVED                                |
| (new), RECEIVED             | COMMIT            | ACCEPTED                                |
| RECEIVED                    | SENDER_BACKOUT    | BACKEDOUT                               |
| RECEIVED                    | ABANDON           | BACKEDOUT (sender gone, or leader change)|
| ACCEPTED                    | SENDER_CANCEL     | CANCELLED                               |
| ACCEPTED                    | DELIVER           | DELIVERED                               |
| ACCEPTED                    | TIMEOUT           | TIMEOUT (its lifetime ended)            |
| DELIVERED                   | RECEIVER_COMMIT   | PROCESSED                               |
| DELIVERED                   | RECEIVER_BACKOUT  | ACCEPTED, backouts + 1 (past the threshold: ACCEPTED on the dead-letter queue) |
| DELIVERED                   | RELEASE           | as RECEIVER_BACKOUT (the receiver's conversation timed out) |
| DELIVERED                   | RECEIVER_CANCEL   | CANCELLED                               |
| RECEIVED, ACCEPTED, DELIVERED | DISCARD         | DISCARDED (non-persistent messages lost with a leader) |
| a final status              | FORGET            | deleted (its status lifetime ended)     |

PROCESSED, BACKEDOUT, TIMEOUT, CANCELLED and DISCARDED are final: the UOW is complete, its
messages are released, and its status is kept for `lifetime × status_lifetime_multiple` when it
is persistent, else deleted at once (its id is remembered, invisible, for one lifetime so a
sender's retry of a whole UOW is recognised).

The pseudo-clock: `clock` is the highest `clock` of the operations applied (each UowOp and
ClockOp carries the leader's clock). The leader runs it on from the applied value with its own
monotonic time while it serves, so it stands still while the cluster is down or leaderless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import uow_pb2

__all__ = ["FINAL", "OpKind", "Refused", "Uow", "UowStatus", "UowTable", "status_name"]


class UowStatus(IntEnum):
    """A unit of work's status (the values of `strongroom.v1.UowStatus`)."""

    RECEIVED = uow_pb2.UOW_STATUS_RECEIVED
    ACCEPTED = uow_pb2.UOW_STATUS_ACCEPTED
    DELIVERED = uow_pb2.UOW_STATUS_DELIVERED
    PROCESSED = uow_pb2.UOW_STATUS_PROCESSED
    BACKEDOUT = uow_pb2.UOW_STATUS_BACKEDOUT
    TIMEOUT = uow_pb2.UOW_STATUS_TIMEOUT
    CANCELLED = uow_pb2.UOW_STATUS_CANCELLED
    DISCARDED = uow_pb2.UOW_STATUS_DISCARDED


FINAL = frozenset({UowStatus.PROCESSED, UowStatus.BACKEDOUT, UowStatus.TIMEOUT, UowStatus.CANCELLED,
                   UowStatus.DISCARDED})
LIVE = frozenset({UowStatus.RECEIVED, UowStatus.ACCEPTED, UowStatus.DELIVERED})


def status_name(status: int) -> str:
    """RECEIVED, ACCEPTED, ... for a status value."""
    try:
        return UowStatus(status).name
    except ValueError:
        return f"UNKNOWN({status})"


class OpKind(IntEnum):
    """What a UowOp does (the values of `strongroom.v1.UowOpKind`)."""

    OPEN = rpb.UOW_OP_KIND_OPEN
    COMMIT = rpb.UOW_OP_KIND_COMMIT
    SENDER_BACKOUT = rpb.UOW_OP_KIND_SENDER_BACKOUT
    ABANDON = rpb.UOW_OP_KIND_ABANDON
    SENDER_CANCEL = rpb.UOW_OP_KIND_SENDER_CANCEL
    DELIVER = rpb.UOW_OP_KIND_DELIVER
    RECEIVER_COMMIT = rpb.UOW_OP_KIND_RECEIVER_COMMIT
    RECEIVER_BACKOUT = rpb.UOW_OP_KIND_RECEIVER_BACKOUT
    RECEIVER_CANCEL = rpb.UOW_OP_KIND_RECEIVER_CANCEL
    RELEASE = rpb.UOW_OP_KIND_RELEASE
    TIMEOUT = rpb.UOW_OP_KIND_TIMEOUT
    DISCARD = rpb.UOW_OP_KIND_DISCARD
    FORGET = rpb.UOW_OP_KIND_FORGET
    USER_STATUS = rpb.UOW_OP_KIND_USER_STATUS


# The status a UOW must have for each operation on an existing UOW, and the one it gets
# (None: decided by the operation, see the module's table).
_S = UowStatus
TRANSITIONS: dict[OpKind, tuple[frozenset[UowStatus], UowStatus | None]] = {
    OpKind.COMMIT: (frozenset({_S.RECEIVED}), _S.ACCEPTED),
    OpKind.SENDER_BACKOUT: (frozenset({_S.RECEIVED}), _S.BACKEDOUT),
    OpKind.ABANDON: (frozenset({_S.RECEIVED}), _S.BACKEDOUT),
    OpKind.SENDER_CANCEL: (frozenset({_S.ACCEPTED}), _S.CANCELLED),
    OpKind.DELIVER: (frozenset({_S.ACCEPTED}), _S.DELIVERED),
    OpKind.TIMEOUT: (frozenset({_S.ACCEPTED}), _S.TIMEOUT),
    OpKind.RECEIVER_COMMIT: (frozenset({_S.DELIVERED}), _S.PROCESSED),
    OpKind.RECEIVER_BACKOUT: (frozenset({_S.DELIVERED}), None),
    OpKind.RELEASE: (frozenset({_S.DELIVERED}), None),
    OpKind.RECEIVER_CANCEL: (frozenset({_S.DELIVERED}), _S.CANCELLED),
    OpKind.DISCARD: (LIVE, _S.DISCARDED),
    OpKind.FORGET: (FINAL, None),
    OpKind.USER_STATUS: (frozenset(UowStatus), None),
}
# Operations that need the acting receiver to be the one holding the UOW.
_RECEIVER_OPS = frozenset({OpKind.RECEIVER_COMMIT, OpKind.RECEIVER_BACKOUT, OpKind.RECEIVER_CANCEL})


@dataclass(frozen=True)
class Refused:
    """An operation applied to a UOW whose state does not allow it: nothing changed.
    `reason` is the error's ErrorInfo reason (UNKNOWN_UOW, UOW_STATE, UOW_NOT_HELD, UOW_EXISTS,
    STORE_LIMIT_EXCEEDED)."""

    reason: str
    message: str


@dataclass
class Uow:
    """One unit of work."""

    id: str
    definition: rpb.UowDefinition
    status: UowStatus
    created_at: float
    messages: list[cpb.Message] | None = None
    """Its messages when they are persistent (in the log), else None: the leader holds them."""
    count: int = 0
    size: int = 0
    backouts: int = 0
    user_status: bytes | None = None
    receiver: str = ""
    completed_at: float = 0.0
    delivered_at: float = 0.0
    order: int = 0
    """Its place in its queue: commit order (a backed-out UOW keeps its place)."""
    dead_lettered_from: str = ""

    @property
    def store(self) -> str:
        """The store of its queue."""
        return self.definition.store

    @property
    def destination(self) -> str:
        """Its queue."""
        return self.definition.destination

    @property
    def final(self) -> bool:
        """Complete: processed, backed out, timed out, cancelled or discarded."""
        return self.status in FINAL

    def expires_at(self) -> float:
        """When its lifetime ends (live) or its status is deleted (complete)."""
        lifetime = self.definition.lifetime
        if self.final:
            return self.completed_at + lifetime * max(1, self.definition.status_lifetime_multiple)
        return self.created_at + lifetime


@dataclass
class _Queue:
    """The ACCEPTED units of work of one queue, in order."""

    accepted: dict[str, int] = field(default_factory=dict)

    def add(self, uow: Uow) -> None:
        accepted = self.accepted
        if accepted and uow.order < next(reversed(accepted.values())):
            # A backed-out UOW goes back to its place (rare: rebuild the order).
            accepted[uow.id] = uow.order
            self.accepted = dict(sorted(accepted.items(), key=lambda item: item[1]))
        else:
            accepted[uow.id] = uow.order


class UowTable:
    """Every unit of work of a state machine, and the pseudo-clock."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.uows: dict[str, Uow] = {}
        self.queues: dict[str, _Queue] = {}
        # Ids of completed UOWs without a persistent status, until a pseudo-clock second.
        self.gone: dict[str, float] = {}
        self.order = 0
        # Per store: messages and bytes held by live UOWs (store limits count them).
        self.store_count: dict[str, int] = {}
        self.store_bytes: dict[str, int] = {}
        # Ids changed since `take_changes`, for a state on disk (it writes them with the entry;
        # `track_changes` turns it on). None: not kept (a state in memory has nothing to write).
        self.changed: set[str] | None = None
        # Called with a queue's name when a UOW becomes ACCEPTED on it (the leader wakes
        # waiting receivers).
        self.on_accepted: Callable[[str], None] | None = None

    # --- applying ----------------------------------------------------------------------------

    def advance(self, clock: float) -> None:
        """The pseudo-clock moves on to `clock` (never back)."""
        self.clock = max(self.clock, clock)

    def apply(self, op: rpb.UowOp, room: Callable[[str, int, int], str]) -> Uow | Refused | list[Uow]:
        """Apply one UowOp. `room(store, count, bytes)` says why a store cannot take that many
        more messages and bytes ('' when it can). One UOW (or Refused) for operations on one
        UOW; the UOWs changed for the leader's operations on many."""
        self.advance(op.clock)
        kind = OpKind(op.kind)
        if kind in (OpKind.ABANDON, OpKind.RELEASE, OpKind.TIMEOUT, OpKind.DISCARD, OpKind.FORGET):
            return self._many(kind, op.uow_ids)
        if len(op.uow_ids) != 1:
            return Refused("INVALID_ARGUMENT", f"{kind.name} acts on one unit of work, not {len(op.uow_ids)}")
        uow_id = op.uow_ids[0]
        if kind == OpKind.OPEN or (kind == OpKind.COMMIT and op.HasField("definition")):
            return self._create(op, uow_id, kind, room)
        uow = self.uows.get(uow_id)
        if uow is None:
            return Refused("UNKNOWN_UOW", f"no unit of work {uow_id!r}")
        allowed, _ = TRANSITIONS[kind]
        if uow.status not in allowed:
            return Refused("UOW_STATE", f"unit of work {uow_id!r} is {uow.status.name}; "
                                        f"{kind.name.lower().replace('_', ' ')} needs "
                                        f"{' or '.join(sorted(s.name for s in allowed))}")
        if kind in _RECEIVER_OPS and uow.receiver != op.receiver:
            return Refused("UOW_NOT_HELD", f"unit of work {uow_id!r} is held by receiver {uow.receiver!r}, "
                                           f"not {op.receiver!r}")
        if kind == OpKind.COMMIT:
            why = room(uow.store, op.message_count, op.message_bytes)
            if why:
                return Refused("STORE_LIMIT_EXCEEDED", why)
            self._fill(uow, op)
            self._accept(uow)
        elif kind == OpKind.DELIVER:
            self._leave_queue(uow)
            uow.status = UowStatus.DELIVERED
            uow.receiver = op.receiver
            uow.delivered_at = self.clock
        elif kind == OpKind.RECEIVER_BACKOUT:
            self._back_out(uow)
        elif kind == OpKind.USER_STATUS:
            pass
        else:
            to = TRANSITIONS[kind][1]
            assert to is not None
            self._complete(uow, to)
        if op.HasField("user_status"):
            uow.user_status = op.user_status
        self._touch(uow)
        return uow

    def _create(self, op: rpb.UowOp, uow_id: str, kind: OpKind,
                room: Callable[[str, int, int], str]) -> Uow | Refused:
        if uow_id in self.uows or uow_id in self.gone:
            return Refused("UOW_EXISTS", f"unit of work {uow_id!r} exists already")
        definition = rpb.UowDefinition()
        definition.CopyFrom(op.definition)
        uow = Uow(id=uow_id, definition=definition, status=UowStatus.RECEIVED, created_at=self.clock)
        if kind == OpKind.COMMIT:
            why = room(definition.store, op.message_count, op.message_bytes)
            if why:
                return Refused("STORE_LIMIT_EXCEEDED", why)
            self._fill(uow, op)
        self.uows[uow_id] = uow
        if kind == OpKind.COMMIT:
            self._accept(uow)
        if op.HasField("user_status"):
            uow.user_status = op.user_status
        self._touch(uow)
        return uow

    def _fill(self, uow: Uow, op: rpb.UowOp) -> None:
        """The sender's messages arrive with its commit."""
        uow.count = op.message_count
        uow.size = op.message_bytes
        uow.messages = list(op.messages) if uow.definition.persistent else None
        store = uow.store
        self.store_count[store] = self.store_count.get(store, 0) + uow.count
        self.store_bytes[store] = self.store_bytes.get(store, 0) + uow.size

    def _accept(self, uow: Uow) -> None:
        self.order += 1
        uow.order = self.order
        self._enqueue(uow)

    def _enqueue(self, uow: Uow) -> None:
        uow.status = UowStatus.ACCEPTED
        self.queues.setdefault(uow.destination, _Queue()).add(uow)
        if self.on_accepted is not None:
            self.on_accepted(uow.destination)

    def _leave_queue(self, uow: Uow) -> None:
        queue = self.queues.get(uow.destination)
        if queue is not None:
            queue.accepted.pop(uow.id, None)
            if not queue.accepted:
                del self.queues[uow.destination]

    def _back_out(self, uow: Uow) -> None:
        """A receiver gave it back (or its conversation timed out): offered again, or past the
        threshold moved whole to the dead-letter queue."""
        uow.backouts += 1
        uow.delivered_at = 0.0
        definition = uow.definition
        if (definition.backout_threshold and uow.backouts > definition.backout_threshold
                and definition.dead_letter_destination and not uow.dead_lettered_from):
            self._release(uow)
            uow.dead_lettered_from = definition.destination
            definition.store, definition.destination = definition.dead_letter_store, definition.dead_letter_destination
            self.store_count[uow.store] = self.store_count.get(uow.store, 0) + uow.count
            self.store_bytes[uow.store] = self.store_bytes.get(uow.store, 0) + uow.size
        self._enqueue(uow)

    def _complete(self, uow: Uow, status: UowStatus) -> None:
        if uow.status == UowStatus.ACCEPTED:
            self._leave_queue(uow)
        if uow.status != UowStatus.RECEIVED:
            self._release(uow)
        uow.status = status
        uow.completed_at = self.clock
        uow.messages = None
        if not uow.definition.persistent_status:
            # No status to keep: only its id, for a sender's retry.
            self._drop(uow)
            self.gone[uow.id] = self.clock + uow.definition.lifetime

    def _release(self, uow: Uow) -> None:
        store = uow.store
        self.store_count[store] -= uow.count
        self.store_bytes[store] -= uow.size

    def _many(self, kind: OpKind, ids: Iterable[str]) -> list[Uow]:
        """The leader's operations on many UOWs; each is checked on its own (a UOW that moved on
        meanwhile is left as it is)."""
        changed = []
        allowed, to = TRANSITIONS[kind]
        for uow_id in ids:
            uow = self.uows.get(uow_id)
            if uow is None:
                if kind == OpKind.FORGET and self.gone.get(uow_id, float("inf")) <= self.clock:
                    del self.gone[uow_id]
                    self._touch_id(uow_id)
                continue
            if uow.status not in allowed:
                continue
            if kind == OpKind.FORGET:
                if uow.expires_at() > self.clock:
                    continue
                self._drop(uow)
            elif kind == OpKind.TIMEOUT:
                if uow.expires_at() > self.clock:
                    continue
                self._complete(uow, UowStatus.TIMEOUT)
            elif kind == OpKind.RELEASE:
                if uow.delivered_at + uow.definition.conversation_timeout > self.clock:
                    continue
                self._back_out(uow)
            else:
                assert to is not None
                self._complete(uow, to)
            self._touch(uow)
            changed.append(uow)
        return changed

    def _drop(self, uow: Uow) -> None:
        del self.uows[uow.id]
        self._touch_id(uow.id)

    def _touch(self, uow: Uow) -> None:
        self._touch_id(uow.id)

    def _touch_id(self, uow_id: str) -> None:
        if self.changed is not None:
            self.changed.add(uow_id)

    # --- what the leader asks -------------------------------------------------------------------

    def next_accepted(self, destination: str, skip: set[str]) -> Uow | None:
        """The oldest ACCEPTED UOW of a queue not in `skip` (being delivered already)."""
        queue = self.queues.get(destination)
        if queue is None:
            return None
        for uow_id in queue.accepted:
            if uow_id not in skip:
                return self.uows[uow_id]
        return None

    def due(self, clock: float) -> dict[OpKind, list[str]]:
        """What the leader should time out at pseudo-clock `clock`: ACCEPTED UOWs past their
        lifetime, DELIVERED ones past their receiver's conversation timeout, complete ones past
        their status lifetime, and remembered ids past theirs."""
        out: dict[OpKind, list[str]] = {}
        for uow in self.uows.values():
            status = uow.status
            if status == UowStatus.ACCEPTED or uow.final:
                if uow.expires_at() <= clock:
                    out.setdefault(OpKind.FORGET if uow.final else OpKind.TIMEOUT, []).append(uow.id)
            elif status == UowStatus.DELIVERED and uow.delivered_at + uow.definition.conversation_timeout <= clock:
                out.setdefault(OpKind.RELEASE, []).append(uow.id)
        gone = [uow_id for uow_id, until in self.gone.items() if until <= clock]
        if gone:
            out.setdefault(OpKind.FORGET, []).extend(gone)
        return out

    def counts(self, store: str) -> tuple[int, int, int, int]:
        """A store's UOWs, those committed and not settled, their messages and bytes."""
        uows = [u for u in self.uows.values() if u.store == store]
        pending = sum(1 for u in uows if u.status in (UowStatus.ACCEPTED, UowStatus.DELIVERED))
        return len(uows), pending, self.store_count.get(store, 0), self.store_bytes.get(store, 0)

    def track_changes(self, initial: set[str] | None = None) -> None:
        """Keep the ids that change from now on (for `take_changes`), starting with `initial`."""
        self.changed = set(initial or ())

    def take_changes(self) -> set[str]:
        """The ids changed since the last call (tracking must be on)."""
        changed = self.changed
        assert changed is not None, "take_changes without track_changes"
        self.changed = set()
        return changed

    # --- snapshots ---------------------------------------------------------------------------

    @staticmethod
    def to_state(uow: Uow) -> rpb.UowState:
        """One UOW as a snapshot record."""
        state = rpb.UowState(
            id=uow.id, definition=uow.definition, status=int(uow.status), message_count=uow.count,
            message_bytes=uow.size, backouts=uow.backouts, user_status=uow.user_status or b"",
            has_user_status=uow.user_status is not None, receiver=uow.receiver, created_at=uow.created_at,
            completed_at=uow.completed_at, delivered_at=uow.delivered_at, order=uow.order,
            dead_lettered_from=uow.dead_lettered_from)
        if uow.messages:
            state.messages.extend(uow.messages)
        return state

    def restore(self, state: rpb.UowState) -> None:
        """Add a UOW from a snapshot record (in order of `order`, or queues are rebuilt)."""
        definition = rpb.UowDefinition()
        definition.CopyFrom(state.definition)
        uow = Uow(id=state.id, definition=definition, status=UowStatus(state.status), created_at=state.created_at,
                  messages=list(state.messages) if definition.persistent and state.status not in FINAL else None,
                  count=state.message_count, size=state.message_bytes, backouts=state.backouts,
                  user_status=state.user_status if state.has_user_status else None, receiver=state.receiver,
                  completed_at=state.completed_at, delivered_at=state.delivered_at, order=state.order,
                  dead_lettered_from=state.dead_lettered_from)
        self.uows[uow.id] = uow
        if uow.status == UowStatus.ACCEPTED:
            self.queues.setdefault(uow.destination, _Queue()).add(uow)
        if uow.status in (UowStatus.ACCEPTED, UowStatus.DELIVERED):
            self.store_count[uow.store] = self.store_count.get(uow.store, 0) + uow.count
            self.store_bytes[uow.store] = self.store_bytes.get(uow.store, 0) + uow.size

    def snapshot_into(self, snap: rpb.StateSnapshot) -> None:
        """Write the table into a state snapshot."""
        snap.clock = self.clock
        snap.uow_order = self.order
        for uow in sorted(self.uows.values(), key=lambda u: u.order):
            snap.uows.append(self.to_state(uow))
        for uow_id, until in self.gone.items():
            snap.uows_gone.append(rpb.UowGone(id=uow_id, until=until))

    @classmethod
    def from_snapshot(cls, snap: rpb.StateSnapshot) -> UowTable:
        """The table a snapshot holds."""
        table = cls()
        table.clock = snap.clock
        table.order = snap.uow_order
        for state in sorted(snap.uows, key=lambda s: s.order):
            table.restore(state)
        table.gone = {g.id: g.until for g in snap.uows_gone}
        return table
