"""Publish/subscribe/ack semantics from a real client against a real 3-member cluster."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from harness import Cluster, drain

from strongroom.api.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc
from strongroom.client import Client
from strongroom.channels import open_channel
from strongroom.errors import (
    ForeignMessage,
    InvalidArgument,
    MessageTooLarge,
    NotLeaderError,
    SubscriptionClosed,
    SubscriptionReplaced,
    UnknownDestination,
    UnknownDurableKind,
    UnknownMessage,
)


@pytest.fixture
async def client(shared_cluster: Cluster):  # type: ignore[no-untyped-def]
    await shared_cluster.leader()
    c = Client(shared_cluster.addresses(), timeout=20)
    try:
        yield c
    finally:
        await c.close()


async def test_queue_stores_without_subscribers_and_delivers_in_order(client: Client) -> None:
    for i in range(50):
        res = await client.publish("orders.queue", f"m{i}".encode())
        assert res.confirmed and res.message_seq > 0
    sub = await client.subscribe("orders.queue")
    got = await drain(sub, 50)
    await sub.close()
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(50)]
    assert all(m.delivery_count == 1 for m in got)


async def test_topic_keeps_messages_only_for_existing_durables(client: Client) -> None:
    before = await client.publish("news", b"nobody-wants-this")
    assert before.message_seq == 0  # no durable yet: not stored
    sub = await client.subscribe("news", "reader")
    await sub.close()
    for i in range(5):
        await client.publish("news", f"n{i}".encode())
    sub = await client.subscribe("news", "reader")
    got = await drain(sub, 5)
    assert [m.body for m in got] == [f"n{i}".encode() for i in range(5)]
    with pytest.raises(TimeoutError):
        await sub.next(timeout=0.5)
    await sub.close()


async def test_standard_second_subscriber_closes_first(client: Client) -> None:
    first = await client.subscribe("std.topic", "d1", kind="standard")
    await client.publish("std.topic", b"a")
    msg = await first.next(timeout=5)
    assert msg is not None and msg.body == b"a"
    second = await client.subscribe("std.topic", "d1", kind="standard")
    with pytest.raises(SubscriptionReplaced) as closed:
        await first.next(timeout=5)
    assert closed.value.reason == "REPLACED" and not closed.value.retriable
    assert first.closed_reason == "REPLACED" and first.closed
    with pytest.raises(SubscriptionReplaced):  # and stays closed
        await first.next(timeout=5)
    # The unacknowledged message goes to the new subscriber with a higher delivery count.
    again = await second.next(timeout=5)
    assert again is not None and again.body == b"a" and again.delivery_count == 2
    await second.ack(again)
    await second.close()


async def test_next_times_out_while_open_and_raises_the_reason_once_closed(client: Client) -> None:
    sub = await client.subscribe("nextstate.queue")
    with pytest.raises(TimeoutError):
        await sub.next(timeout=0.3)
    assert not sub.closed  # a timeout leaves the subscription open
    await client.publish("nextstate.queue", b"after-the-timeout")
    msg = await sub.next(timeout=5)
    assert msg.body == b"after-the-timeout"
    await sub.ack(msg)
    # Closed while another task waits: that wait ends with the reason too, not a timeout.
    waiting = asyncio.create_task(sub.next())
    await asyncio.sleep(0.2)
    await sub.close()
    with pytest.raises(SubscriptionClosed) as woken:
        await asyncio.wait_for(waiting, 5)
    assert woken.value.reason == "SUBSCRIPTION_CLOSED" and not woken.value.retriable
    with pytest.raises(SubscriptionClosed):
        await sub.next(timeout=0.3)
    assert sub.closed
    assert [m async for m in sub] == []  # iterating a closed subscription ends at once


async def test_shared_durable_gives_each_message_to_exactly_one(client: Client) -> None:
    subs = [await client.subscribe("work.topic", "pool", kind="shared", credit=8) for _ in range(3)]
    n = 60
    for i in range(n):
        await client.publish("work.topic", str(i).encode())
    seen: list[list[bytes]] = [[] for _ in subs]

    async def consume(i: int) -> None:
        while True:
            try:
                msg = await subs[i].next(timeout=1.5)
            except TimeoutError:
                return
            seen[i].append(msg.body)
            await subs[i].ack(msg)

    await asyncio.gather(*(consume(i) for i in range(3)))
    allbodies = [b for s in seen for b in s]
    assert sorted(allbodies, key=int) == [str(i).encode() for i in range(n)]
    assert len(set(allbodies)) == n
    assert sum(1 for s in seen if s) >= 2  # the work was spread
    for s in subs:
        await s.close()


async def test_lastvalue_gets_latest_then_updates(client: Client) -> None:
    warm = await client.subscribe("prices", "lv", kind="lastvalue")
    await warm.close()
    for i in range(10):
        await client.publish("prices", f"p{i}".encode())
    sub = await client.subscribe("prices", "lv", kind="lastvalue")
    first = await sub.next(timeout=5)
    assert first is not None and first.body == b"p9"
    await client.publish("prices", b"p10")
    upd = await sub.next(timeout=5)
    assert upd is not None and upd.body == b"p10"
    with pytest.raises(InvalidArgument):
        await client.ack("prices", "lv", [upd.seq], sub.subscription_id)
    await sub.close()


async def test_lost_subscriber_messages_are_redelivered_with_count(client: Client) -> None:
    for i in range(5):
        await client.publish("redeliver.queue", f"r{i}".encode())
    sub = await client.subscribe("redeliver.queue", credit=5)
    got = await drain(sub, 5, ack=False)
    assert len(got) == 5
    await sub.close()  # without acks
    sub2 = await client.subscribe("redeliver.queue")
    again = await drain(sub2, 5)
    assert [m.body for m in again] == [f"r{i}".encode() for i in range(5)]
    assert all(m.delivery_count == 2 for m in again)
    with pytest.raises(TimeoutError):
        await sub2.next(timeout=0.5)
    await sub2.close()


async def test_acked_messages_are_deleted_and_sync_ack_commits(client: Client, shared_cluster: Cluster) -> None:
    for i in range(3):
        await client.publish("acked.queue", b"x" * 100)
    sub = await client.subscribe("acked.queue", sync_ack=True)
    got = await drain(sub, 3)
    assert len(got) == 3
    leader = await shared_cluster.leader()
    st = await shared_cluster.status(leader)
    assert st is not None
    durable = [d for s in st.stores for d in s.durables if d.destination == "acked.queue"]
    assert durable and durable[0].pending_messages == 0
    # Every member applied the same acknowledgments.
    await asyncio.sleep(0.6)
    for name in shared_cluster.names:
        fst = await shared_cluster.status(name)
        assert fst is not None
        d = [d for s in fst.stores for d in s.durables if d.destination == "acked.queue"]
        assert d and d[0].pending_messages == 0, name
    await sub.close()


async def test_publisher_ids_deduplicate(shared_cluster: Cluster) -> None:
    leader = await shared_cluster.leader()
    async with open_channel(shared_cluster.address(leader), []) as ch:
        stub = messaging_pb2_grpc.MessagingServiceStub(ch)
        msg = common_pb2.Message(body=b"once", producer_id="dedup-test", sequence=7)
        r1 = await stub.Publish(messaging_pb2.PublishRequest(destination="dedup.queue", message=msg))
        r2 = await stub.Publish(messaging_pb2.PublishRequest(destination="dedup.queue", message=msg))
    assert not r1.duplicate and r2.duplicate and r2.message_seq == r1.message_seq
    c = Client(shared_cluster.addresses())
    sub = await c.subscribe("dedup.queue")
    got = await drain(sub, 2, timeout=1.0)
    assert [m.body for m in got] == [b"once"]
    await sub.close()
    await c.close()


async def test_pipelined_publisher_confirms_all_in_order(client: Client) -> None:
    pub = client.publisher("pipe.queue", window=64)
    futs = [await pub.send(f"{i}".encode()) for i in range(500)]
    results = await asyncio.gather(*futs)
    await pub.close()
    seqs = [r.message_seq for r in results]
    assert all(r.confirmed for r in results) and seqs == sorted(seqs) and len(set(seqs)) == 500
    sub = await client.subscribe("pipe.queue", credit=512)
    got = await drain(sub, 500)
    assert [int(m.body) for m in got] == list(range(500))
    await sub.close()


async def test_non_leader_answers_not_leader_with_address(shared_cluster: Cluster) -> None:
    leader = await shared_cluster.leader()
    follower = next(n for n in shared_cluster.names if n != leader)
    async with open_channel(shared_cluster.address(follower), []) as ch:
        stub = messaging_pb2_grpc.MessagingServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Publish(messaging_pb2.PublishRequest(destination="x.queue",
                                                            message=common_pb2.Message(body=b"x")))
    exc = info.value
    assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("strongroom-leader", shared_cluster.address(leader)) in tuple(exc.trailing_metadata())
    status = rpc_status.from_call(exc)
    detail = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(detail)
    assert detail.reason == "NOT_LEADER"
    # The client follows the redirect.
    c = Client([shared_cluster.address(follower)])
    res = await c.publish("x.queue", b"via-follower")
    assert res.confirmed
    await c.close()


async def test_bad_input_is_rejected_and_changes_nothing(client: Client, shared_cluster: Cluster) -> None:
    leader = await shared_cluster.leader()
    before = await shared_cluster.status(leader)
    assert before is not None
    with pytest.raises(UnknownDestination):
        await client.publish("bad*name", b"x")
    with pytest.raises(MessageTooLarge):
        await client.publish("small.x", b"x" * 2000)
    with pytest.raises(UnknownDurableKind):
        async with open_channel(shared_cluster.address(leader), []) as ch:
            call = messaging_pb2_grpc.MessagingServiceStub(ch).Subscribe()
            await call.write(messaging_pb2.SubscribeRequest(open=messaging_pb2.OpenSubscription(
                destination="t", durable="d", kind=7)))
            try:
                await call.read()
            except grpc.aio.AioRpcError as exc:
                from strongroom.grpcerrors import from_rpc_error
                err = from_rpc_error(exc)
                assert err is not None
                raise err from None
    with pytest.raises(InvalidArgument):
        await client.subscribe("t", "d", kind="sideways")
    await client.publish("ackcheck.queue", b"1")
    sub_a = await client.subscribe("ackcheck.queue", credit=1)
    msg = await sub_a.next(timeout=5)
    assert msg is not None
    with pytest.raises(UnknownMessage):
        await client.ack("ackcheck.queue", "", [10**9], sub_a.subscription_id)
    with pytest.raises(ForeignMessage):
        await client.ack("ackcheck.queue", "", [msg.seq], "sub-someone-else")
    await sub_a.ack(msg)
    await sub_a.close()
    after = await shared_cluster.status(leader)
    assert after is not None
    small = [s for s in after.stores if s.name == "small"][0]
    assert small.messages == 0


async def test_malformed_publish_requests_are_refused_and_store_nothing(client: Client,
                                                                       shared_cluster: Cluster) -> None:
    """Empty destination, unknown mode, a sequence without a producer id: INVALID_ARGUMENT, on a
    unary call and per request on a publish stream, whose well-formed requests still go through."""
    leader = await shared_cluster.leader()
    bad = [
        messaging_pb2.PublishRequest(destination="", message=common_pb2.Message(body=b"x")),
        messaging_pb2.PublishRequest(destination="malformed.queue", mode=9, message=common_pb2.Message(body=b"x")),
        messaging_pb2.PublishRequest(destination="malformed.queue", message=common_pb2.Message(body=b"x", sequence=3)),
    ]
    good = messaging_pb2.PublishRequest(destination="malformed.queue", message=common_pb2.Message(body=b"ok"),
                                        mode=messaging_pb2.PUBLISH_MODE_STORE_CONFIRM_SEND)
    async with open_channel(shared_cluster.address(leader), []) as ch:
        stub = messaging_pb2_grpc.MessagingServiceStub(ch)
        for req in bad:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Publish(req, timeout=10)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        batch = [bad[0], good, bad[1], bad[2]]
        for i, req in enumerate(batch):
            req.correlation_id = i + 1
        call = stub.PublishStream()
        await call.write(messaging_pb2.PublishBatch(requests=batch))
        reply = await call.read()
        call.cancel()
    answers = {r.correlation_id: r for r in reply.responses}
    assert [answers[i].error_reason for i in (1, 3, 4)] == ["INVALID_ARGUMENT"] * 3
    assert answers[2].error_reason == "" and answers[2].confirmed
    sub = await client.subscribe("malformed.queue")
    assert [m.body for m in await drain(sub, 4, timeout=1.0)] == [b"ok"]
    await sub.close()


async def test_non_replicated_store_is_served_by_leader_only(client: Client, shared_cluster: Cluster) -> None:
    sub = await client.subscribe("volatile.feed", "v")
    await client.publish("volatile.feed", b"fast")
    msg = await sub.next(timeout=5)
    assert msg is not None and msg.body == b"fast"
    await sub.ack(msg)
    await sub.close()
    leader = await shared_cluster.leader()
    follower = next(n for n in shared_cluster.names if n != leader)
    st = await shared_cluster.status(follower)
    assert st is not None
    vol = [s for s in st.stores if s.name == "volatile"][0]
    assert not vol.replicated and not vol.durables  # nothing of it reached the followers


def test_not_leader_error_carries_address() -> None:
    err = NotLeaderError("x", "m2", "127.0.0.1:1")
    assert err.retriable and err.leader_address == "127.0.0.1:1"


async def test_new_store_and_destination_take_effect_without_restart(client: Client, shared_cluster: Cluster) -> None:
    from harness import SHARED_DESTINATIONS, SHARED_STORES, put_realm, realm_yaml

    before = await client.publish("late.orders.queue", b"to-default")  # only "*.queue" matches yet
    assert before.confirmed
    extra = SHARED_STORES + """\
  - name: late
    cluster: default
"""
    dests = SHARED_DESTINATIONS + """\
  - name: "late.*"
    kind: queue
    store: late
"""
    await put_realm(shared_cluster.etcd, realm_yaml(extra_stores=extra, extra_destinations=dests), 2)
    deadline = asyncio.get_running_loop().time() + 10
    while not all(s.realm_version == 2 for s in await client.status()):
        assert asyncio.get_running_loop().time() < deadline, "realm version 2 not picked up"
        await asyncio.sleep(0.1)
    res = await client.publish("late.orders.queue", b"to-late")
    assert res.confirmed
    statuses = await client.status()
    assert all(s.realm_version == 2 for s in statuses)
    leader = [s for s in statuses if s.role == "leader"][0]
    late = [s for s in leader.stores if s.name == "late"][0]
    assert late.messages == 1


async def test_noconfirm_publish_returns_before_commit_and_is_stored(client: Client) -> None:
    sub = await client.subscribe("fire.topic", "f")
    results = [await client.publish("fire.topic", f"nc{i}".encode(), confirm=False) for i in range(20)]
    assert not any(r.confirmed for r in results)
    got = await drain(sub, 20)
    assert [m.body for m in got] == [f"nc{i}".encode() for i in range(20)]
    await sub.close()


async def test_auto_ack_acknowledges_what_the_application_consumed(client: Client) -> None:
    for i in range(6):
        await client.publish("auto.queue", f"a{i}".encode())
    sub = await client.subscribe("auto.queue", ack="auto", credit=3)
    got = await drain(sub, 4, ack=False)  # the application took four and finished them
    assert [m.body for m in got] == [f"a{i}".encode() for i in range(4)]
    await sub.close()
    again = await client.subscribe("auto.queue")
    rest = await drain(again, 6, timeout=1.5)
    # The four consumed were acknowledged automatically; the others come (again).
    assert [m.body for m in rest] == [b"a4", b"a5"]
    await again.close()


async def test_members_report_grpc_health(shared_cluster: Cluster) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    for name in shared_cluster.names:
        async with open_channel(shared_cluster.address(name), []) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            resp = await stub.Check(health_pb2.HealthCheckRequest(service="strongroom.v1.MessagingService"))
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_async_acks_made_up_to_close_are_all_delivered(client: Client, shared_cluster: Cluster) -> None:
    pub = client.publisher("drained.queue", window=128)
    await asyncio.gather(*[await pub.send(str(i).encode()) for i in range(400)])
    await pub.close()
    sub = await client.subscribe("drained.queue", credit=400)
    got = await drain(sub, 400, ack=False)
    assert len(got) == 400
    for msg in got:
        await sub.ack(msg)  # acks keep coming while earlier ones are being written
        await asyncio.sleep(0)
    await sub.close()  # the last acks were made just before this
    again = await client.subscribe("drained.queue")
    with pytest.raises(TimeoutError):  # acknowledged messages must not come back
        await again.next(timeout=1.0)
    await again.close()
    leader = await shared_cluster.leader()
    st = await shared_cluster.status(leader)
    assert st is not None
    queue = [d for s in st.stores for d in s.durables if d.destination == "drained.queue"][0]
    assert queue.pending_messages == 0
