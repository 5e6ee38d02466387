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
from harness import scrape, value
from routing_sites import sites, zoned_realm

from strongroom.client import Subscription

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ONE_ZONE = {"world": ["rio", "london", "tokyo"]}
CHAINED = {"z1": ["rio", "london"], "z2": ["london", "tokyo"]}


async def drain(sub: Subscription, quiet: float = 2.0, ack: bool = True) -> list[tuple[bytes, str]]:
    """Every message the subscription gets until none came for `quiet` seconds: (body,
    origin cluster), each acknowledged (unless not `ack`)."""
    got: list[tuple[bytes, str]] = []
    while True:
        try:
            m = await sub.next(timeout=quiet)
        except TimeoutError:
            return got
        got.append((m.body, m.origin.cluster if m.origin is not None else ""))
        if ack:
            await m.ack()


async def collect(sub: Subscription, want: int, timeout: float, ack: bool = True) -> list[bytes]:
    """Up to `want` bodies within `timeout` seconds, each acknowledged (unless not `ack`)."""
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            m = await sub.next(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        out.append(m.body)
        if ack:
            await m.ack()
    return out


async def test_one_zone_reaches_the_interested_clusters_once(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], ONE_ZONE)) as s:
        at_rio = await s.client("rio").subscribe("wide.a", "billing")
        at_tokyo = await s.client("tokyo").subscribe("wide.a", "billing")
        for c in ("rio", "tokyo"):
            await s.wait_route("london", c, "wide.a")
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
        # The same on the routers' metrics endpoints, and the messages stored at rio's member.
        metrics = await asyncio.to_thread(scrape, london.metrics_url)
        who = {"cluster": "london", "router": london.replica}
        assert value(metrics, "strongroom_router_active", **who) == 1
        for remote in ("rio", "tokyo"):
            assert value(metrics, "strongroom_route_forwarded_messages_total", **who, remote_cluster=remote) == 200
            assert value(metrics, "strongroom_route_waiting_messages", **who, remote_cluster=remote) == 0
            assert value(metrics, "strongroom_route_connected", **who, remote_cluster=remote) == 1
        received = await asyncio.to_thread(scrape, rio.metrics_url)
        assert value(received, "strongroom_route_received_messages_total", cluster="rio",
                     remote_cluster="london") == 200
        (member,) = [cs for cs in await s.client("rio").status() if cs.role == "leader"]
        stored = await asyncio.to_thread(scrape, member.metrics_url)
        assert value(stored, "strongroom_messages_stored_total", cluster="rio", store="wide") == 200


async def test_a_cluster_without_interest_stores_nothing(tmp_path: Path) -> None:
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], ONE_ZONE)) as s:
        at_rio = await s.client("rio").subscribe("wide.a", "billing")
        await s.wait_route("london", "rio", "wide.a")
        for i in range(20):
            await s.client("london").publish("wide.a", f"m{i}".encode())
        assert len(await collect(at_rio, 20, 20)) == 20
        london = await s.status("london")
        assert {p.cluster: p.forwarded_messages for p in london.peers}["tokyo"] == 0
        # Tokyo opens it once its router heard of rio's interest, which may come after london's
        # 20 messages went through (they take well under a second).
        await s.wait_route("tokyo", "rio", "wide.a")
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
        await s.wait_route("rio", "london", "wide.a")  # tokyo's interest, across two hops
        await s.wait_route("tokyo", "london", "wide.a")
        await s.wait_route("london", "tokyo", "wide.a")
        await s.wait_route("london", "rio", "wide.a")
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
            await s.wait_route("london", c, "wide.a")
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
        await s.wait_route("london", "rio", "wide.a")
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





ENDPOINTS = """\
durable_templates:
  - {name: desk, kind: standard}
endpoints:
  - {name: quotes, store: wide, template: desk}
  - {name: trades, store: wide, template: desk}
"""


async def test_an_endpoint_durable_is_interest_and_its_matcher_decides_what_is_forwarded(tmp_path: Path) -> None:
    """A content durable opened at Rio through endpoint `quotes` with matcher sym="A" (the FTL
    content model: it sees what any endpoint of the store publishes that matches) receives, once,
    what London and Tokyo publish to either endpoint with sym="A"; what it does not want is not
    forwarded (Rio stores nothing else: no other cluster there wants it)."""
    async with sites(tmp_path, zoned_realm(["rio", "london", "tokyo"], ONE_ZONE, extra=ENDPOINTS)) as s:
        at_rio = await s.client("rio").subscribe("quotes", "desk", matcher={"sym": "A"})
        for at in ("london", "tokyo"):
            for endpoint in ("quotes", "trades"):
                await s.wait_route(at, "rio", endpoint)
        # The route durables on endpoints hold one endpoint each (not the store's content).
        listed = await s.client("london").list_durables(store="wide")
        assert sorted((d.name, d.destination, d.content) for d in listed.durables) == [
            ("sr.route.rio", "quotes", False), ("sr.route.rio", "trades", False)]
        for i in range(10):
            for endpoint in ("quotes", "trades"):
                for sym in ("A", "B"):
                    await s.client("london").publish(endpoint, f"london-{endpoint}-{sym}{i}".encode(), {"sym": sym})
            await s.client("tokyo").publish("trades", f"tokyo-trades-A{i}".encode(), {"sym": "A"})
            await s.client("london").publish("wide.a", f"london-topic-A{i}".encode(), {"sym": "A"})
        got = await collect(at_rio, 30, 30, ack=False)
        got += [b for b, _ in await drain(at_rio, 1.5, ack=False)]
        for source in ("london-quotes", "london-trades", "tokyo-trades"):
            assert [b for b in got if b.startswith(source.encode())] == [f"{source}-A{i}".encode() for i in range(10)]
        assert len(got) == 30  # once each, nothing of sym B, nothing of the topic
        # Rio stored only those (none acknowledged yet): the others never crossed the link.
        stored = [st.messages for cs in await s.client("rio").status() for st in cs.stores if st.name == "wide"]
        assert stored == [30]
        london = await s.status("london")
        assert {p.cluster: p.forwarded_messages for p in london.peers} == {"rio": 20, "tokyo": 0}
        marks = {(m.cluster, m.destination) for m in await s.client("rio").origin_marks("wide")}
        assert marks == {("london", "quotes"), ("london", "trades"), ("tokyo", "trades")}
        interest = {r.cluster: r for r in london.interest}
        (wanted,) = interest["rio"].interests
        assert wanted.content and wanted.destination == "quotes" and "sym" in wanted.matcher.fields


RING = {"ab": ["a", "b"], "bc": ["b", "c"], "cd": ["c", "d"], "da": ["d", "a"]}
# The breadth-first tree of every origin over the ring (neighbours in name order): which
# neighbour each cluster passes an origin's messages to. a: a>b>c, a>d; b: b>a>d, b>c;
# c: c>b>a, c>d; d: d>a>b, d>c.
RING_EDGES = {
    ("a", "b"): {"a", "d"}, ("a", "d"): {"a", "b"},
    ("b", "a"): {"b", "c"}, ("b", "c"): {"a", "b"},
    ("c", "b"): {"c"}, ("c", "d"): {"c"},
    ("d", "a"): {"d"}, ("d", "c"): {"d"},
}


async def test_a_cycle_of_zones_stores_each_message_once_everywhere(tmp_path: Path) -> None:
    clusters, n = ["a", "b", "c", "d"], 25
    async with sites(tmp_path, zoned_realm(clusters, RING)) as s:
        subs = {c: await s.client(c).subscribe("wide.a", "desk") for c in clusters}
        for at, neighbour in RING_EDGES:
            await s.wait_route(at, neighbour, "wide.a")
        published: dict[str, list[int]] = {}  # origin -> its store sequences there, in order
        for i in range(n):
            for c in clusters:
                result = await s.client(c).publish("wide.a", f"{c}{i}".encode())
                published.setdefault(c, []).append(result.message_seq)
        for c in clusters:
            # Each cluster's durable: every cluster's messages (its own too), each once and in
            # per-origin order; nothing comes back round the ring.
            got = await collect(subs[c], 4 * n, 30, ack=False)
            got += [b for b, _ in await drain(subs[c], 1.0, ack=False)]
            for origin in clusters:
                assert [b for b in got if b.startswith(origin.encode())] == [f"{origin}{i}".encode() for i in range(n)]
            assert len(got) == 4 * n, c
            # Stored once: the store holds exactly those (none of them acknowledged yet).
            stored = [st.messages for cs in await s.client(c).status() for st in cs.stores if st.name == "wide"]
            assert stored and all(m == 4 * n for m in stored), (c, stored)
            # The marks: each other origin's last store sequence, none for its own messages.
            marks = {m.cluster: m.sequence for m in await s.client(c).origin_marks("wide", "wide.a")}
            assert marks == {o: published[o][-1] for o in clusters if o != c}, c
            in_status = {m.cluster: m.sequence for cs in await s.client(c).status() for st in cs.stores
                         if st.name == "wide" for m in st.origin_marks if m.destination == "wide.a"}
            assert in_status == marks, c
        # One path per origin: each link carried the messages of exactly the origins whose tree
        # uses it, and every cluster received each other origin's messages once.
        for c in clusters:
            status = await s.status(c)
            forwarded = {p.cluster: p.forwarded_messages for p in status.peers}
            received = {p.cluster: p.received_messages for p in status.peers}
            assert forwarded == {to: n * len(RING_EDGES[(c, to)]) for (at, to) in RING_EDGES if at == c}, c
            assert received == {frm: n * len(RING_EDGES[(frm, c)]) for (frm, to) in RING_EDGES if to == c}, c
            assert sum(received.values()) == 3 * n
            assert all(p.waiting_messages == 0 for p in status.peers), c
