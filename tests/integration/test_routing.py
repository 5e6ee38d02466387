"""Routed stores end to end: real etcd per site, real members, real routers, started by the local
launcher (each cluster a site of its own). Clusters have one member each (memory storage) to keep
every test under a minute: what is under test is the routing between clusters, not the
replication inside one.

Needs the member side of routing (Message.origin applied with marks, ListOriginMarks).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from routing_sites import Sites, sites, zoned_realm

from strongroom.client import Subscription

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ONE_ZONE = {"world": ["rio", "london", "tokyo"]}
CHAINED = {"z1": ["rio", "london"], "z2": ["london", "tokyo"]}


async def wait_route(s: Sites, at: str, neighbour: str, destination: str, timeout: float = 15.0) -> None:
    """Until `at` holds the route durable to `neighbour` on `destination`: from then on what is
    published at `at` is forwarded (what was published before its router learned of the
    interest is not, by design)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = await s.client(at).list_durables(store="wide", destination=destination)
        if any(d.name == f"sr.route.{neighbour}" for d in listed.durables):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{at} never opened a route to {neighbour} for {destination}")


async def drain(sub: Subscription, quiet: float = 2.0) -> list[tuple[bytes, str]]:
    """Every message the subscription gets until none came for `quiet` seconds: (body,
    origin cluster), each acknowledged."""
    got = []
    while True:
        try:
            m = await sub.next(timeout=quiet)
        except TimeoutError:
            return got
        got.append((m.body, m.origin.cluster if m.origin is not None else ""))
        await m.ack()


async def collect(sub: Subscription, want: int, timeout: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            m = await sub.next(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        out.append(m.body)
        await m.ack()
    return out


async def test_one_zone_reaches_the_interested_clusters_once(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], ONE_ZONE)) as s:
        at_rio = await s.client("rio").subscribe("wide.a", "billing")
        at_tokyo = await s.client("tokyo").subscribe("wide.a", "billing")
        for c in ("rio", "tokyo"):
            await wait_route(s, "london", c, "wide.a")
        bodies = [f"m{i}".encode() for i in range(200)]
        for b in bodies:
            await s.client("london").publish("wide.a", b)
        assert await collect(at_rio, 200, 30) == bodies
        assert await collect(at_tokyo, 200, 30) == bodies
        assert await drain(at_rio, 1.0) == [] and await drain(at_tokyo, 1.0) == []
        # Stored once at each interested cluster, and nothing where nobody wants it: london sent
        # nothing to... itself; rio and tokyo have no route to each other for london's messages.
        london = await s.status("london")
        forwarded = {p.cluster: p.forwarded_messages for p in london.peers}
        assert forwarded == {"rio": 200, "tokyo": 200}
        assert all(p.waiting_messages == 0 for p in london.peers)
        rio = await s.status("rio")
        assert {p.cluster: p.received_messages for p in rio.peers}["london"] == 200


async def test_a_cluster_without_interest_stores_nothing(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], ONE_ZONE)) as s:
        at_rio = await s.client("rio").subscribe("wide.a", "billing")
        await wait_route(s, "london", "rio", "wide.a")
        for i in range(20):
            await s.client("london").publish("wide.a", f"m{i}".encode())
        assert len(await collect(at_rio, 20, 20)) == 20
        london = await s.status("london")
        assert {p.cluster: p.forwarded_messages for p in london.peers}["tokyo"] == 0
        # Tokyo's only durable is its own route to rio (for messages published at tokyo), empty.
        tokyo = await s.client("tokyo").list_durables(store="wide")
        assert [(d.name, d.pending_messages) for d in tokyo.durables] == [("sr.route.rio", 0)]
        tokyo_status = await s.client("tokyo").status()
        stored = [st.messages for cs in tokyo_status for st in cs.stores if st.name == "wide"]
        assert stored and all(n == 0 for n in stored)


async def test_chained_zones_pass_through_london(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], CHAINED)) as s:
        at_tokyo = await s.client("tokyo").subscribe("wide.a", "t")
        at_rio = await s.client("rio").subscribe("wide.a", "r")
        await wait_route(s, "rio", "london", "wide.a")  # tokyo's interest, across two hops
        await wait_route(s, "tokyo", "london", "wide.a")
        await wait_route(s, "london", "tokyo", "wide.a")
        await wait_route(s, "london", "rio", "wide.a")
        for i in range(50):
            await s.client("rio").publish("wide.a", f"r{i}".encode())
            await s.client("tokyo").publish("wide.a", f"t{i}".encode())
        # Each durable gets its own cluster's messages and the other end's, each once and in order.
        got_tokyo, got_rio = await collect(at_tokyo, 100, 30), await collect(at_rio, 100, 30)
        for got in (got_tokyo, got_rio):
            assert [b for b in got if b.startswith(b"r")] == [f"r{i}".encode() for i in range(50)]
            assert [b for b in got if b.startswith(b"t")] == [f"t{i}".encode() for i in range(50)]
        # Nothing comes back to where it was published.
        assert await drain(at_rio, 1.0) == [] and await drain(at_tokyo, 1.0) == []
        london = await s.status("london")
        assert {p.cluster: p.forwarded_messages for p in london.peers} == {"rio": 50, "tokyo": 50}


async def test_kill_9_of_the_active_router_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], ONE_ZONE)) as s:
        standby = s.start_replica("london", "r2")
        at_rio = await s.client("rio").subscribe("wide.a", "billing")
        at_tokyo = await s.client("tokyo").subscribe("wide.a", "billing")
        for c in ("rio", "tokyo"):
            await wait_route(s, "london", c, "wide.a")
        confirmed: list[bytes] = []

        async def publish(n: int) -> None:
            pub = s.client("london").publisher("wide.a", window=64)
            futures = []
            for i in range(n):
                futures.append(await pub.send(f"m{i:05d}".encode()))
                if i % 50 == 49:
                    await asyncio.sleep(0.05)  # continuous forwarding, about 1,000 a second
            for i, f in enumerate(futures):
                await f
                confirmed.append(f"m{i:05d}".encode())
            await pub.close()

        publishing = asyncio.create_task(publish(3000))
        await asyncio.sleep(1.0)
        active = s.local.routers["london"]
        os.kill(active.pid, signal.SIGKILL)
        await publishing
        assert standby.alive()
        got_rio = await collect(at_rio, len(confirmed), 45)
        got_tokyo = await collect(at_tokyo, len(confirmed), 45)
        for got in (got_rio, got_tokyo):
            assert got == confirmed  # every confirmed message, once, in order
        deadline = time.monotonic() + 15
        while True:
            try:
                status = await s.status("london")
                break
            except Exception:  # noqa: BLE001 - r2 binds the address once elected
                assert time.monotonic() < deadline
                await asyncio.sleep(0.3)
        assert status.active and status.replica == "r2"


async def test_a_remote_router_down_keeps_the_backlog_waiting(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london"], {"z": ["rio", "london"]})) as s:
        at_rio = await s.client("rio").subscribe("wide.a", "billing")
        await wait_route(s, "london", "rio", "wide.a")
        rio_router = s.local.routers["rio"]
        rio_router.stop(grace=3.0)
        for i in range(100):
            await s.client("london").publish("wide.a", f"m{i}".encode())
        await asyncio.sleep(2.5)
        london = await s.status("london")
        peer = next(p for p in london.peers if p.cluster == "rio")
        assert peer.waiting_messages == 100
        assert peer.oldest_waiting_seconds >= 1.0  # never "lag 0" while messages wait
        assert peer.last_error
        s.local.routers["rio"] = s.start_replica("rio", "r1b")
        assert await collect(at_rio, 100, 40) == [f"m{i}".encode() for i in range(100)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            peer = next(p for p in (await s.status("london")).peers if p.cluster == "rio")
            if peer.waiting_messages == 0:
                break
            await asyncio.sleep(0.5)
        assert peer.waiting_messages == 0 and peer.oldest_waiting_seconds == 0



