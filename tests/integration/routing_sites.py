"""Zoned realms for the routing tests: every cluster a site of its own (own etcd, own realm
service), started by the local launcher with a router per cluster at a free port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc

from strongroom.api.v1 import router_pb2, router_pb2_grpc
from strongroom.client import Client
from strongroom.local.etcdproc import free_port
from strongroom.local.launcher import LocalCluster, start_router
from strongroom.local.process import ServiceProcess
from strongroom.realm.model import parse_realm


def zoned_realm(clusters: list[str], zones: dict[str, list[str]]) -> str:
    """One-member memory clusters (fast: the routing is under test, not the replication), each
    with a router at a free port, a routed store `wide` over `zones`, topics `wide.*`."""
    text = "clusters:\n"
    for c in clusters:
        text += (f"  - name: {c}\n    storage: memory\n    lease_ttl_seconds: 2\n    members: [{{name: {c}1}}]\n"
                 f"    router: {{address: \"127.0.0.1:{free_port()}\"}}\n")
    text += "zones:\n" + "".join(f"  - {{name: {z}, clusters: [{', '.join(cs)}]}}\n" for z, cs in zones.items())
    text += f"stores:\n  - {{name: wide, routed: true, zones: [{', '.join(zones)}]}}\n"
    text += "destinations:\n  - {name: \"wide.*\", store: wide}\n"
    return text


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
        async with grpc.aio.insecure_channel(self.router_address(cluster)) as channel:
            stub = router_pb2_grpc.RouterServiceStub(channel)
            reply: router_pb2.RouterStatus = await stub.Status(router_pb2.RouterStatusRequest(), timeout=3.0)
            return reply

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
