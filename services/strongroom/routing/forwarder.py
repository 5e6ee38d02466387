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
3. a message is acknowledged on the route durable only once N answered its batch, or at once
   when N's side does not get it: at or below the mark or what the stream already sent (a
   message delivered again after a local failover lost its ack), an origin whose tree does
   not make N this cluster's child, or nobody beyond N wants it.

On any error the route backs off, opens a new stream, reads the marks again and sends again
everything not acknowledged (held here, in order); the marks make a re-sent message a
duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict, deque
from typing import Protocol

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.client import Client, DurableKind, Received, RetryPolicy, Subscription
from strongroom.client.messages import fill_message
from strongroom.client.retry import Outage
from strongroom.errors import ConnectionFailed, StrongroomError, error_for_reason
from strongroom.routing.interest import route_durable
from strongroom.routing.stats import PeerStats

__all__ = ["BATCH_MESSAGES", "IN_FLIGHT_BATCHES", "ForwardLink", "Links", "Route", "RouteBroken", "RoutePlan"]

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

    async def send(self, batch: rpb.ForwardBatch) -> None: ...

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


def origin_of(received: Received, cluster: str, store: str) -> cpb.Origin:
    """A stored message's origin: its own when it was forwarded here, else this cluster and its
    store sequence."""
    if received.origin is not None:
        return cpb.Origin(cluster=received.origin.cluster, store=received.origin.store,
                          sequence=received.origin.sequence)
    return cpb.Origin(cluster=cluster, store=store, sequence=received.seq)


def as_message(received: Received) -> cpb.Message:
    """The message as a matcher or a Forward batch sees it (body and fields; no id: the origin
    identifies a forwarded message)."""
    message = cpb.Message()
    fill_message(message, received.body, received.fields, "", 0)
    return message


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
        self.held: OrderedDict[int, Received] = OrderedDict()
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
        return min((r.published_at for r in self.held.values() if r.published_at), default=None)

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

    async def _take(self, wait: float) -> list[Received]:
        """The next messages of the route durable (up to a batch), new ones only."""
        assert self.sub is not None
        try:
            got = [await self.sub.next(timeout=wait)]
        except TimeoutError:
            return []
        while len(got) < BATCH_MESSAGES:
            try:
                got.append(await self.sub.next(timeout=0))
            except TimeoutError:
                break
        fresh = []
        for r in got:
            # A reopened subscription (local failover) delivers again what is held already.
            if r.seq not in self.held:
                self.held[r.seq] = r
                fresh.append(r)
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
            if again:
                batch, again = again[:BATCH_MESSAGES], again[BATCH_MESSAGES:]
            else:
                batch = await route._take(1.0)
                if not batch:
                    continue
            await self._send(batch)

    async def _send(self, batch: list[Received]) -> None:
        route = self.route
        out = rpb.ForwardBatch(from_cluster=route.cluster, destination=route.destination)
        sent: list[int] = []
        dropped: list[int] = []
        for r in batch:
            origin = origin_of(r, route.cluster, route.store)
            message = as_message(r)
            # At or below what this stream already put on the wire (the mark at start): the
            # neighbour has it. Not held, so answered: a message delivered again after its ack
            # was lost (a local failover reopens the route durable on the new leader). Sent
            # again, it would name a `previous` above its own sequence.
            if (not route.plan.forwards_to(route.store, origin.cluster, route.neighbour)
                    or origin.sequence <= self.last_sent.get(origin.cluster, 0)
                    or not route.plan.wanted_beyond(route.store, route.destination, origin.cluster,
                                                    route.neighbour, message)):
                dropped.append(r.seq)
                continue
            origin.previous = self.last_sent.get(origin.cluster, 0)
            self.last_sent[origin.cluster] = origin.sequence
            message.origin.CopyFrom(origin)
            out.messages.append(message)
            sent.append(r.seq)
        if dropped:
            for seq in dropped:
                route.held.pop(seq, None)
            assert route.sub is not None
            await route.sub.ack_many(dropped)
        if not sent:
            return
        while len(self.in_flight) >= IN_FLIGHT_BATCHES:
            self.room.clear()
            await self.room.wait()
        out.batch_id = next(self.batch_ids)
        self.in_flight.append((out.batch_id, sent))
        await self.link.send(out)

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
            for seq in seqs:
                route.held.pop(seq, None)
            assert route.sub is not None
            await route.sub.ack_many(seqs)
            route.peer.forwarded += ack.stored
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

