"""Zoned realms for the routing tests: every cluster a site of its own (own etcd, own realm
service), started by the local launcher with a router per cluster at a free port."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path

from strongroom.api.v1 import router_pb2, router_pb2_grpc
from strongroom.client import Client
from strongroom.local.etcdproc import free_port
from strongroom.local.launcher import LocalCluster, start_router
from strongroom.local.leader import wait_for_leader
from strongroom.local.process import ServiceProcess
from strongroom.realm.model import parse_realm
from strongroom.channels import open_channel


def zoned_realm(clusters: list[str], zones: dict[str, list[str]],
                shapes: dict[str, tuple[str, int]] | None = None, extra: str = "") -> str:
    """One-member memory clusters (fast: the routing is under test, not the replication), each
    with a router at a free port, a routed store `wide` over `zones`, topics `wide.*`. `shapes`
    gives a cluster another (storage, member count): a test of a member failover inside it.
    Members are named `<cluster>1`, `<cluster>2`, ... `extra`: more top-level sections
    (durable templates and endpoints)."""
    text = "clusters:\n"
    for c in clusters:
        storage, members = (shapes or {}).get(c, ("memory", 1))
        names = ", ".join(f"{{name: {c}{i}}}" for i in range(1, members + 1))
        text += (f"  - name: {c}\n    storage: {storage}\n    lease_ttl_seconds: 2\n    members: [{names}]\n"
                 f"    router: {{address: \"127.0.0.1:{free_port()}\"}}\n")
    text += "zones:\n" + "".join(f"  - {{name: {z}, clusters: [{', '.join(cs)}]}}\n" for z, cs in zones.items())
    text += f"stores:\n  - {{name: wide, routed: true, zones: [{', '.join(zones)}]}}\n"
    text += "destinations:\n  - {name: \"wide.*\", store: wide}\n"
    return text + extra


class Sites:
    """A started zoned realm: clients per cluster, the routers, their status."""

    def __init__(self, local: LocalCluster, text: str) -> None:
        self.local = local
        self.realm = parse_realm(text)
        self.clients: dict[str, Client] = {}

    def client(self, cluster: str) -> Client:
        if cluster not in self.clients:
            self.clients[cluster] = Client(self.local.endpoints(cluster), timeout=15.0)
        return self.clients[cluster]

    def router_address(self, cluster: str) -> str:
        c = self.realm.cluster(cluster)
        assert c is not None and c.router is not None
        return c.router.address

    async def status(self, cluster: str) -> router_pb2.RouterStatus:
        async with open_channel(self.router_address(cluster), []) as channel:
            stub = router_pb2_grpc.RouterServiceStub(channel)
            reply: router_pb2.RouterStatus = await stub.Status(router_pb2.RouterStatusRequest(), timeout=3.0)
            return reply

    async def wait_route(self, at: str, neighbour: str, destination: str, timeout: float = 15.0) -> None:
        """Until `at` holds the route durable to `neighbour` on `destination`: from then on what
        is published at `at` is forwarded (what was published before its router learned of the
        interest is not, by design)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = await self.client(at).list_durables(store="wide", destination=destination)
            if any(d.name == f"sr.route.{neighbour}" for d in listed.durables):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"{at} never opened a route to {neighbour} for {destination}")

    async def kill_leader(self, cluster: str) -> str:
        """SIGKILL the member serving as `cluster`'s leader now (by its pid); its name."""
        name = await self.local.leader_name(cluster)
        assert name is not None, f"{cluster} has no leader to kill"
        self.local.member(cluster, name).kill()
        return name

    async def wait_leader(self, cluster: str, exclude: Collection[str] = (), timeout: float = 20.0) -> str:
        """Until a member of `cluster` not in `exclude` serves as leader; its name."""
        found = await wait_for_leader(self.local.endpoints(cluster), timeout, exclude=exclude, interval=0.2)
        return found.member

    def start_replica(self, cluster: str, replica: str) -> ServiceProcess:
        """Another router replica of `cluster` (a standby while the first is active)."""
        proc = start_router(self.local.site_of(cluster).etcd.endpoint, cluster, self.local.data_dir,
                            self.router_address(cluster), replica=replica)
        self.local.routers[f"{cluster}/{replica}"] = proc
        return proc


@asynccontextmanager
async def sites(tmp_path: Path, text: str) -> AsyncIterator[Sites]:
    """Start the realm's sites, members and routers; stop every process after (by pid)."""
    local = LocalCluster(tmp_path / "data", write_state=True)
    started = Sites(local, text)
    try:
        await local.start(started.realm, text, "routing-test.yaml", progress=lambda _: None, timeout=60.0)
        yield started
    finally:
        for c in started.clients.values():
            await c.close()
        local.stop(grace=3.0)
