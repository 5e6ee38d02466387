"""Which protocol the client's `UowSender` speaks, against in-process grpc.aio servers: to a member
that serves `SendBatchStream`, everything queued goes as one `UowSendBatch`; to a member of an
older version, which has no such method (gRPC answers UNIMPLEMENTED), the same UOWs go on
`SendStream`, one per stream message, and each is answered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from strongroom.api.v1 import uow_pb2 as upb
from strongroom.client import Client
from strongroom.channels import add_port

SERVICE = "strongroom.v1.UowService"


def accepted(req: upb.UowSendRequest) -> upb.UowSendResponse:
    """What a leader answers to a whole UOW it committed."""
    return upb.UowSendResponse(correlation_id=req.correlation_id, uow_id=req.uow_id, status=upb.UOW_STATUS_ACCEPTED,
                               messages=len(req.messages), log_index=7)


class Member:
    """A UowService with only the methods given (what a member of some version serves); each
    stream message it got, as the list of requests it carried."""

    def __init__(self, batches: bool) -> None:
        self.batches = batches
        self.received: list[list[upb.UowSendRequest]] = []
        handlers = {"SendStream": self._handler(self.send_stream, upb.UowSendRequest)}
        if batches:
            handlers["SendBatchStream"] = self._handler(self.send_batch_stream, upb.UowSendBatch)
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self.address = f"127.0.0.1:{add_port(self.server, '127.0.0.1:0')}"

    @staticmethod
    def _handler(method: Callable[..., AsyncIterator[object]], request: Any) -> grpc.RpcMethodHandler:
        return grpc.stream_stream_rpc_method_handler(method, request_deserializer=request.FromString,
                                                     response_serializer=lambda m: m.SerializeToString())

    async def send_stream(self, requests: AsyncIterator[upb.UowSendRequest],
                          context: object) -> AsyncIterator[upb.UowSendResponse]:
        async for req in requests:
            self.received.append([req])
            yield accepted(req)

    async def send_batch_stream(self, batches: AsyncIterator[upb.UowSendBatch],
                                context: object) -> AsyncIterator[upb.UowSendResponseBatch]:
        async for batch in batches:
            self.received.append(list(batch.requests))
            yield upb.UowSendResponseBatch(responses=[accepted(req) for req in batch.requests])


@pytest.fixture(params=[True, False], ids=["batches", "older member"])
async def member(request: pytest.FixtureRequest) -> AsyncIterator[Member]:
    m = Member(batches=request.param)
    await m.server.start()
    try:
        yield m
    finally:
        await m.server.stop(None)


async def test_uows_queued_together_go_in_one_batch_or_one_by_one_to_an_older_member(member: Member) -> None:
    async with Client([member.address], timeout=5) as client:
        sender = client.uow_sender("orders.queue", window=64)
        # Queued before the sender's stream writes anything: one batch, where batches are served.
        futs = [await sender.send([b"a", b"b"], uow_id=f"u{i}") for i in range(20)]
        results = [await f for f in futs]
        later = await (await sender.send([b"c"], uow_id="u20"))
        await sender.close()
        # A whole UnitOfWork's commit goes on the client's shared sender, the same way.
        uow = client.unit_of_work("orders.queue", uow_id="w1")
        uow.add(b"x")
        whole = await uow.commit()
    assert [(r.uow_id, r.status, r.messages, r.log_index) for r in results] == \
        [(f"u{i}", "ACCEPTED", 2, 7) for i in range(20)]
    assert (later.uow_id, later.status, later.messages) == ("u20", "ACCEPTED", 1)
    assert (whole.uow_id, whole.status, whole.messages) == ("w1", "ACCEPTED", 1)
    # The refused SendBatchStream call did not count as a stream of its own (no failover).
    assert sender.streams == 1
    sent = [req.uow_id for requests in member.received for req in requests]
    assert sent == [*(f"u{i}" for i in range(21)), "w1"]  # each once, in order
    sizes = [len(requests) for requests in member.received]
    assert sizes == ([20, 1, 1] if member.batches else [1] * 22)
