"""A route's Forward stream, against a fake neighbour: what goes on the wire, with which
`previous`, and what is acknowledged on the route durable without being sent."""

from __future__ import annotations

import asyncio

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.routing.forwarder import BACKOFF, Held, Route, _Session, held_of
from strongroom.routing.stats import PeerStats


class FakeLink:
    """The neighbour's end of a Forward stream: batches sent, answers given by the test."""

    def __init__(self) -> None:
        self.batches: list[rpb.ForwardBatch] = []
        self.answers: asyncio.Queue[rpb.ForwardAck | None] = asyncio.Queue()

    async def send(self, batch: bytes | rpb.ForwardBatch) -> None:
        self.batches.append(rpb.ForwardBatch.FromString(batch) if isinstance(batch, bytes) else batch)

    async def receive(self) -> rpb.ForwardAck | None:
        return await self.answers.get()

    def close(self) -> None:
        pass


class FakeSub:
    """The route durable's subscription: the acks it was given."""

    closed = False

    def __init__(self) -> None:
        self.acked: list[int] = []

    async def ack_many(self, seqs: list[int]) -> None:
        self.acked.extend(seqs)


class Everything:
    """A plan that forwards every message to the neighbour."""

    def forwards_to(self, store: str, origin: str, neighbour: str) -> bool:
        return True

    def wanted_beyond(self, store: str, destination: str, origin: str, neighbour: str,
                      message: cpb.Message) -> bool:
        return True


def stored(seq: int) -> Held:
    """A message published at london, as its route durable delivers it (and the route holds it)."""
    return held_of(mpb.Delivery(message_seq=seq, message=cpb.Message(body=f"m{seq}".encode(), producer_id="p",
                                                                      sequence=seq),
                                delivery_count=1, destination="wide.a"), "london", "wide")


def on_wire(batch: rpb.ForwardBatch) -> list[tuple[int, int]]:
    return [(m.origin.sequence, m.origin.previous) for m in batch.messages]


async def test_a_message_delivered_again_after_its_ack_was_lost_is_acknowledged_not_sent() -> None:
    route = Route("london", "rio", "wide", "wide.a", None, None, Everything(), PeerStats("rio", ""))  # type: ignore[arg-type]
    sub = FakeSub()
    route.sub = sub  # type: ignore[assignment]
    link = FakeLink()
    session = _Session(route, link, {"london": 0}, BACKOFF.outage())
    reader = asyncio.create_task(session._read())
    try:
        first = [stored(s) for s in (1, 2, 3)]
        route.held.update((r.seq, r) for r in first)  # as the route reads them
        await session._send(first)
        assert on_wire(link.batches[-1]) == [(1, 0), (2, 1), (3, 2)]
        link.answers.put_nowait(rpb.ForwardAck(batch_id=link.batches[-1].batch_id, stored=3))
        while len(sub.acked) < 3:
            await asyncio.sleep(0.01)
        assert sub.acked == [1, 2, 3] and not route.held
        # The local leader died before it applied the acks of 2 and 3: the new leader delivers
        # them again, then 4. Rio has 2 and 3: they are acknowledged, only 4 goes, after 3.
        again = [stored(s) for s in (2, 3, 4)]
        route.held.update((r.seq, r) for r in again)
        await session._send(again)
        assert len(link.batches) == 2 and on_wire(link.batches[-1]) == [(4, 3)]
        assert sub.acked == [1, 2, 3, 2, 3] and list(route.held) == [4]
        # Counted once: 2 and 3 were forwarded already, they are neither again nor duplicates.
        assert (route.peer.forwarded, route.peer.resent, route.peer.duplicates) == (3, 0, 0)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def answer(session: _Session, link: FakeLink, stored: int) -> None:
    """The neighbour answers the last batch with `stored` stored now; wait until it is read."""
    pending = len(session.in_flight)
    link.answers.put_nowait(rpb.ForwardAck(batch_id=link.batches[-1].batch_id, stored=stored))
    while len(session.in_flight) >= pending:
        await asyncio.sleep(0.01)


async def test_after_a_broken_stream_forwarded_counts_each_stored_message_once() -> None:
    """Batch 1..4 is sent and the stream breaks before its answer, though the neighbour stored
    1 and 2 (its marks on the next stream) and 3 (committed after the marks were read: its
    re-send is answered as a duplicate). Forwarded counts 1..4 once each; 3 and 4 were re-sent;
    nothing is a duplicate of someone else's sending."""
    peer = PeerStats("rio", "")
    route = Route("london", "rio", "wide", "wide.a", None, None, Everything(), peer)  # type: ignore[arg-type]
    route.sub = FakeSub()  # type: ignore[assignment]
    first = FakeLink()
    broken = _Session(route, first, {"london": 0}, BACKOFF.outage())
    held = [stored(s) for s in (1, 2, 3, 4)]
    route.held.update((r.seq, r) for r in held)
    await broken._send(held)
    assert on_wire(first.batches[-1]) == [(1, 0), (2, 1), (3, 2), (4, 3)]
    # The stream broke; the next one starts from the marks the neighbour gives: 2.
    link = FakeLink()
    session = _Session(route, link, {"london": 2}, BACKOFF.outage())
    reader = asyncio.create_task(session._read())
    try:
        await session._send(list(route.held.values()))
        assert on_wire(link.batches[-1]) == [(3, 2), (4, 3)]
        await answer(session, link, stored=1)  # 3 a duplicate (stored by the broken stream), 4 stored now
        assert not route.held and not route.sent
        assert (peer.forwarded, peer.resent, peer.duplicates) == (4, 2, 0)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_what_the_neighbour_held_before_this_router_sent_it_is_a_duplicate_not_forwarded() -> None:
    """A router that has just taken over: the route durable delivers 5..8, whose earlier
    router's acknowledgment was lost. The neighbour's marks hold 5 and 6: duplicates, not sent.
    7 and 8 are sent; 7 is answered as a duplicate (the neighbour's publisher retried it through
    a failover of its leader, whose first attempt stored it): both are this router's forwarding."""
    peer = PeerStats("rio", "")
    route = Route("london", "rio", "wide", "wide.a", None, None, Everything(), peer)  # type: ignore[arg-type]
    route.sub = FakeSub()  # type: ignore[assignment]
    link = FakeLink()
    session = _Session(route, link, {"london": 6}, BACKOFF.outage())
    reader = asyncio.create_task(session._read())
    try:
        held = [stored(s) for s in (5, 6, 7, 8)]
        route.held.update((r.seq, r) for r in held)
        await session._send(held)
        assert on_wire(link.batches[-1]) == [(7, 6), (8, 7)]
        await answer(session, link, stored=1)
        assert (peer.forwarded, peer.resent, peer.duplicates) == (2, 0, 2)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
