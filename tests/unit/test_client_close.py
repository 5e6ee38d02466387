"""`Subscription.close` and the acknowledgments written just before it, against a real gRPC
server on loopback (TLS of the test session) whose Subscribe handler reads requests slowly, as
a loaded leader does: every ack the client wrote before closing must reach it. The client used to
cancel the stream 50 ms after its half-close, and a CI run on a loaded machine lost all 240 acks
of a subscription closed at once (tests/spark/test_backlog_matches_status.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.channels import add_port
from strongroom.client import Client
from strongroom.security import tls
from strongroom.security.identity import Kind

MESSAGES = 30
READ_PAUSE = 0.2
"""The server sleeps this long before reading each request after the open."""


class SlowReader(mgrpc.MessagingServiceServicer):
    """Opens a subscription, delivers MESSAGES messages, then reads requests slowly, keeping
    the acks; ends the stream when the client half-closes (as a member does)."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.ended = asyncio.Event()

    async def Subscribe(self, requests: AsyncIterator[mpb.SubscribeRequest],  # noqa: N802 - gRPC's name
                        context: grpc.aio.ServicerContext) -> AsyncIterator[mpb.SubscribeResponse]:
        first = await requests.__anext__()
        assert first.WhichOneof("request") == "open"
        yield mpb.SubscribeResponse(opened=mpb.SubscriptionOpened(
            subscription_id="s1", durable=first.open.durable, kind=cpb.DURABLE_KIND_STANDARD))
        yield mpb.SubscribeResponse(deliveries=mpb.DeliveryBatch(deliveries=[
            mpb.Delivery(message_seq=i, message=cpb.Message(body=b"%d" % i), delivery_count=1,
                         destination=first.open.destination) for i in range(1, MESSAGES + 1)]))
        try:
            while True:
                await asyncio.sleep(READ_PAUSE)
                try:
                    req = await requests.__anext__()
                except StopAsyncIteration:
                    return
                if req.WhichOneof("request") == "ack":
                    self.acked.extend(req.ack.message_seqs)
        finally:
            self.ended.set()


@pytest.fixture
async def slow_server() -> AsyncIterator[tuple[str, SlowReader]]:
    from harness import tls_as

    servicer = SlowReader()
    server = grpc.aio.server()
    mgrpc.add_MessagingServiceServicer_to_server(servicer, server)
    port = add_port(server, "127.0.0.1:0", tls_as(Kind.MEMBER, "m1"))
    await server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        await server.stop(0)


async def test_acks_written_just_before_close_reach_a_leader_that_reads_them_slowly(
        slow_server: tuple[str, SlowReader]) -> None:
    address, servicer = slow_server
    assert tls.current() is not None  # the session's user `test`
    async with Client([address], timeout=10) as client:
        sub = await client.subscribe("orders.t", "all", credit=MESSAGES)
        got = [await sub.next(timeout=5) for _ in range(MESSAGES)]
        for m in got[:10]:
            await sub.ack(m)  # one by one on the stream
        await sub.ack_many([m.seq for m in got[10:]])
        await sub.close()
    assert sorted(servicer.acked) == list(range(1, MESSAGES + 1))
    assert servicer.ended.is_set()
