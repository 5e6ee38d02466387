"""Message swapping against real member processes: past the memory budget payloads go to the
member's swap database, and are delivered intact, also by a new leader after the old one died."""

from __future__ import annotations

import hashlib
import signal

import pytest

from harness import Cluster, wait_for
from strongroom.client import Client

KIB = 1024


def body(i: int) -> bytes:
    """1 KiB, distinct per message and checkable: index, then bytes derived from it."""
    head = f"{i:08d}".encode()
    return head + (hashlib.sha256(head).digest() * 32)[:KIB - len(head)]


async def publish_all(client: Client, destination: str, total: int) -> None:
    pub = client.publisher(destination, window=64)
    for i in range(total):
        await pub.send(body(i))
    await pub.flush()
    await pub.close()


async def consume_exactly(client: Client, destination: str, total: int, idle: float = 5.0) -> list[bytes]:
    sub = await client.subscribe(destination, "", credit=512)
    got: list[bytes] = []
    while True:
        try:
            msg = await sub.next(timeout=idle)
        except TimeoutError:
            break
        got.append(bytes(msg.body))
        await sub.ack(msg)
    await sub.close()
    return got


def swapped(st: object, store: str) -> int:
    return next(s.swapped_messages for s in st.stores if s.name == store)  # type: ignore[attr-defined]


@pytest.mark.slow
async def test_memory_cluster_swaps_and_new_leader_delivers_swapped_payloads_intact(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(storage="memory", memory_budget_mb=1)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    total = 3000
    await publish_all(client, "swap.queue", total)
    st = await cluster.status(leader)
    assert st is not None and st.memory_budget_bytes == 1024 * 1024
    assert st.memory_payload_bytes <= st.memory_budget_bytes
    assert swapped(st, "default") > total // 2, st
    # Followers apply the same entries and swap on their own disk. They apply a little after the
    # leader (the commit index travels with the next append), and a follower that registered
    # after the publishes were committed by the other two catches up first: wait until each one
    # applied everything the leader had committed.
    committed = st.commit_index
    for name in cluster.names:
        if name != leader:
            async def caught_up(member: str = name) -> bool:
                st_f = await cluster.status(member)
                return st_f is not None and st_f.applied_index >= committed

            await wait_for(caught_up, timeout=20)
            st_f = await cluster.status(name)
            assert st_f is not None and swapped(st_f, "default") > total // 2, st_f
    cluster.kill(leader, signal.SIGKILL)
    new = await cluster.leader(exclude=leader)
    st_new = await cluster.status(new)
    assert st_new is not None and swapped(st_new, "default") > total // 2
    got = await consume_exactly(client, "swap.queue", total)
    assert len(got) == total, f"{len(got)} of {total} delivered"
    assert got == [body(i) for i in range(total)], "a payload came back altered, lost, duplicated or reordered"
    await client.close()


NON_REPLICATED = """\
  - name: volatile
    cluster: default
    replicated: false
"""
NON_REPLICATED_DESTINATIONS = """\
  - name: "volatile.*"
    kind: queue
    store: volatile
"""


async def test_non_replicated_store_swaps_and_delivers_intact(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(members=1, memory_budget_mb=1, extra_stores=NON_REPLICATED,
                                    extra_destinations=NON_REPLICATED_DESTINATIONS)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    total = 2500
    await publish_all(client, "volatile.swap", total)
    st = await cluster.status(leader)
    assert st is not None and swapped(st, "volatile") > total // 2
    # The disk-sync replicated store is not swapped (its payloads are on disk in the log).
    assert swapped(st, "default") == 0
    got = await consume_exactly(client, "volatile.swap", total)
    assert got == [body(i) for i in range(total)]
    st = await cluster.status(leader)
    assert st is not None and swapped(st, "volatile") == 0 and st.memory_payload_bytes == 0
    await client.close()
