"""A router follows where its cluster's members are, against a real etcd: members that register
later, move (register again at another address) or that a realm version adds or removes are
where its client calls next; a registration that lapses keeps the member's last address."""

from __future__ import annotations

import asyncio
import time

from strongroom.api.v1 import router_pb2 as rpb
from strongroom.client import Client
from strongroom.errors import ConnectionFailed
from strongroom.etcd import EtcdClient
from strongroom.keys import member_key
from strongroom.local.etcdproc import EtcdProcess, free_port
from strongroom.persistence.membership import MemberRecord, member_addresses
from strongroom.realm.model import parse_realm
from strongroom.routing.forwarder import ForwardLink
from strongroom.routing.router import Router, RouterConfig

# Cluster names of their own: the session's etcd is shared with other tests.
REALM = """\
clusters:
  - name: mv-rio
    members: [{members}]
    router: {{address: "127.0.0.1:{port}"}}
  - name: mv-london
    members: [{{name: l1}}]
    router: {{address: "127.0.0.1:{port2}"}}
zones:
  - {{name: z, clusters: [mv-rio, mv-london]}}
stores:
  - {{name: wide, routed: true, zones: [z]}}
destinations:
  - {{name: "wide.*", store: wide}}
"""
PORT, PORT2 = free_port(), free_port()


def realm(*members: str) -> str:
    return REALM.format(members=", ".join(f"{{name: {m}}}" for m in members), port=PORT, port2=PORT2)


class NoNeighbour:
    """Links to neighbours that never answer (the members are under test, not the routes)."""

    async def open_forward(self, neighbour: str) -> ForwardLink:
        raise ConnectionFailed(f"{neighbour} is not reachable in this test")

    async def exchange(self, neighbour: str, request: rpb.InterestExchange) -> rpb.InterestExchange:
        raise ConnectionFailed(f"{neighbour} is not reachable in this test")


async def until(what: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not within the timeout"
        await asyncio.sleep(0.05)


async def register(etcd: EtcdClient, member: str, address: str) -> None:
    """What a member does at start (under its lease; no lease here: the test removes it)."""
    await etcd.put(member_key("mv-rio", member), MemberRecord(address=address, log_format=6).to_bytes())


async def test_the_router_follows_its_members_as_they_register_move_and_change_with_the_realm(
        etcd: EtcdProcess) -> None:
    client_etcd = EtcdClient(etcd.endpoint)
    await client_etcd.delete_prefix("/strongroom/clusters/mv-rio/")
    first = parse_realm(realm("r1", "r2", "r3"))
    cluster = first.cluster("mv-rio")
    assert cluster is not None
    await register(client_etcd, "r1", "127.0.0.1:1001")
    # At start only r1 registered: the router's client begins with it alone (as main does).
    endpoints = await member_addresses(client_etcd, "mv-rio", cluster.members, patience=0.5)
    assert endpoints == ["127.0.0.1:1001"]
    client = Client(endpoints, timeout=1.0)
    router = Router(RouterConfig("mv-rio", "r1", f"127.0.0.1:{PORT}"), first, client, NoNeighbour(), client_etcd)
    await router.start()
    try:
        # r2 registers later; r1 moves (a new pod address); r3 registers: the client follows.
        await register(client_etcd, "r2", "127.0.0.1:1002")
        await until(lambda: client.endpoints == ["127.0.0.1:1001", "127.0.0.1:1002"])
        await register(client_etcd, "r1", "127.0.0.1:1003")
        await until(lambda: client.endpoints == ["127.0.0.1:1003", "127.0.0.1:1002"])
        await register(client_etcd, "r3", "127.0.0.1:1004")
        await until(lambda: client.endpoints == ["127.0.0.1:1003", "127.0.0.1:1002", "127.0.0.1:1004"])
        # r4 registers before a realm version makes it a member (a member may start first).
        await register(client_etcd, "r4", "127.0.0.1:1005")
        await asyncio.sleep(0.3)
        assert client.endpoints == ["127.0.0.1:1003", "127.0.0.1:1002", "127.0.0.1:1004"]  # not a member yet
        router.update_realm(parse_realm(realm("r1", "r2", "r3", "r4", "r5")))
        await until(lambda: client.endpoints == ["127.0.0.1:1003", "127.0.0.1:1002", "127.0.0.1:1004",
                                                 "127.0.0.1:1005"])
        await register(client_etcd, "r5", "127.0.0.1:1006")
        await until(lambda: client.endpoints[-1] == "127.0.0.1:1006")
        # r2's registration lapses (down): its last address stays; a realm version removes it.
        await client_etcd.delete(member_key("mv-rio", "r2"))
        await asyncio.sleep(0.3)
        assert "127.0.0.1:1002" in client.endpoints
        router.update_realm(parse_realm(realm("r1", "r3", "r4")))
        await until(lambda: client.endpoints == ["127.0.0.1:1003", "127.0.0.1:1004", "127.0.0.1:1005"])
    finally:
        await router.stop()
        await client.close()
        await client_etcd.delete_prefix("/strongroom/clusters/mv-rio/")
        await client_etcd.close()
