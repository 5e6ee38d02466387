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

Publications (EntireX's durable publish and subscribe): a UOW committed to a durable topic is a
publication. Its eligible subscribers are the topic's durable subscriptions applied before its
COMMIT (log order decides "subscribed before it was committed"); each is a reader with its own
state. The publication stays ACCEPTED while any reader has still to receive or settle it:

| reader's state | operation (receiver = the subscriber) | reader's state                  |
|----------------|---------------------------------------|---------------------------------|
| ACCEPTED       | DELIVER                               | DELIVERED                       |
| DELIVERED      | RECEIVER_COMMIT                       | PROCESSED                       |
| DELIVERED      | RECEIVER_BACKOUT, RELEASE             | ACCEPTED, backouts + 1          |
| DELIVERED      | RECEIVER_CANCEL                       | CANCELLED                       |
| any            | UNSUBSCRIBE, EXPIRE_SUBSCRIPTIONS     | gone (the subscription ended)   |

Once no reader has anything left (including at its COMMIT, when the topic had no subscriber),
the publication completes: PROCESSED, or CANCELLED when every reader that settled cancelled.
TIMEOUT (its lifetime ended) and SENDER_CANCEL apply while no reader holds it; DISCARD as for
a UOW. A publication has no backout threshold: a subscriber's backout offers it again to that
subscriber, until its lifetime ends. A subscription is used by SUBSCRIBE (again), DELIVER and
its settlements; one unused for its expiration ends (EXPIRE_SUBSCRIPTIONS, the leader's timer).

The pseudo-clock: `clock` is the highest `clock` of the operations applied (each UowOp and
ClockOp carries the leader's clock). The leader runs it on from the applied value with its own
monotonic time while it serves, so it stands still while the cluster is down or leaderless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.uow.model import (
    FINAL,
    READER_OPS,
    RECEIVER_OPS,
    TRANSITIONS,
    OpKind,
    Reader,
    Refused,
    Subscribed,
    Subscription,
    Uow,
    UowStatus,
)

__all__ = ["UowTable"]


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
        # Durable subscriptions to topics, by (topic, subscriber); and those changed since
        # `take_changes`, for a state on disk.
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self.changed_subscriptions: set[tuple[str, str]] | None = None
        # Called with a queue's name when a UOW becomes ACCEPTED on it (the leader wakes
        # waiting receivers).
        self.on_accepted: Callable[[str], None] | None = None

    # --- applying ----------------------------------------------------------------------------

    def advance(self, clock: float) -> None:
        """The pseudo-clock moves on to `clock` (never back)."""
        self.clock = max(self.clock, clock)

    def apply(self, op: rpb.UowOp, room: Callable[[str, int, int], str]
              ) -> Uow | Refused | list[Uow] | Subscribed | list[Subscription] | int:
        """Apply one UowOp. `room(store, count, bytes)` says why a store cannot take that many
        more messages and bytes ('' when it can). One UOW (or Refused) for operations on one
        UOW; the UOWs changed for the leader's operations on many; `Subscribed` for SUBSCRIBE,
        the publications released for UNSUBSCRIBE, the subscriptions ended for
        EXPIRE_SUBSCRIPTIONS."""
        self.advance(op.clock)
        try:
            kind = OpKind(op.kind)
        except ValueError:
            return Refused("INVALID_ARGUMENT", f"unit-of-work operation of unknown kind {op.kind}")
        if kind in (OpKind.SUBSCRIBE, OpKind.UNSUBSCRIBE, OpKind.EXPIRE_SUBSCRIPTIONS):
            return self._subscription_op(kind, op)
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
        if uow.publication and kind in READER_OPS:
            return self._reader_op(uow, kind, op)
        allowed, _ = TRANSITIONS[kind]
        if kind == OpKind.SENDER_CANCEL and uow.publication and uow.holders():
            return Refused("UOW_STATE", f"publication {uow_id!r} is being received by {', '.join(uow.holders())}; "
                                        f"it can be cancelled while no subscriber holds it")
        if uow.status not in allowed:
            return Refused("UOW_STATE", f"unit of work {uow_id!r} is {uow.status.name}; "
                                        f"{kind.name.lower().replace('_', ' ')} needs "
                                        f"{' or '.join(sorted(s.name for s in allowed))}")
        if kind in RECEIVER_OPS and uow.receiver != op.receiver:
            return Refused("UOW_NOT_HELD", f"unit of work {uow_id!r} is held by receiver {uow.receiver!r}, "
                                           f"not {op.receiver!r}")
        if kind == OpKind.COMMIT:
            why = room(uow.store, op.message_count, op.message_bytes)
            if why:
                return Refused("STORE_LIMIT_EXCEEDED", why)
            self._fill(uow, op)
            self._accept(uow)
            self._publish(uow)
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
            self._publish(uow)
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

    def _publish(self, uow: Uow) -> None:
        """A publication's commit: the topic's subscriptions now are its readers (none: it is
        complete at once)."""
        if not uow.publication:
            return
        topic = uow.destination
        uow.readers = {name: Reader() for (t, name) in sorted(self.subscriptions) if t == topic}
        self._settle_publication(uow)

    def _settle_publication(self, uow: Uow) -> None:
        """A publication none of whose readers has anything left completes."""
        readers = uow.readers or {}
        if uow.status != UowStatus.ACCEPTED or any(r.live for r in readers.values()):
            return
        settled = [r.status for r in readers.values()]
        cancelled = bool(settled) and all(status == UowStatus.CANCELLED for status in settled)
        self._complete(uow, UowStatus.CANCELLED if cancelled else UowStatus.PROCESSED)

    def _reader_op(self, uow: Uow, kind: OpKind, op: rpb.UowOp) -> Uow | Refused:
        """A subscriber receives or settles a publication (see the module's reader table)."""
        name = op.receiver
        if uow.status != UowStatus.ACCEPTED:
            return Refused("UOW_STATE", f"publication {uow.id!r} is {uow.status.name}")
        reader = (uow.readers or {}).get(name)
        if reader is None:
            return Refused("UOW_NOT_HELD", f"subscriber {name!r} is not a subscriber of publication {uow.id!r} "
                                           f"(it subscribed after the publication was committed, or its "
                                           f"subscription ended)")
        need, to = READER_OPS[kind]
        if reader.status != need:
            if need == UowStatus.DELIVERED:
                return Refused("UOW_NOT_HELD", f"subscriber {name!r} does not hold publication {uow.id!r} "
                                               f"(its state for it is {reader.status.name})")
            return Refused("UOW_STATE", f"subscriber {name!r} has publication {uow.id!r} "
                                        f"{reader.status.name}; receiving needs ACCEPTED")
        if to is None:
            reader.status = UowStatus.ACCEPTED
            reader.backouts += 1
            reader.delivered_at = 0.0
            if self.on_accepted is not None:
                self.on_accepted(uow.destination)
        else:
            reader.status = to
            reader.delivered_at = self.clock if to == UowStatus.DELIVERED else 0.0
        subscription = self.subscriptions.get((uow.destination, name))
        if subscription is not None:
            subscription.last_used = self.clock
            self._touch_subscription(subscription.key)
        if op.HasField("user_status"):
            uow.user_status = op.user_status
        self._settle_publication(uow)
        self._touch(uow)
        return uow

    def _subscription_op(self, kind: OpKind, op: rpb.UowOp) -> Subscribed | list[Subscription] | int | Refused:
        if kind == OpKind.EXPIRE_SUBSCRIPTIONS:
            ended = []
            for state in op.subscriptions:
                subscription = self.subscriptions.get((state.topic, state.subscriber))
                if subscription is not None and subscription.expires_at() <= self.clock:
                    self._end(subscription)
                    ended.append(subscription)
            return ended
        if len(op.subscriptions) != 1:
            return Refused("INVALID_ARGUMENT", f"{kind.name} acts on one subscription, not {len(op.subscriptions)}")
        state = op.subscriptions[0]
        key = (state.topic, state.subscriber)
        subscription = self.subscriptions.get(key)
        if kind == OpKind.UNSUBSCRIBE:
            if subscription is None:
                return Refused("NOT_SUBSCRIBED", f"{state.subscriber!r} has no durable subscription to "
                                                 f"{state.topic!r}")
            return self._end(subscription)
        if subscription is not None:
            subscription.last_used = self.clock
            subscription.expiration = state.expiration
            self._touch_subscription(key)
            return Subscribed(subscription, created=False)
        subscription = Subscription(state.store, state.topic, state.subscriber, state.expiration, self.clock,
                                    self.clock)
        self.subscriptions[key] = subscription
        self._touch_subscription(key)
        return Subscribed(subscription, created=True)

    def _end(self, subscription: Subscription) -> int:
        """A subscription ends: it leaves every publication it had still to receive or settle
        (those with no reader left complete). How many it left."""
        del self.subscriptions[subscription.key]
        self._touch_subscription(subscription.key)
        released = 0
        name = subscription.subscriber
        for uow in self.pending_for(subscription.topic, name):
            readers = uow.readers
            assert readers is not None
            del readers[name]
            released += 1
            self._settle_publication(uow)
            self._touch(uow)
        return released

    def pending_for(self, topic: str, subscriber: str) -> list[Uow]:
        """The publications of a topic a subscriber has still to receive or settle, in order."""
        queue = self.queues.get(topic)
        if queue is None:
            return []
        out = []
        for uow_id in queue.accepted:
            uow = self.uows[uow_id]
            reader = (uow.readers or {}).get(subscriber)
            if reader is not None and reader.live:
                out.append(uow)
        return out

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
            if uow.status not in allowed and not (uow.publication and kind == OpKind.RELEASE):
                continue
            if uow.publication and kind in (OpKind.TIMEOUT, OpKind.RELEASE):
                if not self._time_out_publication(uow, kind):
                    continue
            elif kind == OpKind.FORGET:
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

    def _time_out_publication(self, uow: Uow, kind: OpKind) -> bool:
        """TIMEOUT: its lifetime ended and no subscriber holds it. RELEASE: the subscribers whose
        conversation timed out lose it (backed out for them). Whether anything changed."""
        if uow.status != UowStatus.ACCEPTED:
            return False
        if kind == OpKind.TIMEOUT:
            if uow.expires_at() > self.clock or uow.holders():
                return False
            self._complete(uow, UowStatus.TIMEOUT)
            return True
        released = False
        for reader in (uow.readers or {}).values():
            if reader.status == UowStatus.DELIVERED and \
                    reader.delivered_at + uow.definition.conversation_timeout <= self.clock:
                reader.status = UowStatus.ACCEPTED
                reader.backouts += 1
                reader.delivered_at = 0.0
                released = True
        if released and self.on_accepted is not None:
            self.on_accepted(uow.destination)
        return released

    def _drop(self, uow: Uow) -> None:
        del self.uows[uow.id]
        self._touch_id(uow.id)

    def _touch(self, uow: Uow) -> None:
        self._touch_id(uow.id)

    def _touch_id(self, uow_id: str) -> None:
        if self.changed is not None:
            self.changed.add(uow_id)

    def _touch_subscription(self, key: tuple[str, str]) -> None:
        if self.changed_subscriptions is not None:
            self.changed_subscriptions.add(key)

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

    def next_publication(self, topic: str, subscriber: str, skip: set[str]) -> Uow | None:
        """The oldest publication of a topic the subscriber has still to receive, not in `skip`."""
        queue = self.queues.get(topic)
        if queue is None:
            return None
        for uow_id in queue.accepted:
            if uow_id in skip:
                continue
            uow = self.uows[uow_id]
            reader = (uow.readers or {}).get(subscriber)
            if reader is not None and reader.status == UowStatus.ACCEPTED:
                return uow
        return None

    def subscribers(self, topic: str) -> list[Subscription]:
        """A topic's durable subscriptions (every topic: empty name), by topic and name."""
        return [sub for key, sub in sorted(self.subscriptions.items()) if not topic or key[0] == topic]

    def due(self, clock: float) -> dict[OpKind, list[str]]:
        """What the leader should time out at pseudo-clock `clock`: ACCEPTED UOWs past their
        lifetime, DELIVERED ones past their receiver's conversation timeout, complete ones past
        their status lifetime, and remembered ids past theirs."""
        out: dict[OpKind, list[str]] = {}
        for uow in self.uows.values():
            status = uow.status
            if uow.publication and status == UowStatus.ACCEPTED:
                if uow.expires_at() <= clock and not uow.holders():
                    out.setdefault(OpKind.TIMEOUT, []).append(uow.id)
                timeout = uow.definition.conversation_timeout
                if any(r.status == UowStatus.DELIVERED and r.delivered_at + timeout <= clock
                       for r in (uow.readers or {}).values()):
                    out.setdefault(OpKind.RELEASE, []).append(uow.id)
            elif status == UowStatus.ACCEPTED or uow.final:
                if uow.expires_at() <= clock:
                    out.setdefault(OpKind.FORGET if uow.final else OpKind.TIMEOUT, []).append(uow.id)
            elif status == UowStatus.DELIVERED and uow.delivered_at + uow.definition.conversation_timeout <= clock:
                out.setdefault(OpKind.RELEASE, []).append(uow.id)
        gone = [uow_id for uow_id, until in self.gone.items() if until <= clock]
        if gone:
            out.setdefault(OpKind.FORGET, []).extend(gone)
        return out

    def due_subscriptions(self, clock: float) -> list[Subscription]:
        """Subscriptions unused past their expiration at pseudo-clock `clock`."""
        return [sub for sub in self.subscriptions.values() if sub.expires_at() <= clock]

    def counts(self, store: str) -> tuple[int, int, int, int]:
        """A store's UOWs, those committed and not settled, their messages and bytes."""
        uows = [u for u in self.uows.values() if u.store == store]
        pending = sum(1 for u in uows if u.status in (UowStatus.ACCEPTED, UowStatus.DELIVERED))
        return len(uows), pending, self.store_count.get(store, 0), self.store_bytes.get(store, 0)

    def track_changes(self, initial: set[str] | None = None,
                      subscriptions: set[tuple[str, str]] | None = None) -> None:
        """Keep the ids and subscriptions that change from now on (for `take_changes`),
        starting with these."""
        self.changed = set(initial or ())
        self.changed_subscriptions = set(subscriptions or ())

    def take_changes(self) -> tuple[set[str], set[tuple[str, str]]]:
        """The ids and the subscriptions changed since the last call (tracking must be on)."""
        changed, subscriptions = self.changed, self.changed_subscriptions
        assert changed is not None and subscriptions is not None, "take_changes without track_changes"
        self.changed, self.changed_subscriptions = set(), set()
        return changed, subscriptions

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
        for name, reader in (uow.readers or {}).items():
            state.readers.append(rpb.UowReader(subscriber=name, status=int(reader.status), backouts=reader.backouts,
                                               delivered_at=reader.delivered_at))
        return state

    def restore(self, state: rpb.UowState) -> None:
        """Add a UOW from a snapshot record (in order of `order`, or queues are rebuilt)."""
        definition = rpb.UowDefinition()
        definition.CopyFrom(state.definition)
        # Copies (as the definition): a message of the parsed snapshot pins the whole snapshot.
        live = definition.persistent and state.status not in FINAL
        messages = [type(m).FromString(m.SerializeToString()) for m in state.messages] if live else None
        uow = Uow(id=state.id, definition=definition, status=UowStatus(state.status), created_at=state.created_at,
                  messages=messages,
                  count=state.message_count, size=state.message_bytes, backouts=state.backouts,
                  user_status=state.user_status if state.has_user_status else None, receiver=state.receiver,
                  completed_at=state.completed_at, delivered_at=state.delivered_at, order=state.order,
                  dead_lettered_from=state.dead_lettered_from)
        if definition.publication and state.status != UowStatus.RECEIVED:
            uow.readers = {r.subscriber: Reader(UowStatus(r.status), r.backouts, r.delivered_at)
                           for r in state.readers}
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
        for _, subscription in sorted(self.subscriptions.items()):
            snap.uow_subscriptions.append(subscription.to_state())

    @classmethod
    def from_snapshot(cls, snap: rpb.StateSnapshot) -> UowTable:
        """The table a snapshot holds."""
        table = cls()
        table.clock = snap.clock
        table.order = snap.uow_order
        for state in sorted(snap.uows, key=lambda s: s.order):
            table.restore(state)
        table.gone = {g.id: g.until for g in snap.uows_gone}
        for state in snap.uow_subscriptions:
            table.restore_subscription(state)
        return table

    def restore_subscription(self, state: rpb.UowSubscriptionState) -> None:
        """Add a subscription from a snapshot record."""
        subscription = Subscription.from_state(state)
        self.subscriptions[subscription.key] = subscription
