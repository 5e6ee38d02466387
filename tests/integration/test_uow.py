"""Units of work on a real 3-member cluster: atomic visibility, receiver commit / backout /
cancel, the backout threshold and the dead-letter queue, user status, the status query, bad
input; then across a leader SIGKILL and a whole-cluster restart, the four persistence
variations and the pseudo-clock (a lifetime does not run while the cluster is down); and a
receiver's commit across a leader SIGKILL (processed exactly once)."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from harness import Cluster, leader_client, realm_yaml, running_cluster, wait_for

from strongroom.client import Client
from strongroom.client.uow import ReceivedUnitOfWork
from strongroom.errors import (
    InvalidArgument,
    UnknownDestination,
    UnknownUow,
    UowAborted,
    UowNotHeld,
    UowStateError,
)

DESTINATIONS = """\
  - name: work.queue
    kind: queue
    store: default
    units_of_work:
      backout_threshold: 2
      dead_letter: work.dlq
      conversation_timeout_seconds: 60
  - name: work.dlq
    kind: queue
    store: default
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("uow"), realm_yaml(extra_destinations=DESTINATIONS)) as c:
        yield c


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with leader_client(cluster) as c:
        yield c


async def test_a_uow_is_invisible_until_committed_then_received_whole_and_processed(client: Client) -> None:
    uow = client.unit_of_work("atomic.queue")
    uow.add(b"one", {"n": 1})
    opened = await uow.send()
    assert opened.status == "RECEIVED" and opened.messages == 1
    uow.add(b"two", {"n": 2})
    uow.add(b"three", {"n": 3})
    assert (await uow.send()).messages == 3
    assert (await client.uow_status(uow.uow_id)).status == "RECEIVED"
    # Nothing of it is visible before the commit.
    assert await client.receive_uow("atomic.queue", "r1", wait=0.3) is None
    committed = await uow.commit()
    assert (committed.status, committed.messages) == ("ACCEPTED", 3)
    got = await client.receive_uow("atomic.queue", "r1", wait=5)
    assert got is not None and got.uow_id == uow.uow_id
    assert [m.body for m in got.messages] == [b"one", b"two", b"three"]
    status = await client.uow_status(uow.uow_id)
    assert (status.status, status.receiver, status.messages) == ("DELIVERED", "r1", 3)
    assert await got.commit(user_status=b"done") == "PROCESSED"
    status = await client.uow_status(uow.uow_id)
    assert (status.status, status.user_status) == ("PROCESSED", b"done")
    assert status.completed_at >= status.created_at > 0
    assert await client.receive_uow("atomic.queue", "r1", wait=0.2) is None


async def test_a_receiver_backout_offers_it_again_and_past_the_threshold_it_is_dead_lettered(
        client: Client) -> None:
    uow = client.unit_of_work("work.queue")
    for i in range(4):
        uow.add(f"m{i}".encode())
    await uow.commit()
    for attempt in range(1, 3):
        got = await client.receive_uow("work.queue", f"r{attempt}", wait=5)
        assert got is not None and got.uow_id == uow.uow_id and got.backout_count == attempt - 1
        status, backouts, moved = await got.backout(user_status=f"try {attempt}".encode())
        assert (status, backouts, moved) == ("ACCEPTED", attempt, "")
    got = await client.receive_uow("work.queue", "r3", wait=5)
    assert got is not None
    # The third backout is past the threshold of 2: the UOW moves whole to the dead-letter queue.
    status, backouts, moved = await got.backout()
    assert (status, backouts, moved) == ("ACCEPTED", 3, "work.dlq")
    assert await client.receive_uow("work.queue", "r4", wait=0.2) is None
    dead = await client.receive_uow("work.dlq", "janitor", wait=5)
    assert dead is not None and dead.uow_id == uow.uow_id and dead.backout_count == 3
    assert [m.body for m in dead.messages] == [b"m0", b"m1", b"m2", b"m3"]
    assert dead.user_status == b"try 2"
    info = await client.uow_status(uow.uow_id)
    assert (info.destination, info.dead_lettered_from) == ("work.dlq", "work.queue")
    assert await dead.cancel() == "CANCELLED"


async def test_cancel_by_sender_and_by_receiver(client: Client) -> None:
    first = client.unit_of_work("cancel.queue")
    first.add(b"x")
    await first.commit()
    assert (await first.cancel()).status == "CANCELLED"
    second = client.unit_of_work("cancel.queue")
    second.add(b"y")
    await second.commit()
    got = await client.receive_uow("cancel.queue", "r", wait=5)
    assert got is not None and got.uow_id == second.uow_id
    assert await got.cancel() == "CANCELLED"
    assert await client.receive_uow("cancel.queue", "r", wait=0.2) is None


async def test_a_whole_uow_sent_again_under_its_id_is_stored_once(client: Client) -> None:
    uow = client.unit_of_work("retry.queue", uow_id="retry-1")
    uow.add(b"a")
    assert not (await uow.commit()).duplicate
    again = client.unit_of_work("retry.queue", uow_id="retry-1")
    again.add(b"a")
    result = await again.commit()
    assert result.duplicate and result.status == "ACCEPTED"
    got = await client.receive_uow("retry.queue", "r", wait=5)
    assert got is not None
    await got.commit()
    assert await client.receive_uow("retry.queue", "r", wait=0.2) is None


async def test_bad_input_gets_precise_errors_and_changes_nothing(client: Client) -> None:
    uow = client.unit_of_work("bad.queue")
    uow.add(b"a")
    await uow.commit()
    uow.add(b"late")
    with pytest.raises(UowStateError):
        await uow.send()  # adding to a committed UOW
    uow.messages = []
    with pytest.raises(UowStateError):
        await uow.commit()  # committing twice
    got = await client.receive_uow("bad.queue", "owner", wait=5)
    assert got is not None
    got.receiver = "someone-else"
    with pytest.raises(UowNotHeld):
        await got.commit()
    got.receiver = "owner"
    with pytest.raises(UnknownUow):
        await client.uow_status("no-such-uow")
    for kwargs in ({"lifetime": 0.0}, {"lifetime": -5.0}, {"status_lifetime_multiple": 0}):
        bad = client.unit_of_work("bad.queue", **kwargs)  # type: ignore[arg-type]
        bad.add(b"x")
        with pytest.raises(InvalidArgument):
            await bad.commit()
    big_status = client.unit_of_work("bad.queue")
    big_status.user_status = b"x" * 33
    with pytest.raises(InvalidArgument):
        await big_status.commit()
    with pytest.raises(UnknownDestination):
        await client.unit_of_work("a-topic").commit()
    # Nothing of the refused requests was stored: the one UOW is still held, as it was.
    status = await client.uow_status(uow.uow_id)
    assert (status.status, status.messages, status.receiver) == ("DELIVERED", 1, "owner")
    assert await got.commit() == "PROCESSED"


# --- failover, restart, the pseudo-clock ---------------------------------------------------------


@pytest.mark.slow
async def test_persistence_variations_across_a_leader_kill_and_a_whole_cluster_restart(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    async with Client(cluster.addresses(), timeout=30) as client:
        both = client.unit_of_work("v.queue", persistent=True, persistent_status=True)
        status_only = client.unit_of_work("v.queue", persistent=False, persistent_status=True)
        messages_only = client.unit_of_work("v.queue", persistent=True, persistent_status=False)
        neither = client.unit_of_work("v.queue", persistent=False, persistent_status=False)
        for uow in (both, status_only, messages_only, neither):
            uow.add(uow.uow_id.encode())
            uow.add(b"second")
            await uow.commit()
        open_uow = client.unit_of_work("v.queue")
        open_uow.add(b"added before the kill")
        await open_uow.send()
        # Past the clock tick that follows the commits (ticks are every second).
        await asyncio.sleep(1.5)
        cluster.kill(leader)
        new_leader = await cluster.leader(exclude=leader)
        assert new_leader != leader
        assert (await client.uow_status(both.uow_id)).status == "ACCEPTED"
        assert (await client.uow_status(messages_only.uow_id)).status == "ACCEPTED"
        # Its messages went with the old leader; its persistent status says so.
        assert (await client.uow_status(status_only.uow_id)).status == "DISCARDED"
        with pytest.raises(UnknownUow):
            await client.uow_status(neither.uow_id)
        # The open UOW was backed out; its sender is told to send it again.
        assert (await client.uow_status(open_uow.uow_id)).status == "BACKEDOUT"
        open_uow.add(b"after")
        with pytest.raises(UowAborted):
            await open_uow.commit()
        cluster.start(leader)
        # A whole-cluster restart: what is persistent is all still there.
        cluster.stop_all()
        cluster.start_all()
        await cluster.leader()
        assert (await client.uow_status(both.uow_id)).status == "ACCEPTED"
        assert (await client.uow_status(status_only.uow_id)).status == "DISCARDED"
        received = {}
        while (got := await client.receive_uow("v.queue", "r", wait=2)) is not None:
            received[got.uow_id] = [m.body for m in got.messages]
            await got.commit()
        assert received == {both.uow_id: [both.uow_id.encode(), b"second"],
                            messages_only.uow_id: [messages_only.uow_id.encode(), b"second"]}
        assert (await client.uow_status(both.uow_id)).status == "PROCESSED"
        # No persistent status: gone once complete.
        with pytest.raises(UnknownUow):
            await client.uow_status(messages_only.uow_id)


@pytest.mark.slow
async def test_the_pseudo_clock_stands_still_while_the_cluster_is_down(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    await cluster.leader()
    async with Client(cluster.addresses(), timeout=30) as client:
        uow = client.unit_of_work("clock.queue", lifetime=5.0, status_lifetime_multiple=2)
        uow.add(b"short-lived")
        await uow.commit()
        created = (await client.uow_status(uow.uow_id)).created_at
        await asyncio.sleep(1.5)
        cluster.stop_all()
        # Down for longer than the lifetime: the clock does not run.
        await asyncio.sleep(6.0)
        cluster.start_all()
        await cluster.leader()
        status = await client.uow_status(uow.uow_id)
        assert status.status == "ACCEPTED", status
        assert status.clock - created < 5.0
        up = time.monotonic()

        async def timed_out() -> bool:
            return (await client.uow_status(uow.uow_id)).status == "TIMEOUT"

        await wait_for(timed_out, timeout=20)
        # It timed out after that much uptime, not before.
        assert time.monotonic() - up >= 5.0 - (status.clock - created) - 1.0
        done = await client.uow_status(uow.uow_id)
        assert done.expires_at == pytest.approx(done.completed_at + 10.0)

        async def forgotten() -> bool:
            try:
                await client.uow_status(uow.uow_id)
            except UnknownUow:
                return True
            return False

        # The status lives two lifetimes after completion, then is deleted.
        await wait_for(forgotten, timeout=25)
        leader_status = await cluster.status(await cluster.leader())
        assert leader_status is not None and leader_status.uow_clock >= done.completed_at + 10.0


BRIEF_CONVERSATION = """\
  - name: brief.queue
    kind: queue
    store: default
    units_of_work:
      conversation_timeout_seconds: 2
"""


async def receive_whole(client: Client, destination: str, receiver: str, sent: list[bytes]) -> ReceivedUnitOfWork:
    """The next UOW of a queue, which must be the one holding exactly `sent`."""
    got = await client.receive_uow(destination, receiver, wait=10)
    assert got is not None and [m.body for m in got.messages] == sent, got
    return got


@pytest.mark.slow
async def test_a_receiver_commit_across_a_leader_sigkill_is_processed_exactly_once(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Atomic visibility, receiver side: the leader is SIGKILLed before a receiver's commit
    reached the log, after it was applied but before the receiver heard, and under a commit in
    flight. The receiver's retry against the new leader is answered PROCESSED each time (a
    duplicate where the commit had been applied), and no UOW is offered again, to anyone."""
    cluster: Cluster = make_cluster(extra_destinations=BRIEF_CONVERSATION)
    first = await cluster.leader()
    async with Client(cluster.addresses(), timeout=30) as client:
        sent: dict[str, list[bytes]] = {}
        for name, destination, count in (("before-log", "held.queue", 3), ("released", "brief.queue", 2)):
            uow = client.unit_of_work(destination, uow_id=name)
            sent[name] = [f"{name} {i}/{count}".encode() for i in range(1, count + 1)]
            for body in sent[name]:
                uow.add(body)
            await uow.commit()
        held = await receive_whole(client, "held.queue", "r1", sent["before-log"])
        forgotten = await receive_whole(client, "brief.queue", "r2", sent["released"])

        # 1. Before the log: the leader is stopped, the commit goes to it, then it is killed
        # unread. The new leader has the UOW DELIVERED to r1, and the retry commits it there.
        cluster.kill(first, signal.SIGSTOP)
        commit = asyncio.create_task(held.commit())
        await asyncio.sleep(0.3)
        cluster.kill(first, signal.SIGKILL)
        assert await commit == "PROCESSED" and not held.duplicate
        second = await cluster.leader(exclude=first)
        cluster.start(first)
        # r2 never settled: once its conversation timed out (2 s of uptime) the UOW is offered
        # again, whole, and r2's late commit is refused.

        async def released() -> bool:
            info = await client.uow_status("released")
            return (info.status, info.backout_count) == ("ACCEPTED", 1)

        await wait_for(released, timeout=20)
        with pytest.raises(UowStateError):
            await forgotten.commit()
        again = await receive_whole(client, "brief.queue", "r3", sent["released"])
        assert again.backout_count == 1 and await again.commit() == "PROCESSED"

        # 2. Applied, not heard: the commit was applied (an earlier request of r1 whose answer
        # never reached it), then the leader is killed; r1 commits again on the new leader.
        # 3. In flight: the leader is killed while a commit is on its way, whichever side of the
        # log it lands on.
        for name in ("applied", "in-flight"):
            uow = client.unit_of_work("held.queue", uow_id=name)
            sent[name] = [f"{name} {i}/4".encode() for i in range(1, 5)]
            for body in sent[name]:
                uow.add(body)
            await uow.commit()
        unheard = await receive_whole(client, "held.queue", "r1", sent["applied"])
        racing = await receive_whole(client, "held.queue", "r1", sent["in-flight"])
        assert await dataclasses.replace(unheard).commit() == "PROCESSED"
        in_flight = asyncio.create_task(racing.commit())
        await asyncio.sleep(0.002)
        cluster.kill(second, signal.SIGKILL)
        assert await unheard.commit() == "PROCESSED" and unheard.duplicate
        assert await in_flight == "PROCESSED"
        await cluster.leader(exclude=second)

        # Nothing is offered again, to anyone; each was processed once, by its receiver.
        for destination in ("held.queue", "brief.queue"):
            assert await client.receive_uow(destination, "r9", wait=1.0) is None
        for name, receiver in (("before-log", "r1"), ("released", "r3"), ("applied", "r1"), ("in-flight", "r1")):
            info = await client.uow_status(name)
            assert (info.status, info.receiver, info.messages) == ("PROCESSED", receiver, len(sent[name])), info
