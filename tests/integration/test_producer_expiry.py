"""Idle producers' deduplication windows, on a real 3-member cluster: a producer id that
publishes nothing for the cluster's `producer_idle_expiry_seconds` of pseudo-clock has its
window forgotten on every member (the leader's `ForgetProducersOp` through the log), so a
re-send of its old message is stored again; a producer that keeps publishing keeps its
window across a leader kill; status, `strongroom status --json` and the metrics count them."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from harness import Cluster, drain, scrape, strongroom, value, wait_for

from strongroom.api.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc
from strongroom.channels import open_channel
from strongroom.client import Client

IDLE = 2.0


async def _publish(cluster: Cluster, producer: str, sequence: int, body: bytes) -> messaging_pb2.PublishResponse:
    leader = await cluster.leader()
    async with open_channel(cluster.address(leader), []) as ch:
        stub = messaging_pb2_grpc.MessagingServiceStub(ch)
        msg = common_pb2.Message(body=body, producer_id=producer, sequence=sequence)
        return await stub.Publish(messaging_pb2.PublishRequest(destination="pe.queue", message=msg), timeout=10)


async def _windows(cluster: Cluster) -> list[int]:
    out = []
    for name in cluster.names:
        st = await cluster.status(name)
        out.append(st.dedup_producers if st is not None else -1)
    return out


@pytest.mark.slow
async def test_an_idle_producer_is_forgotten_everywhere_and_a_busy_one_is_kept_across_a_failover(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(cluster_extra=f"    producer_idle_expiry_seconds: {IDLE}\n")
    assert not (await _publish(cluster, "quiet", 1, b"q1")).duplicate
    busy = 0
    stop = asyncio.Event()

    async def keep_publishing() -> None:
        nonlocal busy
        while not stop.is_set():
            try:
                reply = await _publish(cluster, "busy", busy + 1, b"b%d" % (busy + 1))
            except Exception:  # noqa: BLE001 - a leader change under way: the same sequence again
                await asyncio.sleep(0.2)
                continue
            assert reply.message_seq > 0
            busy += 1
            await asyncio.sleep(0.3)

    task = asyncio.create_task(keep_publishing())
    try:
        await wait_for(lambda: _windows_are(cluster, [2, 2, 2]), timeout=20)
        # Forgotten on every member (the leader's decision reaches them through the log), while
        # the busy producer publishes on.
        await wait_for(lambda: _windows_are(cluster, [1, 1, 1]), timeout=40)
        killed = await cluster.leader()
        cluster.kill(killed)
        survivors = [n for n in cluster.names if n != killed]
        await cluster.leader(exclude=killed)
        await asyncio.sleep(2 * IDLE)
        for name in survivors:
            st = await cluster.status(name)
            assert st is not None and st.dedup_producers == 1, (name, st)
    finally:
        stop.set()
        await task
    assert busy > 5
    # The busy producer's window survived the failover: its last message again is a duplicate.
    again = await _publish(cluster, "busy", busy, b"b%d" % busy)
    assert again.duplicate
    # The documented consequence: the quiet producer's old message, sent again, is new.
    resent = await _publish(cluster, "quiet", 1, b"q1")
    assert not resent.duplicate and resent.message_seq > 0

    leader = await cluster.leader()
    st = await cluster.status(leader)
    assert st is not None and st.dedup_producers == 2  # busy, and quiet's new window
    samples = scrape(st.metrics_url)
    assert value(samples, "strongroom_dedup_producers", member=leader) == 2
    assert value(samples, "strongroom_dedup_producers_forgotten_total", member=leader) >= 1
    shown = strongroom(",".join(cluster.addresses()), "status", "--json")
    assert shown.returncode == 0, shown.stderr
    listed = {s["member"]: int(s["dedup_producers"]) for s in json.loads(shown.stdout) if "member" in s}
    assert listed == {name: 2 for name in survivors}, listed
    text = strongroom(",".join(cluster.addresses()), "status")
    assert "deduplication windows of 2 producer id(s)" in text.stdout, text.stdout
    async with Client(cluster.addresses(), timeout=30) as client:
        sub = await client.subscribe("pe.queue", credit=1024)
        got = await drain(sub, busy + 2, timeout=3.0)
        await sub.close()
    bodies = [m.body for m in got]
    assert bodies.count(b"q1") == 2 and len(bodies) == busy + 2, bodies


async def _windows_are(cluster: Cluster, want: list[int]) -> bool:
    return await _windows(cluster) == want


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
