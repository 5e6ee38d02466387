"""The pipelined unit-of-work sender (`Client.uow_sender`) on a real 3-member cluster: many whole
UOWs in flight on one stream, each received once and whole; and across a leader SIGKILL, every
UOW the sender confirmed is received exactly once, whole (the unanswered ones were sent again
under their ids on the new leader, which stores a repeat once)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest
from harness import Cluster, realm_yaml, running_cluster

from strongroom.client import Client
from strongroom.client.uow import UowResult

PER_UOW = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("uow-sender"), realm_yaml()) as c:
        yield c


def bodies(i: int) -> list[bytes]:
    return [f"{i}:{j}".encode() for j in range(PER_UOW)]


async def receive_all(client: Client, destination: str, idle: float = 3.0) -> dict[str, list[bytes]]:
    """Every UOW of the queue, committed by the receiver as it comes: id -> bodies. A UOW received
    twice fails the test."""
    got: dict[str, list[bytes]] = {}
    while (uow := await client.receive_uow(destination, "r1", wait=idle)) is not None:
        assert uow.uow_id not in got, f"{uow.uow_id} received twice"
        got[uow.uow_id] = [m.body for m in uow.messages]
        assert await uow.commit() == "PROCESSED"
    return got


async def test_uows_in_flight_on_one_stream_are_each_received_once_whole(cluster: Cluster) -> None:
    await cluster.leader()
    client = Client(cluster.addresses(), timeout=20)
    try:
        sender = client.uow_sender("sender.queue", window=64)
        ids = [f"pipe-{i}" for i in range(200)]
        futs = [await sender.send(bodies(i), uow_id=uow_id) for i, uow_id in enumerate(ids)]
        await sender.close()
        results = [f.result() for f in futs]
        assert [(r.uow_id, r.status, r.messages, r.duplicate) for r in results] == \
            [(uow_id, "ACCEPTED", PER_UOW, False) for uow_id in ids]
        # Committed in the order sent (several may share a group-commit round's entry).
        indexes = [r.log_index for r in results]
        assert indexes == sorted(indexes) and indexes[0] > 0
        got = await receive_all(client, "sender.queue")
        assert got == {uow_id: bodies(i) for i, uow_id in enumerate(ids)}
    finally:
        await client.close()


@pytest.mark.slow
async def test_a_leader_sigkill_under_pipelined_uows_loses_and_duplicates_none(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    old = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    try:
        sender = client.uow_sender("failover.queue", window=32)
        total = 400
        futs: list[asyncio.Future[UowResult]] = []
        for i in range(total):
            futs.append(await sender.send(bodies(i), uow_id=f"fo-{i}"))
            if i == total // 3:
                cluster.kill(old, signal.SIGKILL)
        await sender.close()
        assert sender.streams > 1, "the sender must have failed over"
        confirmed = {f"fo-{i}" for i, f in enumerate(futs) if f.exception() is None}
        assert len(confirmed) == total, [str(f.exception()) for f in futs if f.exception() is not None][:3]
        new = await cluster.leader(exclude=old)
        assert new != old
        got = await receive_all(client, "failover.queue")
        assert confirmed <= got.keys(), f"confirmed UOWs lost: {sorted(confirmed - got.keys())[:5]}"
        # Each whole, and no message stored twice (a repeat of a committed UOW is not a new one).
        for uow_id, received in got.items():
            assert received == bodies(int(uow_id.removeprefix("fo-"))), f"{uow_id} not whole"
    finally:
        await client.close()


@pytest.mark.slow
async def test_whole_uow_commits_across_a_leader_sigkill_are_each_stored_once(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """`UnitOfWork.commit()` of whole UOWs, many at once on the client's shared stream, with the
    leader SIGKILLed under them: every commit returns ACCEPTED (a repeat the old leader had
    committed answered duplicate), and every UOW is received once, whole."""
    cluster: Cluster = make_cluster()
    old = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    try:
        async def commit(i: int) -> UowResult:
            uow = client.unit_of_work("whole.queue", uow_id=f"wh-{i}")
            for body in bodies(i):
                uow.add(body)
            result = await uow.commit()
            assert uow.opened and not uow.messages  # sent: the UOW is with the leader
            return result

        total = 300
        tasks = []
        for i in range(total):
            tasks.append(asyncio.create_task(commit(i)))
            if i == total // 3:
                await asyncio.sleep(0.05)  # some answered, some in flight
                cluster.kill(old, signal.SIGKILL)
        results = await asyncio.gather(*tasks)
        assert [(r.uow_id, r.status) for r in results] == [(f"wh-{i}", "ACCEPTED") for i in range(total)]
        assert await cluster.leader(exclude=old) != old
        got = await receive_all(client, "whole.queue")
        assert got == {f"wh-{i}": bodies(i) for i in range(total)}
    finally:
        await client.close()
