"""The gRPC API as protos/README.md describes it, through the generated stubs on a real cluster:
what is refused as INVALID_ARGUMENT, credit, the effective ack mode in status, server reflection
(v1 and v1alpha), and the leader named wherever a NOT_LEADER is given."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2
from harness import Cluster, wait_for

from strongroom.api.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    messaging_pb2,
    messaging_pb2_grpc,
)
from strongroom.client import Client
from strongroom.grpcerrors import from_rpc_error
from strongroom.channels import open_channel


@pytest.fixture
async def leader_channel(shared_cluster: Cluster):  # type: ignore[no-untyped-def]
    leader = await shared_cluster.leader()
    async with open_channel(shared_cluster.address(leader), []) as ch:
        yield ch


def _open(destination: str, durable: str = "", credit: int = 0, **kw: object) -> messaging_pb2.SubscribeRequest:
    return messaging_pb2.SubscribeRequest(open=messaging_pb2.OpenSubscription(
        destination=destination, durable=durable, credit=credit, **kw))  # type: ignore[arg-type]


async def _reason_of(call: grpc.aio.StreamStreamCall) -> tuple[grpc.StatusCode, str]:  # type: ignore[type-arg]
    """Read a stream until it fails; its status code and ErrorInfo reason."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        while True:
            if await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF:
                break
    err = from_rpc_error(caught.value)
    return caught.value.code(), err.reason if err else ""


class _Responses:
    """A subscribe stream's responses, read by a task of their own (a read cancelled by a timeout
    would cancel the whole call)."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        self.queue: asyncio.Queue[messaging_pb2.SubscribeResponse] = asyncio.Queue()
        self.task = asyncio.create_task(self._read(call))

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        while (resp := await call.read()) is not grpc.aio.EOF:
            self.queue.put_nowait(resp)

    async def deliveries(self, quiet: float) -> list[int]:
        """Message sequences delivered until nothing came for `quiet` seconds."""
        seqs: list[int] = []
        while True:
            try:
                resp = await asyncio.wait_for(self.queue.get(), quiet)
            except TimeoutError:
                return seqs
            if resp.WhichOneof("response") == "deliveries":
                seqs += [d.message_seq for d in resp.deliveries.deliveries]


# --- what cannot be meant is refused ------------------------------------------------------------------


async def test_a_publish_without_a_message_or_with_half_an_id_is_refused_and_stores_nothing(
        shared_cluster: Cluster, leader_channel: grpc.aio.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(leader_channel)  # type: ignore[no-untyped-call]
    unnamed = common_pb2.Message(body=b"x")
    unnamed.fields[""].int_value = 1
    bad = [
        messaging_pb2.PublishRequest(destination="contract.queue"),  # no message at all
        messaging_pb2.PublishRequest(destination="contract.queue",  # sequence 0 of a producer
                                     message=common_pb2.Message(body=b"x", producer_id="p")),
        messaging_pb2.PublishRequest(destination="contract.queue", message=unnamed),
    ]
    for req in bad:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Publish(req, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # An empty message is a message: stored.
    empty = await stub.Publish(messaging_pb2.PublishRequest(destination="contract.queue", message=common_pb2.Message()),
                               timeout=10)
    assert empty.confirmed and empty.message_seq
    call = stub.PublishStream()
    await call.write(messaging_pb2.PublishBatch(requests=[
        messaging_pb2.PublishRequest(destination="contract.queue", correlation_id=1),
        messaging_pb2.PublishRequest(destination="contract.queue", correlation_id=2,
                                     message=common_pb2.Message(body=b"ok", producer_id="p", sequence=1))]))
    reply = await call.read()
    call.cancel()
    assert [(r.correlation_id, r.error_reason) for r in reply.responses] == [(1, "INVALID_ARGUMENT"), (2, "")]
    client = Client(shared_cluster.addresses())
    sub = await client.subscribe("contract.queue")
    got = [await sub.next(timeout=5), await sub.next(timeout=5)]
    assert [m.body for m in got] == [b"", b"ok"]
    with pytest.raises(TimeoutError):
        await sub.next(timeout=0.5)
    for m in got:
        await sub.ack(m)
    await sub.close()
    await client.close()


async def test_a_subscribe_stream_that_breaks_the_protocol_ends_with_invalid_argument(
        leader_channel: grpc.aio.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(leader_channel)  # type: ignore[no-untyped-call]
    # An ack mode this version does not know.
    call = stub.Subscribe()
    await call.write(_open("proto.queue", ack_mode=7))
    assert await _reason_of(call) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    # A second open on the same stream, and a request that carries nothing: before, both were
    # ignored without a word.
    for later in (_open("proto.queue"), messaging_pb2.SubscribeRequest()):
        call = stub.Subscribe()
        await call.write(_open("proto.queue"))
        first = await call.read()
        assert first.WhichOneof("response") == "opened"
        await call.write(later)
        assert await _reason_of(call) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


# --- credit ------------------------------------------------------------------------------------------


async def test_credit_is_used_up_by_deliveries_and_only_credit_requests_give_more(
        shared_cluster: Cluster, leader_channel: grpc.aio.Channel) -> None:
    """What messaging.proto promises: acks give no credit back; `credit: 0` on open means 256."""
    client = Client(shared_cluster.addresses())
    pub = client.publisher("credit.queue", window=300)
    await asyncio.gather(*[await pub.send(b"%d" % i) for i in range(300)])
    await pub.close()
    await client.close()
    stub = messaging_pb2_grpc.MessagingServiceStub(leader_channel)  # type: ignore[no-untyped-call]
    call = stub.Subscribe()
    await call.write(_open("credit.queue", credit=2))
    responses = _Responses(call)
    got = await responses.deliveries(0.5)
    assert len(got) == 2
    await call.write(messaging_pb2.SubscribeRequest(ack=messaging_pb2.AckBatch(message_seqs=got)))
    assert await responses.deliveries(0.5) == []  # acked, and still no credit
    await call.write(messaging_pb2.SubscribeRequest(credit=3))
    assert len(await responses.deliveries(0.5)) == 3
    call.cancel()
    # A new subscription opened with credit 0 gets 256 of the 298 unacknowledged messages.
    call = stub.Subscribe()
    await call.write(_open("credit.queue"))
    assert len(await _Responses(call).deliveries(1.0)) == 256
    call.cancel()


# --- status and reflection -------------------------------------------------------------------------------


async def _durable(cluster: Cluster, destination: str) -> admin_pb2.DurableStatus:
    st = await cluster.status(await cluster.leader())
    assert st is not None
    return next(d for s in st.stores for d in s.durables if d.destination == destination)


async def test_status_reports_the_ack_mode_in_effect(shared_cluster: Cluster) -> None:
    client = Client(shared_cluster.addresses())
    # A queue's own durable is created by the first publish, with no mode of its own.
    await client.publish("acks.queue", b"x")
    sub = await client.subscribe("acks.queue", sync_ack=False)
    assert (await _durable(shared_cluster, "acks.queue")).ack_sync_mode == common_pb2.ACK_SYNC_MODE_ASYNC
    await sub.close()
    sub = await client.subscribe("acks.queue", sync_ack=True)
    assert (await _durable(shared_cluster, "acks.queue")).ack_sync_mode == common_pb2.ACK_SYNC_MODE_SYNC
    await sub.ack(await sub.next(timeout=5))
    await sub.close()
    # With none open: the destination's default (async in this realm).
    assert (await _durable(shared_cluster, "acks.queue")).ack_sync_mode == common_pb2.ACK_SYNC_MODE_ASYNC
    await client.close()


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_members_serve_reflection_v1_and_v1alpha(shared_cluster: Cluster, version: str) -> None:
    async with open_channel(shared_cluster.address(shared_cluster.names[0]), []) as ch:
        # The two versions' messages encode alike: v1alpha's classes speak v1 too.
        call = ch.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)()
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        listed = await call.read()
        await call.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol="strongroom.v1.MessagingService"))
        described = await call.read()
        await call.done_writing()
    services = {s.name for s in listed.list_services_response.service}
    assert {"strongroom.v1.MessagingService", "strongroom.v1.MapService", "strongroom.v1.AdminService",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= services
    assert described.WhichOneof("message_response") == "file_descriptor_response"


# --- the leader, named wherever a NOT_LEADER is given ------------------------------------------------------


async def test_after_a_step_down_not_leader_names_the_new_leader_on_the_publish_stream(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    old = await cluster.leader()
    async with open_channel(cluster.address(old), []) as ch:
        stub = messaging_pb2_grpc.MessagingServiceStub(ch)  # type: ignore[no-untyped-call]
        publish = stub.PublishStream()
        await publish.write(messaging_pb2.PublishBatch(requests=[messaging_pb2.PublishRequest(
            destination="redirect.queue", correlation_id=1, message=common_pb2.Message(body=b"before"))]))
        assert (await publish.read()).responses[0].confirmed
        subscribe = stub.Subscribe()
        await subscribe.write(_open("redirect.queue", credit=1))
        assert (await subscribe.read()).WhichOneof("response") == "opened"
        await admin_pb2_grpc.AdminServiceStub(ch).StepDown(admin_pb2.StepDownRequest(), timeout=10)  # type: ignore[no-untyped-call]
        # The subscription ends with NOT_LEADER; its metadata has the leader's keys, the leader
        # if the old member knew it when the close was written (at a step-down it does not yet).
        closed = None
        while closed is None:
            resp = await asyncio.wait_for(subscribe.read(), 10)
            assert resp is not grpc.aio.EOF
            closed = resp.closed if resp.WhichOneof("response") == "closed" else None
        assert closed.reason == "NOT_LEADER" and set(closed.metadata) == {"leader", "leader_address"}
        assert closed.metadata["leader"] != old
        new = await cluster.leader(exclude=old)

        async def old_knows_new() -> bool:
            st = await cluster.status(old)
            return st is not None and st.leader == new

        await wait_for(old_knows_new, timeout=20)
        # The same stream, on a member that no longer leads: each message refused with the leader.
        started = time.monotonic()
        await publish.write(messaging_pb2.PublishBatch(requests=[messaging_pb2.PublishRequest(
            destination="redirect.queue", correlation_id=2, message=common_pb2.Message(body=b"after"))]))
        answer = (await asyncio.wait_for(publish.read(), 10)).responses[0]
        publish.cancel()
        assert time.monotonic() - started < 10
    assert answer.error_reason == "NOT_LEADER" and not answer.confirmed
    assert dict(answer.error_metadata) == {"leader": new, "leader_address": cluster.address(new)}
