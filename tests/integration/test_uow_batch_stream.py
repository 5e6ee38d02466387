"""`UowService.SendBatchStream` on a real 3-member cluster, through the generated stub as any
client would call it: batches of whole UOWs answered batch by batch, in request order, each
answer under its request's correlation id, a batch's commits in one log entry; a bad request in
the middle of a batch refused with its own error while the others commit; the requests for one
UOW in one batch applied in order; a stream opened on a follower ended with NOT_LEADER."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import grpc
import pytest
from harness import Cluster, leader_client

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import uow_pb2 as upb
from strongroom.api.v1 import uow_pb2_grpc as ugrpc
from strongroom.client import Client
from strongroom.errors import UnknownUow
from strongroom.grpcerrors import from_rpc_error
from strongroom.channels import open_channel

ACCEPTED = upb.UOW_STATUS_ACCEPTED
RECEIVED = upb.UOW_STATUS_RECEIVED


def whole(destination: str, uow_id: str, correlation_id: int, n: int = 3) -> upb.UowSendRequest:
    """One request that opens a UOW with `n` messages and commits it."""
    return upb.UowSendRequest(destination=destination, uow_id=uow_id, open=True, action=upb.UOW_ACTION_COMMIT,
                              correlation_id=correlation_id,
                              messages=[cpb.Message(body=f"{uow_id}:{j}".encode()) for j in range(n)])


@pytest.fixture
async def client(shared_cluster: Cluster) -> AsyncIterator[Client]:
    async with leader_client(shared_cluster) as c:
        yield c


@pytest.fixture
async def stub(shared_cluster: Cluster) -> AsyncIterator[ugrpc.UowServiceStub]:
    leader = await shared_cluster.leader()
    async with open_channel(shared_cluster.address(leader), []) as channel:
        yield ugrpc.UowServiceStub(channel)


async def exchange(stub: ugrpc.UowServiceStub,
                   batches: list[list[upb.UowSendRequest]]) -> list[upb.UowSendResponseBatch]:
    """Every batch written before any answer is read, then the answers until the stream ends."""
    call = stub.SendBatchStream()
    for batch in batches:
        await call.write(upb.UowSendBatch(requests=batch))
    await call.done_writing()
    return [reply async for reply in call]


async def test_batches_are_answered_in_order_by_correlation_id_each_in_one_log_entry(
        client: Client, stub: ugrpc.UowServiceStub) -> None:
    await client.unit_of_work("batch-warm.queue").commit()  # the leader reads every registration first
    ids = random.Random(20).sample(range(1, 1 << 40), 200)  # correlation ids in no order
    batches = [[whole("batch.queue", f"b{b}-{i}", ids[b * 40 + i]) for i in range(40)] for b in range(5)]
    replies = await exchange(stub, batches)
    assert len(replies) == len(batches)
    indexes = []
    for batch, reply in zip(batches, replies):
        assert [(r.correlation_id, r.uow_id, r.status, r.messages, r.duplicate, r.error_reason)
                for r in reply.responses] == [(q.correlation_id, q.uow_id, ACCEPTED, 3, False, "") for q in batch]
        # The batch's commits went to the log together: one group-commit round, one entry.
        assert len({r.log_index for r in reply.responses}) == 1, [r.log_index for r in reply.responses]
        indexes.append(reply.responses[0].log_index)
    # In the order of the batches (batches that arrived during one round share the next one).
    assert indexes == sorted(indexes) and indexes[0] > 0
    # Each UOW stored once, whole, in the order sent.
    for batch in batches:
        for q in batch:
            got = await client.receive_uow("batch.queue", "r1", wait=5)
            assert got is not None and got.uow_id == q.uow_id
            assert [m.body for m in got.messages] == [m.body for m in q.messages]
            assert await got.commit() == "PROCESSED"
    assert await client.receive_uow("batch.queue", "r1", wait=0.2) is None


async def test_a_bad_request_in_a_batch_gets_its_own_error_and_the_others_commit(
        client: Client, stub: ugrpc.UowServiceStub) -> None:
    no_lifetime = whole("mixed.queue", "mx-2", 2)
    no_lifetime.options.lifetime_seconds = -1
    unknown_action = whole("mixed.queue", "mx-4", 4)
    unknown_action.action = 99  # type: ignore[assignment]
    not_durable = whole("mixed.topic", "mx-6", 6)  # a topic without durable publications
    batch = [whole("mixed.queue", "mx-1", 1), no_lifetime, whole("mixed.queue", "mx-3", 3), unknown_action,
             whole("mixed.queue", "mx-5", 5), not_durable, whole("mixed.queue", "mx-7", 7)]
    (reply,) = await exchange(stub, [batch])
    answers = {r.correlation_id: r for r in reply.responses}
    assert [r.correlation_id for r in reply.responses] == [1, 2, 3, 4, 5, 6, 7]
    for cid in (1, 3, 5, 7):
        assert (answers[cid].uow_id, answers[cid].status, answers[cid].error_reason) == (f"mx-{cid}", ACCEPTED, "")
    refused = {cid: (answers[cid].uow_id, answers[cid].error_code, answers[cid].error_reason) for cid in (2, 4, 6)}
    assert refused == {2: ("mx-2", grpc.StatusCode.INVALID_ARGUMENT.value[0], "INVALID_ARGUMENT"),
                       4: ("mx-4", grpc.StatusCode.INVALID_ARGUMENT.value[0], "INVALID_ARGUMENT"),
                       6: ("mx-6", grpc.StatusCode.NOT_FOUND.value[0], "UNKNOWN_DESTINATION")}
    assert "lifetime" in answers[2].error_message and "action 99" in answers[4].error_message
    assert "not durable" in answers[6].error_message
    for cid in (1, 3, 5, 7):
        assert (await client.uow_status(f"mx-{cid}")).status == "ACCEPTED"
    for cid in (2, 4, 6):
        with pytest.raises(UnknownUow):
            await client.uow_status(f"mx-{cid}")


async def test_requests_for_one_uow_in_one_batch_apply_in_order(client: Client, stub: ugrpc.UowServiceStub) -> None:
    def message(body: bytes) -> cpb.Message:
        return cpb.Message(body=body)

    batch = [upb.UowSendRequest(destination="steps.queue", uow_id="st-1", open=True, correlation_id=10,
                                messages=[message(b"one")]),
             upb.UowSendRequest(destination="steps.queue", uow_id="st-1", correlation_id=11,
                                messages=[message(b"two"), message(b"three")]),
             upb.UowSendRequest(destination="steps.queue", uow_id="st-1", correlation_id=12,
                                action=upb.UOW_ACTION_COMMIT)]
    (reply,) = await exchange(stub, [batch])
    assert [(r.correlation_id, r.status, r.messages, r.error_reason) for r in reply.responses] == \
        [(10, RECEIVED, 1, ""), (11, RECEIVED, 3, ""), (12, ACCEPTED, 3, "")]
    got = await client.receive_uow("steps.queue", "r1", wait=5)
    assert got is not None and [m.body for m in got.messages] == [b"one", b"two", b"three"]
    assert await got.commit() == "PROCESSED"


async def test_a_stream_opened_on_a_follower_ends_with_not_leader_naming_the_leader(shared_cluster: Cluster) -> None:
    leader = await shared_cluster.leader()
    follower = next(n for n in shared_cluster.names if n != leader)
    async with open_channel(shared_cluster.address(follower), []) as channel:
        call = ugrpc.UowServiceStub(channel).SendBatchStream()
        # The member ends the stream as it opens, before any request: reading gives its status.
        # (A write racing that end would fail on the client, and grpc.aio then records its own
        # INTERNAL "Internal error from Core" as the call's status in place of the member's; the
        # client's UowSender treats that as a broken stream and finds the leader again.)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call.read()
        status = raised.value
    err = from_rpc_error(status)
    assert status.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert err is not None and err.reason == "NOT_LEADER"
    assert err.metadata["leader_address"] == shared_cluster.address(leader)


async def test_send_stream_applies_one_uows_pipelined_steps_in_order(
        client: Client, stub: ugrpc.UowServiceStub) -> None:
    """Open, two adds and the commit of one UOW written on SendStream without waiting for any
    answer: each step waits for the one before, so the UOW commits with all its messages (a step
    that overtook its open would be refused UNKNOWN_UOW and the commit would go without it)."""
    steps = [upb.UowSendRequest(destination="pipelined.queue", uow_id="p1", open=True, correlation_id=1,
                                messages=[cpb.Message(body=b"a")]),
             upb.UowSendRequest(destination="pipelined.queue", uow_id="p1", correlation_id=2,
                                messages=[cpb.Message(body=b"b")]),
             upb.UowSendRequest(destination="pipelined.queue", uow_id="p1", correlation_id=3,
                                messages=[cpb.Message(body=b"c")]),
             upb.UowSendRequest(destination="pipelined.queue", uow_id="p1", correlation_id=4,
                                action=upb.UOW_ACTION_COMMIT)]
    call = stub.SendStream()
    for step in steps:
        await call.write(step)
    await call.done_writing()
    answers = [a async for a in call]
    assert [(a.correlation_id, a.error_reason) for a in answers] == [(1, ""), (2, ""), (3, ""), (4, "")]
    assert answers[-1].status == ACCEPTED and answers[-1].messages == 3
    got = await client.receive_uow("pipelined.queue", "r1", wait=5)
    assert got is not None and [m.body for m in got.messages] == [b"a", b"b", b"c"]
    assert await got.commit() == "PROCESSED"
