"""The member side of routing on a real 3-member cluster: messages a router forwards from another
cluster (Message.origin) are stored exactly once, in order, through re-sends, gaps, a leader
killed with SIGKILL and a follower restarted with an empty disk; the marks answer
ListOriginMarks and show in status; origins that cannot be meant are refused and store nothing.

The realm has two clusters in one forwarding zone, both with router addresses; only `default`
runs (its router's part, publishing what `london` forwards, is played by the test's client).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import Cluster, drain, leader_client, running_cluster, wait_for

from strongroom.api.v1 import admin_pb2, admin_pb2_grpc
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.client import Client
from strongroom.client.messages import PublishResult, from_field
from strongroom.client.publisher import Publisher
from strongroom.errors import (
    InvalidArgument,
    InvalidOrigin,
    LogFormatPending,
    NotLeaderError,
    OriginGap,
    UnknownDestination,
    UnknownStore,
    UnknownUow,
)
from strongroom.grpcerrors import from_rpc_error
from strongroom.local.etcdproc import free_port


def routed_realm(compact_after_entries: int = 20000) -> str:
    """`default` (three members, indexes on disk) and `london` in zone z1; store `wide` is
    routed over z1, `default` is not."""
    return f"""\
clusters:
  - name: default
    storage: disk-sync
    lease_ttl_seconds: 2
    compact_after_entries: {compact_after_entries}
    indexes_on_disk: true
    router: {{address: "127.0.0.1:{free_port()}"}}
    members:
      - name: m1
      - name: m2
      - name: m3
  - name: london
    router: {{address: "127.0.0.1:{free_port()}"}}
    members:
      - name: l1
zones:
  - {{name: z1, clusters: [default, london]}}
stores:
  - name: default
    cluster: default
  - name: wide
    routed: true
    zones: [z1]
destinations:
  - name: "wide.*"
    store: wide
  - name: "*"
    store: default
"""


def forwarded(seq: int, prev: int, cluster: str = "london", store: str = "wide") -> cpb.Message:
    """A message as london's router forwards it: its origin set."""
    return cpb.Message(body=f"{cluster}-{seq}".encode(), fields={"n": cpb.FieldValue(int_value=seq)},
                       origin=cpb.Origin(cluster=cluster, store=store, sequence=seq, previous=prev))


async def forward(client: Client, destination: str, message: cpb.Message) -> PublishResult:
    """What london's router does with a message it forwards here: publish it, origin set."""
    origin = message.origin if message.HasField("origin") else None
    return await client.publish(destination, message.body, fields_of(message), origin=origin)


async def send(pub: Publisher, message: cpb.Message) -> asyncio.Future[PublishResult]:
    """The same on a pipelined publisher: the future of its outcome."""
    return await pub.send(message.body, fields_of(message), message.origin)


def fields_of(message: cpb.Message) -> dict[str, object]:
    return {k: from_field(v) for k, v in message.fields.items()}


async def ready(client: Client) -> None:
    """Until the leader heard every member register log format 6 (a forwarded message is
    refused with LOG_FORMAT_PENDING before): a probe moves the mark of its own destination."""
    async def accepted() -> bool:
        try:
            await forward(client, "wide.probe", forwarded(1, 0))
        except LogFormatPending:
            return False
        return True

    await wait_for(accepted, timeout=30)


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("routed"), routed_realm()) as cluster:
        yield cluster


def bodies(received: list[object]) -> list[bytes]:
    return [m.body for m in received]  # type: ignore[attr-defined]


async def test_forwarded_messages_are_stored_once_in_order_and_duplicates_and_gaps_store_nothing(
        routed: Cluster) -> None:
    async with leader_client(routed) as client:
        await ready(client)
        sub = await client.subscribe("wide.prices", "app")
        for seq in range(1, 4):
            res = await forward(client, "wide.prices", forwarded(seq, seq - 1))
            assert res.stored and not res.duplicate and res.message_seq > 0
        # A router re-sends what it is unsure of: duplicates, confirmed, nothing stored.
        for seq in (1, 3, 2):
            again = await forward(client, "wide.prices", forwarded(seq, seq - 1))
            assert again == PublishResult(0, True, True, False)
        # A message whose `previous` is not the mark: ORIGIN_GAP, not retried by the client.
        with pytest.raises(OriginGap, match="up to 3") as gap:
            await forward(client, "wide.prices", forwarded(6, 5))
        assert gap.value.retriable and gap.value.code == "FAILED_PRECONDITION"
        # The unary Publish: the same rule.
        async def unary(address: str, seq: int, prev: int) -> mpb.PublishResponse:
            reply: mpb.PublishResponse = await client.stub(address).Publish(
                mpb.PublishRequest(destination="wide.prices", message=forwarded(seq, prev)), timeout=10)
            return reply

        assert (await client.retrying(lambda a: unary(a, 4, 3))).message_seq > 0
        assert (await client.retrying(lambda a: unary(a, 4, 3))).duplicate
        with pytest.raises(OriginGap):
            await client.retrying(lambda a: unary(a, 9, 8))
        # A pipelined publisher: each message's outcome on its own, the stream goes on.
        pub = client.publisher("wide.prices", window=16)
        futs = [await send(pub, m) for m in (forwarded(5, 4), forwarded(5, 4), forwarded(9, 8),
                                                     forwarded(7, 5), forwarded(8, 7))]
        results = await asyncio.gather(*futs, return_exceptions=True)
        await pub.close()
        assert isinstance(results[0], PublishResult) and results[0].stored
        assert isinstance(results[1], PublishResult) and results[1].duplicate
        assert isinstance(results[2], OriginGap)
        # 6 was skipped by the router (nobody here wanted it): 7 names 5 as the one before.
        assert all(isinstance(r, PublishResult) and r.stored for r in results[3:])

        got = await drain(sub, 20, timeout=2.0)
        assert bodies(got) == [b"london-%d" % i for i in (1, 2, 3, 4, 5, 7, 8)]
        assert [(m.origin.cluster, m.origin.store, m.origin.sequence, m.origin.previous)  # type: ignore[attr-defined]
                for m in got][-2:] == [("london", "wide", 7, 5), ("london", "wide", 8, 7)]
        await sub.close()

        marks = await client.origin_marks("wide", "wide.prices")
        assert [(m.cluster, m.destination, m.sequence) for m in marks] == [("london", "wide.prices", 8)]
        assert marks[0].stored_at > 1.7e9
        every = await client.origin_marks("wide")
        assert {(m.destination, m.sequence) for m in every} == {("wide.prices", 8), ("wide.probe", 1)}
        assert await client.origin_marks("") == every


async def test_an_origin_that_cannot_be_meant_is_refused_and_stores_nothing(routed: Cluster) -> None:
    async with leader_client(routed) as client:
        await ready(client)
        sub = await client.subscribe("wide.bad", "app")
        local_sub = await client.subscribe("plain.bad", "app")
        cases = [("wide.bad", forwarded(1, 0, cluster="default"), "not another cluster of routed store 'wide'"),
                 ("wide.bad", forwarded(1, 0, cluster="tokyo"), "not another cluster"),
                 ("wide.bad", forwarded(1, 0, store="default"), "origin store 'default' is not 'wide'"),
                 ("wide.bad", forwarded(0, 0), "1 or more"),
                 ("wide.bad", forwarded(2, 2), "not below its sequence"),
                 ("plain.bad", forwarded(1, 0), "not routed to another cluster")]
        for destination, message, why in cases:
            with pytest.raises(InvalidOrigin, match=why) as refused:
                await forward(client, destination, message)
            assert refused.value.code == "INVALID_ARGUMENT" and not refused.value.retriable
        assert await client.origin_marks("wide", "wide.bad") == []
        assert await drain(sub, 1, timeout=1.0) == [] and await drain(local_sub, 1, timeout=1.0) == []
        # The same messages without their origin are ordinary publishes.
        plain = forwarded(1, 0)
        plain.ClearField("origin")
        assert (await forward(client, "wide.bad", plain)).stored
        assert bodies(await drain(sub, 1)) == [b"london-1"]
        await sub.close()
        await local_sub.close()


async def test_units_of_work_on_a_routed_store_are_refused_and_store_nothing(routed: Cluster) -> None:
    """Units of work are not routed (a UOW commits atomically in one cluster; its receiver,
    readers and status are that cluster's): a UOW, a pipelined sender's, a publication
    subscription and a receiver on a topic of the routed store are refused with
    UNKNOWN_DESTINATION naming the routed store, and nothing is stored (no UOW, no
    subscription)."""
    why = "'wide.uow' maps to routed store 'wide'; units of work are not routed between clusters"
    async with leader_client(routed) as client:
        uow = client.unit_of_work("wide.uow")
        uow.add(b"x")
        with pytest.raises(UnknownDestination, match=why) as refused:
            await uow.commit()
        assert refused.value.code == "NOT_FOUND" and not refused.value.retriable
        opened = client.unit_of_work("wide.uow")
        opened.add(b"y")
        with pytest.raises(UnknownDestination, match=why):
            await opened.open()
        sender = client.uow_sender("wide.uow")
        try:
            with pytest.raises(UnknownDestination, match=why):
                await (await sender.submit(client.unit_of_work("wide.uow").whole_request()))
        finally:
            await sender.close()
        with pytest.raises(UnknownDestination, match=why):
            await client.subscribe_publications("wide.uow", "reader")
        with pytest.raises(UnknownDestination, match=why):
            await client.receive_uow("wide.uow", "receiver")
        for refused_uow in (uow, opened):
            with pytest.raises(UnknownUow):
                await client.uow_status(refused_uow.uow_id)
        with pytest.raises(UnknownDestination, match=why):
            await client.publication_subscriptions("wide.uow")
        subs, _ = await client.publication_subscriptions()
        assert subs == []


async def test_list_origin_marks_names_its_errors_and_the_leader(routed: Cluster) -> None:
    async with leader_client(routed) as client:
        with pytest.raises(UnknownStore, match="no store 'nope'"):
            await client.origin_marks("nope")
        with pytest.raises(InvalidArgument, match="store 'default' is not routed"):
            await client.origin_marks("default")
        leader = await routed.leader()
        follower = next(n for n in routed.names if n != leader)
        stub = admin_pb2_grpc.AdminServiceStub(client.channel(routed.address(follower)))  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListOriginMarks(admin_pb2.ListOriginMarksRequest(store="wide"), timeout=5)
        err = from_rpc_error(caught.value)
        assert isinstance(err, NotLeaderError) and err.leader_address == routed.address(leader)


def status_cli(cluster: Cluster, *argv: str) -> str:
    """`strongroom status` as a user runs it, `-s` naming the members: its output."""
    done = subprocess.run([sys.executable, "-m", "strongroom.cli.main", "status", *argv, "-s",
                           ",".join(cluster.addresses())], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_status_shows_the_marks_of_a_routed_store(routed: Cluster) -> None:
    async with leader_client(routed) as client:
        await ready(client)
        await forward(client, "wide.status", forwarded(1, 0))

    async def applied_everywhere() -> bool:
        for name in routed.names:
            st = await routed.status(name)
            wide = [s for s in st.stores if s.name == "wide"] if st is not None else []
            if not wide or ("london", "wide.status") not in {(m.cluster, m.destination) for m in wide[0].origin_marks}:
                return False
        return True

    await wait_for(applied_everywhere, timeout=10)
    statuses = json.loads(status_cli(routed, "--json"))
    assert len(statuses) == 3
    for member in statuses:
        stores = {s["name"]: s for s in member["stores"]}  # type: ignore[attr-defined]
        assert stores["default"].get("origin_marks", []) == []
        marks = {(m["cluster"], m["destination"]): m["sequence"] for m in stores["wide"]["origin_marks"]}
        assert marks.get(("london", "wide.status")) == 1
    line = next(x for x in status_cli(routed).splitlines() if "forwarded here" in x)
    assert "from london:" in line and "wide.status 1" in line


@pytest.mark.slow
async def test_exactly_once_through_a_leader_kill_and_a_follower_with_an_empty_disk(tmp_path: Path) -> None:
    """Forwarded messages go on a pipelined publisher; the leader is killed (SIGKILL) a third of
    the way through. The publisher re-sends what was not confirmed on the new leader: what was
    committed before the kill is a duplicate there, so each message is stored once, in order,
    and the mark ends at the last. A follower restarted with an empty disk catches up (the log
    was compacted meanwhile: from a snapshot) and holds the same marks; led by it, re-sends stay
    duplicates."""
    total = 300
    with running_cluster(tmp_path, routed_realm(compact_after_entries=100)) as cluster:
        async with leader_client(cluster, timeout=30) as client:
            await ready(client)
            sub = await client.subscribe("wide.orders", "app")
            await sub.close()
            old = await cluster.leader()
            pub = client.publisher("wide.orders", window=32)
            futs = []
            for seq in range(1, total + 1):
                futs.append(await send(pub, forwarded(seq, seq - 1)))
                if seq == total // 3:
                    cluster.kill(old, signal.SIGKILL)
            results = await asyncio.gather(*futs)
            await pub.close()
            assert all(r.confirmed for r in results)
            new = await cluster.leader(exclude=old)
            assert new != old
            # A router that lost track re-sends from further back: the new leader's marks make
            # every one a duplicate.
            pub = client.publisher("wide.orders", window=32)
            again = await asyncio.gather(*[await send(pub, forwarded(seq, seq - 1))
                                           for seq in range(total // 3 - 20, total + 1)])
            await pub.close()
            assert all(r.duplicate and r.message_seq == 0 for r in again)

            sub = await client.subscribe("wide.orders", "app", credit=512)
            got = await drain(sub, total + 10, timeout=3.0)
            await sub.close()
            assert bodies(got) == [b"london-%d" % i for i in range(1, total + 1)], "lost, duplicated or reordered"
            marks = {(m.cluster, m.destination): m.sequence for m in await client.origin_marks("wide")}
            assert marks[("london", "wide.orders")] == total

            # More than compact_after_entries entries while it is down (one message each), so
            # the leader compacts its log and the killed member comes back to a snapshot.
            for seq in range(1, 121):
                assert (await forward(client, "wide.more", forwarded(seq, seq - 1))).stored is False
            # The killed member comes back with an empty disk.
            cluster.start(old, wipe=True)

            async def caught_up() -> bool:
                mine, leader = await cluster.status(old), await cluster.status(new)
                return bool(mine and leader and mine.synced and mine.role == "follower" and
                            mine.applied_index >= leader.commit_index)

            await wait_for(caught_up, timeout=60)
            leader_view, its_view = await cluster.status(new), await cluster.status(old)
            assert leader_view is not None and its_view is not None
            assert its_view.snapshot_index > 0  # it caught up from a snapshot

            def store_marks(st: admin_pb2.ClusterStatus) -> list[tuple[str, str, int, float]]:
                wide = next(s for s in st.stores if s.name == "wide")
                return [(m.cluster, m.destination, m.sequence, m.stored_at) for m in wide.origin_marks]

            assert store_marks(its_view) == store_marks(leader_view)
            assert {m[:3] for m in store_marks(its_view)} >= {("london", "wide.orders", total),
                                                               ("london", "wide.more", 120)}

            # Led by it, the marks answer and re-sends are duplicates; the next message follows.
            for _ in range(10):
                leading = await cluster.leader()
                if leading == old:
                    break
                await admin_pb2_grpc.AdminServiceStub(client.channel(cluster.address(leading))).StepDown(  # type: ignore[no-untyped-call]
                    admin_pb2.StepDownRequest(), timeout=10)
                await asyncio.sleep(0.5)
            assert await cluster.leader() == old
            marks = {(m.cluster, m.destination): m.sequence for m in await client.origin_marks("wide")}
            assert marks[("london", "wide.orders")] == total
            assert (await forward(client, "wide.orders", forwarded(total, total - 1))).duplicate
            assert (await forward(client, "wide.orders", forwarded(total + 1, total))).stored
