"""Leader-side delivery: subscriptions attached to durables, credit, in-flight and redelivery.

Delivery state is the leader's: what is pending lives in the replicated state machine, what was
handed to which subscriber here. A subscription gone, its in-flight messages go to the durable's
other (or next) subscriber with a higher delivery count; after a failover the new leader
redelivers everything pending, counting on from what the log recorded for durables with a
redelivery limit (`take_counted`). A message past that limit goes to dead-lettering instead; one
whose time-to-live ended is not delivered.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from strongroom import clocks
from strongroom.aio import cancel_and_wait
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.errors import ForeignMessage, InvalidArgument, StrongroomError, UnknownMessage
from strongroom.limits import DELIVERY_BATCH_BYTES
from strongroom.persistence.matcher import Match, key_of
from strongroom.persistence.state import Durable, StateMachine, StoredMessage

__all__ = ["Closed", "Delivered", "Dispatcher", "Opened", "Outgoing", "Refusal", "Subscription"]

_ids = itertools.count(1)
PAGE = 1024  # pending sequences read at a time from a pending set on disk


class Delivered(NamedTuple):
    """One message handed to a subscriber."""

    message_seq: int
    message: cpb.Message
    delivery_count: int  # 1 on the first delivery; more on redeliveries (a subscriber left, a failover)
    destination: str
    published_at: float  # when the leader accepted the message (unix seconds)


@dataclass(frozen=True)
class Opened:
    """The subscription is open (the first thing a subscriber is told)."""

    subscription_id: str
    durable: str
    kind: int
    key_field: str
    ack_sync_mode: int


@dataclass(frozen=True)
class Closed:
    """The leader closed the subscription (`reason`: NOT_LEADER, REPLACED ...)."""

    reason: str
    message: str


class Refusal(NamedTuple):
    """An ack, nak or term of one message that was refused."""

    message_seq: int
    operation: str
    """"ack", "nak" or "term"."""
    error: StrongroomError


Outgoing = Opened | list[Delivered] | Closed | list[Refusal]
"""What a subscription's outbox carries, in order (a list of deliveries or of refusals); None
ends it."""


@dataclass(eq=False)
class Subscription:
    """One open subscribe stream."""

    id: str
    durable_key: str
    kind: int
    client_name: str
    credit: int
    outbox: asyncio.Queue[Outgoing | None] = field(default_factory=asyncio.Queue)
    inflight: set[int] = field(default_factory=set)
    closed: bool = False
    # Last-value: the newest message not yet sent (conflated).
    latest: int = 0
    # Keyed last-value: the slot (key value) this subscriber follows and its own filter.
    slot: str = ""
    match: Match | None = None
    ack_sync_mode: int = 0


@dataclass(eq=False)
class _DurableDelivery:
    """Delivery state of one durable."""

    durable: Durable
    state: StateMachine
    subs: list[Subscription] = field(default_factory=list)
    # Pending messages never handed out, in order, and handed-out ones to hand out again.
    fresh: deque[int] = field(default_factory=deque)
    again: list[int] = field(default_factory=list)
    inflight: dict[int, Subscription] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    # Past the redelivery limit, handed over for dead-lettering: not delivered again.
    parked: set[int] = field(default_factory=set)
    # Acked, the ack not committed yet: not delivered again meanwhile (even if never handed out).
    acking: set[int] = field(default_factory=set)
    rr: int = 0
    # Acks, naks and terms of its subscribers refused by this leader (status).
    refusals: int = 0
    # Indexes on disk: `fresh` is filled in pages read from the pending set after `cursor`
    # (the highest sequence read so far) instead of holding every pending sequence; -1: not paged.
    cursor: int = -1


class Dispatcher:
    """Delivers pending messages of durables to their subscriptions while credit lasts."""

    def __init__(self, id_prefix: str = "", redelivery_limit: Callable[[Durable], int] | None = None,
                 dead_letter: Callable[[Durable, int, int, str], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        # Subscription ids name the member and epoch, so ids never repeat across leaders.
        self._id_prefix = id_prefix
        self._limit_of = redelivery_limit or (lambda durable: 0)
        self._dead_letter = dead_letter
        # The term's pseudo-clock: a message whose time-to-live on it ended is not delivered.
        self._clock = clock or (lambda: 0.0)
        self._durables: dict[str, _DurableDelivery] = {}
        self._subs: dict[str, Subscription] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The store event log: called with (state, durable, stored message, delivery count)
        # for every delivery (set by the term when the event log is on).
        self.on_delivered: Callable[[StateMachine, Durable, StoredMessage, int], None] | None = None
        # Durable expiry: keys of durables whose first subscriber attached or last one went since
        # `take_used`, and a call when one does (the leader writes their use into the log).
        self._used: set[str] = set()
        self.on_use: Callable[[], None] | None = None
        self._counted: dict[str, tuple[StateMachine, dict[int, int]]] = {}  # see take_counted

    def attach(self, state: StateMachine) -> None:
        """Track a state machine's durables; everything pending is (re)delivered."""
        for durable in state.durables.values():
            self._track(durable, state)
        state.on_pending = lambda durable, seq: self._on_pending(state, durable, seq)
        state.on_acked = self.acked
        state.on_reset = lambda durable: self._reset(state, durable)
        state.on_removed = self._removed

    def start(self) -> None:
        """Start the delivery task."""
        self._task = asyncio.create_task(self._run(), name="dispatcher")

    async def stop(self, reason: str, message: str) -> None:
        """Close every subscription (the leader steps down) and stop."""
        for sub in list(self._subs.values()):
            self._close(sub, reason, message)
        if self._task is not None:
            await cancel_and_wait(self._task)

    def _track(self, durable: Durable, state: StateMachine) -> _DurableDelivery:
        dd = self._durables.get(durable.key)
        if dd is None:
            # A previous leader's deliveries, as the log recorded them, count on.
            dd = _DurableDelivery(durable=durable, state=state, counts=dict(durable.delivery_counts))
            if hasattr(durable.pending, "page"):
                dd.cursor = 0
            else:
                dd.fresh.extend(durable.pending)
            self._durables[durable.key] = dd
        return dd

    def _on_pending(self, state: StateMachine, durable: Durable, seq: int) -> None:
        dd = self._track(durable, state)
        if seq == 0:
            return
        if durable.kind == cpb.DURABLE_KIND_LASTVALUE:
            if durable.key_field:
                stored = state.message(seq)
                if stored is None:
                    return
                slot = key_of(stored.message.fields[durable.key_field])
                for sub in dd.subs:
                    if sub.slot == slot and (sub.match is None or sub.match(stored.message)):
                        sub.latest = seq
            else:
                for sub in dd.subs:
                    sub.latest = seq
        elif dd.cursor < 0:
            dd.fresh.append(seq)
        # (Paged: the next page read finds it.)
        self._mark(durable.key)

    def _reset(self, state: StateMachine, durable: Durable) -> None:
        """A durable was repositioned (replay): deliver its pending set afresh, in order."""
        dd = self._track(durable, state)
        for seq, sub in dd.inflight.items():
            sub.inflight.discard(seq)
        dd.inflight.clear()
        dd.again.clear()
        dd.parked.clear()
        dd.counts = dict(durable.delivery_counts)  # a replay cleared them; a resumed durable kept them
        if dd.cursor >= 0:
            # Paged from disk: start over at the beginning of the pending set.
            dd.fresh = deque()
            dd.cursor = 0
        else:
            dd.fresh = deque(durable.pending)
        self._mark(durable.key)

    def _removed(self, durable: Durable, reason: str) -> None:
        """A durable was suspended or deleted: its subscriptions end and nothing of it is
        delivered any more (a resumed durable is tracked afresh by `_reset`)."""
        dd = self._durables.pop(durable.key, None)
        if dd is None:
            return
        what = ("was deleted" if reason == "DURABLE_DELETED"
                else "is unreachable under the realm in force (its destination's rule changed)")
        for sub in list(dd.subs):
            self._close(sub, reason, f"durable {durable.name!r} on {durable.destination!r} {what}")

    def suspend(self, state: StateMachine, reason: str, message: str) -> int:
        """The store `state` keeps cannot be used (the persistent store became unavailable): the
        subscriptions of its durables end with `reason` (their messages in flight go back), and
        the acknowledgments and dead-letterings on their way to the log are forgotten: the term
        backed them out, so those messages are delivered again once the store can be used.
        Returns how many subscriptions ended."""
        ended = 0
        for dd in list(self._durables.values()):
            if dd.state is not state:
                continue
            for sub in list(dd.subs):
                self._close(sub, reason, message)
                ended += 1
            for seq in dd.acking | dd.parked:
                heapq.heappush(dd.again, seq)
            dd.acking.clear()
            dd.parked.clear()
        return ended

    def unpark(self, key: str, seq: int, delay: float) -> None:
        """Offer a parked message again after `delay` seconds: one whose dead-lettering failed
        (still past the limit, so it goes to dead-lettering again, not to a subscriber), or one
        a subscriber gave back with a delay (`nak`)."""
        def again() -> None:
            dd = self._durables.get(key)
            if dd is not None and seq in dd.parked:
                dd.parked.discard(seq)
                heapq.heappush(dd.again, seq)
                self._mark(key)

        asyncio.get_running_loop().call_later(delay, again)

    def _mark(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    # --- subscriptions ----------------------------------------------------------------------

    def open(self, durable: Durable, state: StateMachine, client_name: str, credit: int,
             slot: str = "", match: Match | None = None, ack_sync_mode: int = 0) -> Subscription:
        """Attach a subscription to a durable; a standard durable's previous subscriber is closed.
        A keyed last-value subscriber follows one slot, filtered by its own matcher."""
        dd = self._track(durable, state)
        sub = Subscription(id=f"{self._id_prefix}-sub-{next(_ids)}", durable_key=durable.key, kind=durable.kind,
                           client_name=client_name, credit=credit, slot=slot, match=match,
                           ack_sync_mode=ack_sync_mode)
        if durable.kind == cpb.DURABLE_KIND_STANDARD:
            for old in list(dd.subs):
                self._close(old, "REPLACED", "another subscriber opened the same standard durable")
        if durable.kind == cpb.DURABLE_KIND_LASTVALUE:
            if durable.key_field:
                latest = durable.last_values.get(slot, 0)
                stored = state.message(latest) if latest else None
                sub.latest = latest if stored is not None and (match is None or match(stored.message)) else 0
            else:
                sub.latest = durable.last_value_seq
        if not dd.subs:
            self._use_changed(durable.key)
        dd.subs.append(sub)
        self._subs[sub.id] = sub
        sub.outbox.put_nowait(Opened(subscription_id=sub.id, durable=durable.name, kind=durable.kind,
                                     key_field=durable.key_field, ack_sync_mode=ack_sync_mode))
        self._mark(durable.key)
        return sub

    def grant(self, sub: Subscription, credit: int) -> None:
        """More credit for a subscription."""
        sub.credit += credit
        self._mark(sub.durable_key)

    def close(self, sub: Subscription) -> None:
        """The subscriber went away: its in-flight messages go back for redelivery."""
        self._close(sub, "", "")

    def _close(self, sub: Subscription, reason: str, message: str) -> None:
        if sub.closed:
            return
        sub.closed = True
        self._subs.pop(sub.id, None)
        dd = self._durables.get(sub.durable_key)
        if dd is not None:
            if sub in dd.subs:
                dd.subs.remove(sub)
                if not dd.subs:
                    self._use_changed(sub.durable_key)
            for seq in sub.inflight:
                if dd.inflight.get(seq) is sub:
                    del dd.inflight[seq]
                    heapq.heappush(dd.again, seq)
            self._mark(sub.durable_key)
        sub.inflight.clear()
        if reason:
            sub.outbox.put_nowait(Closed(reason, message))
        sub.outbox.put_nowait(None)

    def _use_changed(self, key: str) -> None:
        self._used.add(key)
        if self.on_use is not None:
            self.on_use()

    def take_used(self) -> set[str]:
        """Keys of the durables whose first subscriber attached or last one went since the last
        call."""
        used, self._used = self._used, set()
        return used

    def subscription(self, sub_id: str) -> Subscription | None:
        """An open subscription by id."""
        return self._subs.get(sub_id)

    def subscribers(self, key: str) -> int:
        """How many subscriptions a durable has."""
        dd = self._durables.get(key)
        return len(dd.subs) if dd else 0

    def ack_sync_mode(self, key: str) -> int:
        """The acknowledgment mode of a durable's newest open subscription (0: none open)."""
        dd = self._durables.get(key)
        return dd.subs[-1].ack_sync_mode if dd and dd.subs else 0

    def unacked(self, key: str) -> int:
        """How many of a durable's messages are delivered and not yet acknowledged."""
        dd = self._durables.get(key)
        return len(dd.inflight) if dd else 0

    def check_ack(self, durable: Durable, seqs: list[int], sub_id: str) -> None:
        """Reject an acknowledgment of a message the durable does not hold or another
        subscription holds in flight, whole (the unary Ack). Nothing changes when this raises."""
        self._settle_check(durable, seqs, "acknowledgment")
        for seq in seqs:
            why = self._refusal(durable, seq, sub_id)
            if why is not None:
                raise why

    def split_ack(self, durable: Durable, seqs: list[int],
                  sub_id: str) -> tuple[list[int], list[tuple[int, StrongroomError]]]:
        """An acknowledgment on a subscription's stream, each message on its own: the ones it
        may acknowledge, and the ones refused with why (`check_ack`'s reasons). Nothing
        changes here."""
        self._settle_check(durable, seqs, "acknowledgment")
        valid: list[int] = []
        refused: list[tuple[int, StrongroomError]] = []
        for seq in seqs:
            why = self._refusal(durable, seq, sub_id)
            if why is None:
                valid.append(seq)
            else:
                refused.append((seq, why))
        return valid, refused

    def refused(self, sub: Subscription, operation: str, refusals: list[tuple[int, StrongroomError]]) -> None:
        """Tell a subscriber which of its acks, naks or terms were refused, and count them."""
        if not refusals or sub.closed:
            return
        dd = self._durables.get(sub.durable_key)
        if dd is not None:
            dd.refusals += len(refusals)
        sub.outbox.put_nowait([Refusal(seq, operation, err) for seq, err in refusals])

    def refusals(self, key: str) -> int:
        """How many acks, naks and terms of a durable's subscribers were refused (this leader)."""
        dd = self._durables.get(key)
        return dd.refusals if dd else 0

    def _settle_check(self, durable: Durable, seqs: list[int], what: str) -> None:
        if durable.kind == cpb.DURABLE_KIND_LASTVALUE:
            raise InvalidArgument(f"durable {durable.name!r} is last-value: its messages are not acknowledged")
        if not seqs:
            raise InvalidArgument(f"{what} names no message")

    def _refusal(self, durable: Durable, seq: int, sub_id: str) -> StrongroomError | None:
        """Why subscription `sub_id` may not give back or terminate message `seq`, or None."""
        if seq not in durable.pending:
            return UnknownMessage(f"message {seq} is not pending on durable {durable.name or durable.destination!r}")
        dd = self._durables.get(durable.key)
        holder = dd.inflight.get(seq) if dd else None
        if holder is not None and sub_id and holder.id != sub_id:
            return ForeignMessage(f"message {seq} was delivered to another subscription of this durable")
        return None

    def _settle(self, durable: Durable, state: StateMachine, seqs: list[int], sub_id: str,
                settle: Callable[[_DurableDelivery, int], None]) -> list[tuple[int, StrongroomError]]:
        """Take back each message `sub_id` may settle and `settle` it; the others are refused,
        with why (each message on its own)."""
        dd = self._track(durable, state)
        refused: list[tuple[int, StrongroomError]] = []
        for seq in seqs:
            why = self._refusal(durable, seq, sub_id)
            if why is not None:
                refused.append((seq, why))
                continue
            holder = dd.inflight.pop(seq, None)
            if holder is not None:
                holder.inflight.discard(seq)
            settle(dd, seq)
        self._mark(durable.key)
        return refused

    def nak(self, durable: Durable, state: StateMachine, seqs: list[int], sub_id: str,
            delay: float) -> list[tuple[int, StrongroomError]]:
        """A subscriber gives messages back: each is delivered again (to it or another
        subscriber of the durable), at once or after `delay` seconds; the redelivery counts
        toward the redelivery limit. Returns the messages refused, with why."""
        self._settle_check(durable, seqs, "negative acknowledgment")
        if not (math.isfinite(delay) and delay >= 0):
            raise InvalidArgument(f"nak delay {delay} is not a number of seconds >= 0")

        def give_back(dd: _DurableDelivery, seq: int) -> None:
            if delay > 0:
                dd.parked.add(seq)
                self.unpark(durable.key, seq, delay)
            else:
                heapq.heappush(dd.again, seq)

        return self._settle(durable, state, seqs, sub_id, give_back)

    def terminate(self, durable: Durable, state: StateMachine, seqs: list[int],
                  sub_id: str) -> list[tuple[int, StrongroomError]]:
        """A subscriber says these messages must never be delivered again: each leaves the
        durable the way a message past its redelivery limit does (dead-lettered, or dropped when
        its destination names no dead-letter destination). Returns the messages refused, with
        why."""
        self._settle_check(durable, seqs, "termination")
        dead_letter = self._dead_letter
        if dead_letter is None:
            raise InvalidArgument("this member does not terminate messages")

        def end(dd: _DurableDelivery, seq: int) -> None:
            dd.parked.add(seq)
            dead_letter(durable, seq, dd.counts.get(seq, 0), "was terminated by its subscriber")

        return self._settle(durable, state, seqs, sub_id, end)

    def take_counted(self) -> dict[str, tuple[StateMachine, dict[int, int]]]:
        """Per durable with a redelivery limit: (its state, seq -> deliveries) since the last call."""
        counted, self._counted = self._counted, {}
        return counted

    def acking(self, durable: Durable, state: StateMachine, seqs: list[int]) -> None:
        """Acknowledgments accepted and on their way to the log: hold these messages back until
        they commit (`acked`). If they never do, this leadership (and this dispatcher) ends."""
        self._track(durable, state).acking.update(seqs)

    def acked(self, durable_key: str, seqs: list[int]) -> None:
        """Committed acknowledgments: forget their delivery state."""
        dd = self._durables.get(durable_key)
        if dd is None:
            return
        for seq in seqs:
            holder = dd.inflight.pop(seq, None)
            if holder is not None:
                holder.inflight.discard(seq)
            dd.counts.pop(seq, None)
            dd.parked.discard(seq)
            dd.acking.discard(seq)

    # --- delivery ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            for key in dirty:
                dd = self._durables.get(key)
                if dd is not None and dd.subs:
                    self._deliver(dd)
            # Let other tasks (publishers, acks) run between delivery passes.
            await asyncio.sleep(0)

    def _deliver(self, dd: _DurableDelivery) -> None:
        durable = dd.durable
        state = dd.state
        if durable.kind == cpb.DURABLE_KIND_LASTVALUE:
            for sub in dd.subs:
                if sub.latest and sub.credit > 0:
                    stored = state.message(sub.latest)
                    if stored is not None and not stored.ttl_ended(clocks.wall(), self._clock()):
                        sub.credit -= 1
                        state.tallies.deliveries[(durable.store, durable.destination, durable.name)] += 1
                        if self.on_delivered is not None:
                            self.on_delivered(state, durable, stored, 1)
                        sub.outbox.put_nowait([Delivered(stored.seq, stored.message, 1, stored.destination,
                                                         stored.published_at)])
                    sub.latest = 0
            return
        batches: dict[str, list[list[Delivered]]] = {}  # per subscription, each within DELIVERY_BATCH_BYTES
        sizes: dict[str, int] = {}  # of each subscription's last batch
        limit = self._limit_of(durable) if self._dead_letter is not None else 0
        now = clocks.wall()
        clock = self._clock()
        delivered = redelivered = 0
        counted: dict[int, int] | None = None  # this durable's in `_counted`, found once a pass
        tracer = state.tallies.tracer
        while True:
            sub = self._next_with_credit(dd)
            if sub is None:
                break
            seq = self._next_seq(dd)
            if seq is None:
                break
            stored = state.message(seq)
            if stored is None:
                continue
            if (stored.expires_at or stored.expires_clock) and stored.ttl_ended(now, clock):
                # Expired: the leader's expiry round removes it from every durable.
                continue
            count = dd.counts.get(seq, 0) + 1
            if limit and count > limit:
                dd.parked.add(seq)
                assert self._dead_letter is not None
                self._dead_letter(durable, seq, count - 1, f"reached {count - 1} deliveries")
                continue
            dd.counts[seq] = count
            if limit:
                counted = counted if counted is not None else self._counted.setdefault(durable.key, (state, {}))[1]
                counted[seq] = count
            delivered += 1
            if count > 1:
                redelivered += 1
            if tracer is not None:
                tracer.step("delivered", durable.store, seq, f"to subscription {sub.id} of durable "
                            f"{durable.name or '(the queue)'}, delivery {count}")
            if self.on_delivered is not None:
                self.on_delivered(state, durable, stored, count)
            dd.inflight[seq] = sub
            sub.inflight.add(seq)
            sub.credit -= 1
            out, size = batches.setdefault(sub.id, [[]]), sizes.get(sub.id, 0) + stored.size
            if out[-1] and size > DELIVERY_BATCH_BYTES:  # the next batch
                out.append([])
            sizes[sub.id] = size if len(out[-1]) else stored.size
            out[-1].append(Delivered(seq, stored.message, count, stored.destination, stored.published_at))
        if delivered:
            ident = (durable.store, durable.destination, durable.name)
            state.tallies.deliveries[ident] += delivered
            if redelivered:
                state.tallies.redeliveries[ident] += redelivered
        for sub in dd.subs:
            for items in batches.get(sub.id, ()):
                sub.outbox.put_nowait(items)

    def _next_with_credit(self, dd: _DurableDelivery) -> Subscription | None:
        n = len(dd.subs)
        for i in range(n):
            sub = dd.subs[(dd.rr + i) % n]
            if sub.credit > 0:
                # Shared durables rotate so each message goes to exactly one, spread evenly.
                dd.rr = (dd.rr + i + 1) % n
                return sub
        return None

    def _next_seq(self, dd: _DurableDelivery) -> int | None:
        pending = dd.durable.pending
        held = dd.acking
        while dd.again:
            seq = heapq.heappop(dd.again)
            if seq in pending and seq not in dd.inflight and seq not in dd.parked and seq not in held:
                return seq
        while True:
            while dd.fresh:
                seq = dd.fresh.popleft()
                if seq in pending and seq not in dd.inflight and seq not in dd.parked and seq not in held:
                    return seq
            if dd.cursor < 0:
                return None
            page: list[int] = pending.page(dd.cursor, PAGE)  # type: ignore[attr-defined]
            if not page:
                return None
            dd.cursor = page[-1]
            dd.fresh.extend(page)
