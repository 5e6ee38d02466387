"""A route's Forward stream, against a fake neighbour: what goes on the wire, with which
`previous`, and what is acknowledged on the route durable without being sent."""

from __future__ import annotations

import asyncio

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import router_pb2 as rpb
from strongroom.client import Received
from strongroom.routing.forwarder import BACKOFF, Route, _Session
from strongroom.routing.stats import PeerStats


class FakeLink:
    """The neighbour's end of a Forward stream: batches sent, answers given by the test."""

    def __init__(self) -> None:
        self.batches: list[rpb.ForwardBatch] = []
        self.answers: asyncio.Queue[rpb.ForwardAck | None] = asyncio.Queue()

    async def send(self, batch: rpb.ForwardBatch) -> None:
        self.batches.append(batch)

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


def stored(seq: int) -> Received:
    """A message published at london, as its route durable delivers it."""
    return Received(seq=seq, body=f"m{seq}".encode(), fields={}, delivery_count=1, destination="wide.a",
                    producer_id="p", sequence=seq)


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
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
