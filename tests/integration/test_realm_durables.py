"""What a realm version does to durables, on a real 3-member cluster: static durables declared
in the realm hold the latest value before any subscriber comes; a durable whose destination's
rule changes kind stops taking messages, keeps its backlog, is shown unreachable, comes back when
the realm reaches it again, and is removed by an operator's delete (client and CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from harness import Cluster, leader_client, put_realm, realm_yaml, running_cluster, wait_for
from strongroom.api.v1 import admin_pb2
from strongroom.client import Client, Subscription
from strongroom.errors import DurableDeleted, DurableUnreachable, UnknownDurable

STORES = """\
    durables:
      - name: board
        destination: ticker
        kind: last-value
        key_field: sym
  - name: lv
    cluster: default
    durables:
      - name: latest
        endpoint: prices
"""
TEMPLATES = """\
durable_templates:
  - name: latest
    kind: last-value
    key_field: sym
  - name: std
    kind: standard
endpoints:
  - name: prices
    store: lv
    template: latest
"""
# Version 2: `quotes` becomes an endpoint of the default store.
QUOTES_ENDPOINT = """\
  - name: quotes
    store: default
    template: std
"""


def realm(quotes_endpoint: bool = False) -> str:
    return realm_yaml(extra_stores=STORES, extra_sections=TEMPLATES + (QUOTES_ENDPOINT if quotes_endpoint else ""))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("realm-durables"), realm()) as c:
        yield c


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with leader_client(cluster) as c:
        yield c


async def durable_status(cluster: Cluster, destination: str, name: str,
                         content: bool = False) -> admin_pb2.DurableStatus | None:
    status = await cluster.status(await cluster.leader())
    assert status is not None
    return next((d for s in status.stores for d in s.durables
                 if d.destination == destination and d.name == name and d.content == content), None)


async def test_a_static_last_value_durable_holds_the_latest_before_anyone_subscribes(client: Client,
                                                                                    cluster: Cluster) -> None:
    for sym, px in (("A", 1), ("B", 1), ("A", 2)):
        result = await client.publish("ticker", f"{sym}{px}".encode(), fields={"sym": sym})
        assert result.stored  # the static durable wants it: stored though nobody subscribed yet
    board = await durable_status(cluster, "ticker", "board")
    assert board is not None and board.static and board.pending_messages == 2 and not board.unreachable
    a = await client.subscribe("ticker", "board", matcher={"sym": "A"})
    got = await a.next(timeout=5)
    assert got.body == b"A2"
    b = await client.subscribe("ticker", "board", matcher={"sym": "B"})
    assert (await b.next(timeout=5)).body == b"B1"
    # Through an endpoint: the static durable of the endpoint's store, of its template's kind.
    await client.publish("prices", b"X7", fields={"sym": "X"})
    x = await client.subscribe("prices", "latest", matcher={"sym": "X"})
    assert (await x.next(timeout=5)).body == b"X7"
    for sub in (a, b, x):
        await sub.close()


async def test_a_rule_changing_kind_suspends_its_durables_until_the_realm_reaches_them_again(
        client: Client, cluster: Cluster) -> None:
    old = await client.subscribe("quotes", "board")
    for i in range(3):
        await client.publish("quotes", f"q{i}".encode())
    first = await old.next(timeout=5)
    assert first.body == b"q0"  # delivered, not acknowledged: still pending
    await put_realm(cluster.etcd, realm(quotes_endpoint=True), 2)

    async def unreachable() -> bool:
        d = await durable_status(cluster, "quotes", "board")
        return d is not None and d.unreachable
    await wait_for(unreachable, timeout=15)
    with pytest.raises(DurableUnreachable):  # its subscriber is told, and not reopened elsewhere
        while True:
            await old.next(timeout=5)
    assert old.closed_reason == "DURABLE_UNREACHABLE"
    d = await durable_status(cluster, "quotes", "board")
    assert d is not None and d.unreachable_reason == "'quotes' is now an endpoint" and d.pending_messages == 3
    # Publishes to the endpoint `quotes` reach the endpoint's durables, not the suspended one.
    fresh: Subscription = await client.subscribe("quotes", "board")  # a content durable now: another one
    for i in range(4):
        await client.publish("quotes", f"e{i}".encode())
    got = [(await fresh.next(timeout=5)).body for _ in range(4)]
    assert got == [b"e0", b"e1", b"e2", b"e3"]
    await fresh.close()
    d = await durable_status(cluster, "quotes", "board")
    assert d is not None and d.pending_messages == 3, "a suspended durable took new messages"
    content = await durable_status(cluster, "quotes", "board", content=True)
    assert content is not None and not content.unreachable

    # Back to a topic: the old durable is reachable with its backlog; the endpoint's is not.
    await put_realm(cluster.etcd, realm(), 3)

    async def reachable() -> bool:
        d = await durable_status(cluster, "quotes", "board")
        return d is not None and not d.unreachable
    await wait_for(reachable, timeout=15)
    again = await client.subscribe("quotes", "board")
    backlog = [await again.next(timeout=5) for _ in range(3)]
    assert [m.body for m in backlog] == [b"q0", b"q1", b"q2"]
    await again.ack(backlog[0])
    content = await durable_status(cluster, "quotes", "board", content=True)
    assert content is not None and content.unreachable

    # An operator deletes the unreachable endpoint durable (holding the 4 it was sent, never
    # acknowledged) from the CLI, the topic one from the client.
    cli = subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", "durable", "delete", "quotes", "board", "--endpoint", "--json",
         "-s", ",".join(cluster.addresses())], capture_output=True, text=True, timeout=60, check=False)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == {"destination": "quotes", "durable": "board", "content": True,
                                      "store": "default", "released_messages": 4}
    assert await durable_status(cluster, "quotes", "board", content=True) is None
    store, released = await client.delete_durable("quotes", "board")
    assert (store, released) == ("default", 2)
    with pytest.raises(DurableDeleted):
        while True:
            await again.next(timeout=5)
    assert await durable_status(cluster, "quotes", "board") is None
    with pytest.raises(UnknownDurable, match="no durable 'board' on 'quotes'"):
        await client.delete_durable("quotes", "board")
    missing = subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", "durable", "delete", "quotes", "nobody",
         "-s", ",".join(cluster.addresses())], capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 1 and "UNKNOWN_DURABLE" in missing.stderr
