"""What neighbours forward: each batch of a Forward stream published into this cluster with the
client's pipelined publisher (the messages keep their origin), answered in batch order once
every message is committed (or recognised as stored before, by its origin), with the marks.
Each forwarded message goes on as the bytes it came in, with the publisher's id appended
(`Publisher.send_encoded`, `strongroom.wire`): it is not decoded and built again.

An empty batch is answered at once with the marks this cluster holds for its destination
(`Client.origin_marks`). A batch that fails is answered with its error, and so is every later
batch of the stream: the sender reads the marks again and sends again in order on a new stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from google.rpc import code_pb2

from strongroom.api.v1 import router_pb2 as rpb
from strongroom.client import Client, Publisher, PublishResult
from strongroom.errors import InvalidArgument, StrongroomError
from strongroom.routing.stats import PeerStats

__all__ = ["PUBLISH_WINDOW", "Receiver"]

log = logging.getLogger("strongroom.router")

PUBLISH_WINDOW = 2048
"""Messages in flight on one destination's publisher of a Forward stream."""


class Receiver:
    """Stores what neighbours' routers forward to this cluster."""

    def __init__(self, cluster: str, client: Client, store_of: Callable[[str, str], str],
                 peer: Callable[[str], PeerStats | None]) -> None:
        self.cluster = cluster
        self.client = client
        # (from_cluster, destination) -> the routed store, or InvalidArgument when the sender is
        # not a neighbour for it here.
        self.store_of = store_of
        self.peer = peer

    async def forward(self, batches: AsyncIterable[rpb.ForwardBatch]) -> AsyncIterator[rpb.ForwardAck]:
        """One Forward stream: an answer per batch, in batch order."""
        answers: asyncio.Queue[tuple[rpb.ForwardBatch, Any] | None] = asyncio.Queue()
        publishers: dict[str, Publisher] = {}
        reader = asyncio.create_task(self._read(batches, answers, publishers))
        failed: StrongroomError | None = None
        try:
            while True:
                item = await answers.get()
                if item is None:
                    break
                batch, pending = item
                if failed is not None:
                    yield _error(batch.batch_id, failed)
                    continue
                try:
                    ack = await self._answer(batch, pending)
                except Exception as exc:  # noqa: BLE001 - any failure is the batch's error
                    err = exc if isinstance(exc, StrongroomError) else StrongroomError(f"{type(exc).__name__}: {exc}")
                    failed = err
                    log.warning("batch %d from %s for %s refused: %s: %s", batch.batch_id, batch.from_cluster,
                                batch.destination, err.reason, err.message)
                    yield _error(batch.batch_id, err)
                    continue
                yield ack
            await reader
        finally:
            reader.cancel()
            for pub in publishers.values():
                pub.abandon()

    async def _read(self, batches: AsyncIterable[rpb.ForwardBatch],
                    answers: asyncio.Queue[tuple[rpb.ForwardBatch, Any] | None],
                    publishers: dict[str, Publisher]) -> None:
        try:
            async for batch in batches:
                try:
                    store = self.store_of(batch.from_cluster, batch.destination)
                except StrongroomError as err:
                    await answers.put((batch, err))
                    continue
                if not batch.messages:
                    await answers.put((batch, asyncio.ensure_future(self._marks(store, batch.destination))))
                    continue
                pub = publishers.get(batch.destination)
                if pub is None:
                    pub = publishers[batch.destination] = self.client.publisher(
                        batch.destination, window=PUBLISH_WINDOW, confirm=True, resend_refused=False)
                # Per origin: the highest origin sequence of the batch (the marks of its answer).
                highest: dict[str, int] = {}
                encoded: list[bytes] = []
                for m in batch.messages:
                    if not m.HasField("origin"):
                        break
                    origin = m.origin
                    if origin.sequence > highest.get(origin.cluster, 0):
                        highest[origin.cluster] = origin.sequence
                    encoded.append(m.SerializeToString())
                else:
                    await answers.put((batch, (highest, await pub.send_encoded(encoded))))
                    continue
                await answers.put((batch, InvalidArgument(f"a message of batch {batch.batch_id} has no origin")))
        finally:
            await answers.put(None)

    async def _marks(self, store: str, destination: str) -> list[rpb.OriginMark]:
        marks = await self.client.origin_marks(store, destination)
        return [rpb.OriginMark(cluster=m.cluster, destination=m.destination or destination, sequence=m.sequence,
                               stored_at=m.stored_at) for m in marks]

    async def _answer(self, batch: rpb.ForwardBatch, pending: Any) -> rpb.ForwardAck:
        if isinstance(pending, StrongroomError):
            raise pending
        if isinstance(pending, asyncio.Future):
            return rpb.ForwardAck(batch_id=batch.batch_id, marks=await pending)
        highest, outcomes = pending
        results: list[PublishResult | StrongroomError] = await outcomes
        stored = received = 0
        for r in results:
            if isinstance(r, StrongroomError):
                raise r
            if not r.duplicate:
                stored += 1
                received += 1
            elif r.resent:
                # Stored by this router's publisher's first attempt, when a failover of the
                # leader here made it send the message again (a duplicate of its own).
                received += 1
        now = time.time()
        peer = self.peer(batch.from_cluster)
        if peer is not None:
            peer.received += received  # stored through this router
        return rpb.ForwardAck(batch_id=batch.batch_id, stored=stored, marks=[
            rpb.OriginMark(cluster=c, destination=batch.destination, sequence=s, stored_at=now)
            for c, s in sorted(highest.items())])


def _error(batch_id: int, err: StrongroomError) -> rpb.ForwardAck:
    return rpb.ForwardAck(batch_id=batch_id, error_code=getattr(code_pb2, err.code, code_pb2.UNKNOWN),
                          error_reason=err.reason, error_message=err.message)
