"""Routes: what waits in this cluster to be forwarded to one neighbour, and the stream that
forwards it.

A route is one neighbour N and one destination. Its messages wait on the standard durable
`sr.route.<N>` of that destination in this cluster; the route reads them with the Python client
(credit, acks; leader finding and failover are the client's) and sends them to N's router on a
Forward stream:

1. the stream's first batch is empty; its answer gives the marks N holds for the destination;
2. then batches of messages, several in flight, each message with its origin (kept from the
   stored message, else this cluster and its store sequence) and `previous`: the origin
   sequence of the last message of that origin this route put on the wire (the mark at start);
   a message is taken from the subscription as delivered (`Subscription.next_batch`), encoded
   once without its id and origin, and joined with its origin into the batch's bytes
   (`strongroom.wire`);
3. a message is acknowledged on the route durable only once N answered its batch, or at once
   when N's side does not get it: at or below the mark or what the stream already sent (a
   message delivered again after a local failover lost its ack), an origin whose tree does
   not make N this cluster's child, or nobody beyond N wants it.

On any error the route backs off, opens a new stream, reads the marks again and sends again
everything not acknowledged (held here, in order); the marks make a re-sent message a
duplicate.

What the neighbour's `PeerStats` counts, so the counters add up after failures: a message is
`forwarded` once, when N holds it through this router: its batch answered (stored now, or a
duplicate of this router's own sending: a re-send whose first stream broke before its answer,
or N's publisher retrying it through a failover of N's leader), or, sent on a stream that broke
before the answer, found at or below N's marks at the next stream's start. Every re-send is
`resent`. A message at or below the marks at a stream's start that this router never sent is a
`duplicate`: N held it before this router came to it (an earlier replica or run sent it, and
its acknowledgment on the route durable was lost). A message the route durable delivers again
after this router counted it (its acknowledgment lost in a local failover) is not counted again.
A message above the marks at a stream's start can only have been stored since by this router's
own sending (or by a stale replica, which the gap rule keeps in order), so every answered
message counts as forwarded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict, deque
from typing import NamedTuple, Protocol

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.client import Client, DurableKind, RetryPolicy, Subscription
from strongroom.client.retry import Outage
from strongroom.errors import ConnectionFailed, StrongroomError, error_for_reason
from strongroom.routing.interest import route_durable
from strongroom.routing.stats import PeerStats
from strongroom.wire import forwarded_message, origin_head

__all__ = ["BATCH_MESSAGES", "IN_FLIGHT_BATCHES", "ForwardLink", "Held", "Links", "Route", "RouteBroken", "RoutePlan",
           "held_of"]

log = logging.getLogger("strongroom.router")

BATCH_MESSAGES = 256
"""Most messages in one ForwardBatch."""
IN_FLIGHT_BATCHES = 4
"""Batches sent and not yet answered on one stream."""
CREDIT = 1024
"""The route durable's subscription credit: messages the leader may deliver ahead."""
BACKOFF = RetryPolicy(timeout=math.inf, initial_delay=0.2, max_delay=3.0)
"""Waits between a route's attempts while its neighbour or this cluster fails (never gives up)."""


class RouteBroken(StrongroomError):
    """The neighbour refused a batch (its answer's error) or answered out of order."""

    retriable = True


class ForwardLink(Protocol):
    """One Forward stream to a neighbour's router."""

    async def send(self, batch: bytes | rpb.ForwardBatch) -> None:
        """Write a batch (encoded, or the message)."""
        ...

    async def receive(self) -> rpb.ForwardAck | None:
        """The next answer (None: the stream ended)."""
        ...

    def close(self) -> None: ...


class Links(Protocol):
    """The router-to-router calls (`strongroom.routing.transport`)."""

    async def open_forward(self, neighbour: str) -> ForwardLink: ...

    async def exchange(self, neighbour: str, request: rpb.InterestExchange) -> rpb.InterestExchange: ...


class RoutePlan(Protocol):
    """What a route asks the router about a message."""

    def forwards_to(self, store: str, origin: str, neighbour: str) -> bool:
        """This cluster passes origin's messages of `store` to `neighbour`."""
        ...

    def wanted_beyond(self, store: str, destination: str, origin: str, neighbour: str,
                      message: cpb.Message) -> bool:
        """Some cluster reached through `neighbour` for origin's messages wants this one."""
        ...


class Held(NamedTuple):
    """A message the route durable delivered, held until the route acknowledges it."""

    seq: int
    """Its sequence in the route durable's store here."""
    published_at: float
    """Unix seconds it was stored here."""
    origin: str
    """The cluster it was first published at (this one, or the origin it was forwarded with)."""
    origin_store: str
    origin_seq: int
    """Its sequence at the origin (its own sequence here when published here)."""
    message: cpb.Message
    """Body and fields, without id or origin: what matchers see and what is forwarded."""


def held_of(delivery: mpb.Delivery, cluster: str, store: str) -> Held:
    """A delivered message of the route durable, as the route holds it (its message's id and
    origin cleared: the origin is in `Held`, the id does not travel; the origin identifies a
    forwarded message)."""
    m = delivery.message
    if m.HasField("origin"):
        o = m.origin
        held = Held(delivery.message_seq, delivery.published_at, o.cluster, o.store, o.sequence, m)
        m.ClearField("origin")
    else:
        held = Held(delivery.message_seq, delivery.published_at, cluster, store, delivery.message_seq, m)
    m.ClearField("producer_id")
    m.ClearField("sequence")
    return held


class Route:
    """One neighbour and destination: the route durable read and forwarded, until stopped."""

    def __init__(self, cluster: str, neighbour: str, store: str, destination: str, client: Client,
                 links: Links, plan: RoutePlan, peer: PeerStats) -> None:
        self.cluster = cluster
        self.neighbour = neighbour
        self.store = store
        self.destination = destination
        self.client = client
        self.links = links
        self.plan = plan
        self.peer = peer
        self.durable = route_durable(neighbour)
        # Delivered by the route durable and not yet acknowledged, in delivery order: sent again
        # from the first on every new stream.
        self.held: OrderedDict[int, Held] = OrderedDict()
        # Held messages this router put on a stream (sent again, they are re-sends).
        self.sent: set[int] = set()
        # The highest route durable sequence whose outcome this router counted: delivered again
        # (a lost acknowledgment), a message at or below it is not counted twice.
        self.counted_through = 0
        self.sub: Subscription | None = None
        self.connected = False
        self.last_error = ""
        self.last_progress = time.time()
        self._task: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(neighbour, destination)."""
        return self.neighbour, self.destination

    def oldest_waiting_at(self) -> float | None:
        """Publish time (here) of the oldest message this route holds unconfirmed (None: it
        holds none it has read)."""
        return min((h.published_at for h in self.held.values() if h.published_at), default=None)

    def count_held(self, seq: int) -> None:
        """Count a held message the neighbour holds already (at or below its marks): forwarded
        when this router sent it before (that send stored it), else a duplicate; nothing when
        this router counted it before (the route durable delivered it again)."""
        if seq in self.sent:
            self.peer.forwarded += 1
        elif seq > self.counted_through:
            self.peer.duplicates += 1
        self.counted_through = max(self.counted_through, seq)

    def count_batch(self, seqs: list[int]) -> None:
        """Count an answered batch: each message is at the neighbour through this router (its
        messages were above the marks at the stream's start: stored now, or answered as a
        duplicate of this router's own earlier sending)."""
        self.peer.forwarded += len(seqs)
        self.counted_through = max(self.counted_through, *seqs)

    def start(self) -> None:
        """Run the route in a task of its own."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"route {self.neighbour} {self.destination}")

    async def stop(self, delete: bool = False) -> None:
        """Stop forwarding; with `delete`, delete the route durable (nobody beyond the neighbour
        wants its destination any more: what it held only for the route is released)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.sub is not None:
            await self.sub.close()
            self.sub = None
        if delete:
            try:
                _, released = await self.client.delete_durable(self.destination, self.durable)
                log.info("route to %s for %s deleted (%d waiting messages released)", self.neighbour,
                         self.destination, released)
            except StrongroomError as err:
                log.warning("cannot delete route durable %s on %s: %s", self.durable, self.destination, err)

    async def _run(self) -> None:
        outage = BACKOFF.outage()
        while True:
            try:
                await self._session(outage)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: back off, resume from the marks
                self.connected = False
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.peer.failed(self.last_error)
                log.warning("route to %s for %s: %s", self.neighbour, self.destination, self.last_error)
                if self.sub is not None and self.sub.closed:
                    self.sub = None
            delay = outage.next_delay() or BACKOFF.max_delay
            await self._read_ahead(delay)

    async def _read_ahead(self, seconds: float) -> None:
        """Wait `seconds`; meanwhile read what waits (held, not sent) so the status can say how
        old the oldest waiting message is."""
        deadline = time.monotonic() + seconds
        try:
            if self.sub is None:
                await self._open()
            while self.sub is not None and not self.held and time.monotonic() < deadline:
                await self._take(min(0.2, max(0.0, deadline - time.monotonic())))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next session tells
            log.debug("route to %s for %s: reading ahead: %s", self.neighbour, self.destination, exc)
        left = deadline - time.monotonic()
        if left > 0:
            await asyncio.sleep(left)

    async def _open(self) -> None:
        self.sub = await self.client.subscribe(self.destination, self.durable, kind=DurableKind.STANDARD,
                                               credit=CREDIT, sync_ack=False)

    async def _take(self, wait: float) -> list[Held]:
        """The next messages of the route durable (up to a batch), new ones only."""
        assert self.sub is not None
        try:
            got = await self.sub.next_batch(BATCH_MESSAGES, timeout=wait)
        except TimeoutError:
            return []
        fresh = []
        held = self.held
        for d in got:
            # A reopened subscription (local failover) delivers again what is held already.
            if d.message_seq not in held:
                h = held[d.message_seq] = held_of(d, self.cluster, self.store)
                fresh.append(h)
        return fresh

    async def _session(self, outage: Outage) -> None:
        if self.sub is None or self.sub.closed:
            await self._open()
        link = await self.links.open_forward(self.neighbour)
        try:
            await link.send(rpb.ForwardBatch(batch_id=1, from_cluster=self.cluster, destination=self.destination))
            first = await link.receive()
            if first is None:
                raise ConnectionFailed(f"the Forward stream to {self.neighbour} ended before its first answer")
            _check(first, self.neighbour)
            marks = {m.cluster: m.sequence for m in first.marks if m.destination in ("", self.destination)}
            for origin, seq in marks.items():
                self.peer.mark(origin, self.destination, seq)
            self.connected = True
            self.last_error = ""
            session = _Session(self, link, marks, outage)
            await session.run()
        finally:
            link.close()


class _Session:
    """One Forward stream of a route: a writer sending batches, a reader taking the answers in
    order; whichever fails ends both."""

    def __init__(self, route: Route, link: ForwardLink, marks: dict[str, int], outage: Outage) -> None:
        self.route = route
        self.link = link
        # Per origin: the origin sequence of the last message put on the wire (the mark at start).
        self.last_sent = dict(marks)
        # Batches on the wire, in order: (batch id, the route durable sequences it carries).
        self.in_flight: deque[tuple[int, list[int]]] = deque()
        self.room = asyncio.Event()
        self.outage = outage
        self.batch_ids = iter(range(2, 2 ** 63))
        # Per (origin cluster, store): its encoded Origin's first fields (`wire.origin_head`).
        self.origin_heads: dict[tuple[str, str], bytes] = {}

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._write())
                group.create_task(self._read())
        except* Exception as failures:  # noqa: BLE001 - the first failure ends the session
            raise failures.exceptions[0] from None

    async def _write(self) -> None:
        route = self.route
        # What was read before (unconfirmed on an earlier stream) goes first, in order.
        again = list(route.held.values())
        while True:
            # Room first: while the batches in flight are answered, what the route durable
            # delivers meanwhile gathers into the next batch.
            await self._room()
            if again:
                batch, again = again[:BATCH_MESSAGES], again[BATCH_MESSAGES:]
            else:
                batch = await route._take(1.0)
                if not batch:
                    continue
            await self._send(batch)

    async def _room(self) -> None:
        """Wait until fewer than IN_FLIGHT_BATCHES batches are unanswered."""
        while len(self.in_flight) >= IN_FLIGHT_BATCHES:
            self.room.clear()
            await self.room.wait()

    async def _send(self, batch: list[Held]) -> None:
        route = self.route
        plan, store, destination, neighbour = route.plan, route.store, route.destination, route.neighbour
        last_sent, held_sent = self.last_sent, route.sent
        # The batch's bytes: parts[0] is its head, set once its id is known.
        parts: list[bytes] = [b""]
        sent: list[int] = []
        resent = 0
        dropped: list[int] = []
        passes: dict[str, bool] = {}  # per origin: this cluster passes its messages to the neighbour
        for h in batch:
            origin = h.origin
            passing = passes.get(origin)
            if passing is None:
                passing = passes[origin] = plan.forwards_to(store, origin, neighbour)
            if not passing:
                dropped.append(h.seq)
                continue
            # At or below what this stream already put on the wire (the mark at start): the
            # neighbour has it. Not held, so answered: a message delivered again after its ack
            # was lost (a local failover reopens the route durable on the new leader). Sent
            # again, it would name a `previous` above its own sequence.
            previous = last_sent.get(origin, 0)
            if h.origin_seq <= previous:
                route.count_held(h.seq)
                dropped.append(h.seq)
                continue
            if not plan.wanted_beyond(store, destination, origin, neighbour, h.message):
                dropped.append(h.seq)
                continue
            last_sent[origin] = h.origin_seq
            parts += forwarded_message(h.message.SerializeToString(), self._origin_head(h), h.origin_seq, previous)
            sent.append(h.seq)
            if h.seq in held_sent:
                resent += 1
            held_sent.add(h.seq)
        if dropped:
            for seq in dropped:
                route.held.pop(seq, None)
                held_sent.discard(seq)
            assert route.sub is not None
            await route.sub.ack_many(dropped)
        if not sent:
            return
        route.peer.resent += resent
        await self._room()
        batch_id = next(self.batch_ids)
        parts[0] = rpb.ForwardBatch(batch_id=batch_id, from_cluster=route.cluster,
                                    destination=destination).SerializeToString()
        self.in_flight.append((batch_id, sent))
        await self.link.send(b"".join(parts))

    def _origin_head(self, h: Held) -> bytes:
        head = self.origin_heads.get((h.origin, h.origin_store))
        if head is None:
            head = self.origin_heads[(h.origin, h.origin_store)] = origin_head(h.origin, h.origin_store)
        return head

    async def _read(self) -> None:
        route = self.route
        while True:
            ack = await self.link.receive()
            if ack is None:
                raise ConnectionFailed(f"the Forward stream to {route.neighbour} ended")
            if not self.in_flight or ack.batch_id != self.in_flight[0][0]:
                raise RouteBroken(f"{route.neighbour} answered batch {ack.batch_id} out of order")
            _, seqs = self.in_flight.popleft()
            self.room.set()
            _check(ack, route.neighbour)
            route.count_batch(seqs)
            for seq in seqs:
                route.held.pop(seq, None)
                route.sent.discard(seq)
            assert route.sub is not None
            await route.sub.ack_many(seqs)
            route.last_progress = time.time()
            for m in ack.marks:
                route.peer.mark(m.cluster, m.destination or route.destination, m.sequence, m.stored_at)
            self.outage.progress()


def _check(ack: rpb.ForwardAck, neighbour: str) -> None:
    """Raise the error a batch's answer carries."""
    if ack.error_code or ack.error_reason:
        err = error_for_reason(ack.error_reason, ack.error_message) if ack.error_reason else None
        text = f"{neighbour} refused batch {ack.batch_id}: {ack.error_reason or ack.error_code}: {ack.error_message}"
        raise RouteBroken(text, {"reason": ack.error_reason}) from err

