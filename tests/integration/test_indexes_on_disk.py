"""Indexes on disk against real member processes, with every storage driver: a backlog survives
SIGKILL and restart, and is consumed exactly once, in order."""

from __future__ import annotations

import signal

import pytest

from harness import Cluster, wait_for
from strongroom.client import Client
from strongroom.persistence.drivers import DRIVERS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("driver", sorted(DRIVERS))
async def test_backlog_survives_kill_and_restart_and_is_consumed_once_in_order(  # type: ignore[no-untyped-def]
        make_cluster, driver: str) -> None:
    cluster: Cluster = make_cluster(indexes_on_disk=True, compact_after_entries=100, driver=driver)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    # A topic durable and a queue, both with a backlog.
    sub = await client.subscribe("orders", "audit")
    await sub.close()
    total = 3000
    for destination in ("orders", "backlog.queue"):
        pub = client.publisher(destination, window=64)
        for i in range(total):
            await pub.send(f"{destination}-{i}".encode())
        await pub.flush()
        await pub.close()
    st = await cluster.status(leader)
    assert st is not None and st.indexes_on_disk
    default = next(s for s in st.stores if s.name == "default")
    assert default.messages == 2 * total
    # Consume part of the queue before the fault: acknowledged messages must stay gone.
    first = await client.subscribe("backlog.queue", "", credit=100)
    consumed = []
    for _ in range(500):
        msg = await first.next(timeout=10)
        assert msg is not None
        consumed.append(msg.body)
        # Synchronous: committed before the fault.
        await client.ack("backlog.queue", "", [msg.seq], first.subscription_id)
    await first.close()
    cluster.kill(leader, signal.SIGKILL)
    new = await cluster.leader(exclude=leader)
    cluster.start(leader)

    async def caught_up() -> bool:
        a, b = await cluster.status(leader), await cluster.status(new)
        return bool(a and b and a.role == "follower" and a.applied_index >= b.commit_index)

    await wait_for(caught_up, timeout=60.0)
    st_back = await cluster.status(leader)
    assert st_back is not None
    back = next(s for s in st_back.stores if s.name == "default")
    # The restarted member holds the backlog from its own disk (minus what was acknowledged).
    assert back.messages >= 2 * total - 500
    # Now kill the new leader too: the restarted member may take over with what it reloaded.
    cluster.kill(new, signal.SIGKILL)
    await cluster.leader(exclude=new)
    for destination, durable, skip in (("backlog.queue", "", 500), ("orders", "audit", 0)):
        sub = await client.subscribe(destination, durable, credit=256)
        got = []
        while True:
            try:
                msg = await sub.next(timeout=5)
            except TimeoutError:
                break
            got.append(msg.body)
            await sub.ack(msg)
        await sub.close()
        expected = [f"{destination}-{i}".encode() for i in range(skip, total)]
        assert got == expected, f"{destination}: {len(got)} delivered, lost/duplicated/reordered"
    assert consumed == [f"backlog.queue-{i}".encode() for i in range(500)]
    await client.close()
