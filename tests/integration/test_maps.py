"""Replicated key-value maps from real clients against a real 3-member cluster: put, get,
delete, prefix listing with paging, compare-and-set under a race between two clients, stores
that refuse maps, non-replicated maps, the CLI, and maps across a leader failover (slow)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from harness import Cluster, realm_yaml, running_cluster, wait_for
from strongroom.api.v1 import messaging_pb2, messaging_pb2_grpc
from strongroom.cli.main import run as cli_run
from strongroom.client import Client, Map, MapEntry
from strongroom.channels import open_channel
from strongroom.errors import (
    InvalidArgument,
    KeyExists,
    KeyNotFound,
    MapsNotAllowed,
    MessageTooLarge,
    StrongroomError,
    UnknownStore,
    VersionMismatch,
)

STORES = """\
  - name: nomaps
    cluster: default
    maps: false
  - name: wide
    cluster: default
    routed: true
  - name: volatile
    cluster: default
    replicated: false
  - name: small
    cluster: default
    max_message_bytes: 1024
"""


@pytest.fixture(scope="module")
def maps_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("maps"), realm_yaml(extra_stores=STORES)) as cluster:
        yield cluster


@pytest.fixture
async def client(maps_cluster: Cluster) -> AsyncIterator[Client]:
    await maps_cluster.leader()
    c = Client(maps_cluster.addresses(), timeout=20)
    try:
        yield c
    finally:
        await c.close()


async def test_put_get_delete_with_versions(client: Client) -> None:
    m = client.map("default", "basics")
    assert isinstance(m, Map)
    v1 = await m.put("colour", b"blue")
    assert v1 > 0
    assert await m.get("colour") == MapEntry("colour", b"blue", v1)
    v2 = await m.put("colour", b"green")
    assert v2 > v1  # a version is the log index of the write
    entry = await m.get("colour")
    assert (entry.key, entry.value, entry.version) == ("colour", b"green", v2)
    binary = bytes(range(256))
    await m.put("raw", binary)
    got = await m.get("raw")
    assert got.value == binary
    assert await m.delete("colour") is True
    with pytest.raises(KeyNotFound) as missing:
        await m.get("colour")
    assert not missing.value.retriable and "'colour'" in missing.value.message
    assert await m.delete("colour") is False  # absent: nothing deleted
    with pytest.raises(KeyNotFound):
        await m.get("never")
    # Another map of the same store is a separate namespace.
    with pytest.raises(KeyNotFound):
        await client.map("default", "basics2").get("raw")


async def test_list_by_prefix_in_key_order_page_by_page(client: Client) -> None:
    m = client.map("default", "listing")
    keys = [f"user/{i:03d}" for i in range(23)]
    await asyncio.gather(*(m.put(k, k.upper().encode()) for k in reversed(keys)))
    await asyncio.gather(m.put("user", b"not/under/prefix"), m.put("other/1", b"x"), m.put("userx", b"y"))
    got = [(k, v) async for k, v, _ in m.items(prefix="user/", page_size=5)]
    assert got == [(k, k.upper().encode()) for k in keys]
    everything = [k async for k, _, _ in m.items()]
    assert everything == sorted(keys + ["user", "other/1", "userx"])
    # The wire contract: pages of `limit`, `more` while entries follow, continue after a key.
    stub = messaging_pb2_grpc.MapServiceStub(client.channel(client.candidate()))
    first = await stub.List(messaging_pb2.MapListRequest(store="default", map="listing", prefix="user/", limit=10))
    assert [e.key for e in first.entries] == keys[:10] and first.more
    last = await stub.List(messaging_pb2.MapListRequest(store="default", map="listing", prefix="user/",
                                                        start_after=keys[19], limit=10))
    assert [e.key for e in last.entries] == keys[20:] and not last.more
    assert [k async for k, _, _ in client.map("default", "empty").items()] == []


async def test_compare_and_set_create_update_delete(client: Client) -> None:
    m = client.map("default", "cas")
    swapped, current = await m.compare_and_set("lock", 0, b"owner-a")
    assert swapped and current is not None and current.value == b"owner-a"
    version = current.version
    swapped, current = await m.compare_and_set("lock", 0, b"owner-b")
    assert not swapped and current == MapEntry("lock", b"owner-a", version)  # the winner is returned
    swapped, current = await m.compare_and_set("lock", version + 1000, b"owner-b")
    assert not swapped and current == MapEntry("lock", b"owner-a", version)
    swapped, current = await m.compare_and_set("lock", version, delete=True)
    assert swapped and current is None
    swapped, current = await m.compare_and_set("lock", version, b"late")
    assert not swapped and current is None
    with pytest.raises(InvalidArgument):
        await m.compare_and_set("lock", 0)
    with pytest.raises(InvalidArgument):
        await m.compare_and_set("lock", 0, b"v", delete=True)


async def test_create_and_update_as_nats_kv_has_them(client: Client) -> None:
    m = client.map("default", "kv")
    v1 = await m.create("job", b"queued")
    assert await m.get("job") == MapEntry("job", b"queued", v1)
    with pytest.raises(KeyExists) as exists:
        await m.create("job", b"again")
    assert isinstance(exists.value, VersionMismatch) and not exists.value.retriable
    assert exists.value.metadata["current_version"] == str(v1)
    assert (await m.get("job")).value == b"queued"  # the refused create changed nothing
    v2 = await m.update("job", b"running", expected_version=v1)
    assert v2 > v1 and await m.get("job") == MapEntry("job", b"running", v2)
    with pytest.raises(VersionMismatch) as stale:
        await m.update("job", b"done", expected_version=v1)  # another write came first
    assert not isinstance(stale.value, KeyExists) and stale.value.metadata["current_version"] == str(v2)
    assert (await m.get("job")).value == b"running"
    with pytest.raises(KeyNotFound):
        await m.update("nothing", b"x", expected_version=v2)
    with pytest.raises(KeyNotFound):
        await m.get("nothing")  # the refused update did not create it
    with pytest.raises(InvalidArgument, match="create"):
        await m.update("job", b"x", expected_version=0)
    assert await m.delete("job") is True
    v3 = await m.create("job", b"again")  # gone: it can be created anew
    assert v3 > v2


async def test_compare_and_set_race_between_two_clients_loses_no_increment(maps_cluster: Cluster) -> None:
    """Two clients each add 1 to one counter N times with read-modify-write loops; only an
    atomic compare-and-set ends at exactly 2N."""
    n = 60
    clients = [Client(maps_cluster.addresses(), timeout=20) for _ in range(2)]
    maps = [c.map("default", "race") for c in clients]
    conflicts = [0, 0]
    start = asyncio.Event()

    async def entry(m: Map) -> MapEntry | None:
        try:
            return await m.get("counter")
        except KeyNotFound:
            return None

    async def increment(i: int) -> None:
        m = maps[i]
        await entry(m)  # connected and pointed at the leader before the race starts
        await start.wait()
        done = 0
        current = await entry(m)
        while done < n:
            value, version = (current.value, current.version) if current is not None else (b"0", 0)
            swapped, after = await m.compare_and_set("counter", version, str(int(value) + 1).encode())
            if swapped:
                done += 1
            else:
                conflicts[i] += 1
            # The reply carries the current entry: the next attempt starts from it.
            current = after

    try:
        tasks = [asyncio.create_task(increment(i)) for i in range(2)]
        await asyncio.sleep(0.2)
        start.set()
        await asyncio.gather(*tasks)
        final = await maps[0].get("counter")
    finally:
        for c in clients:
            await c.close()
    assert int(final.value) == 2 * n
    assert sum(conflicts) > 0, "the two clients never raced; the test proved nothing"


async def test_non_replicated_store_maps_live_on_the_leader(client: Client) -> None:
    m = client.map("volatile", "session")
    v = await m.put("token", b"abc")
    assert await m.get("token") == MapEntry("token", b"abc", v)
    swapped, current = await m.compare_and_set("token", v, b"def")
    assert swapped and current is not None and current.version > v
    assert [k async for k, _, _ in m.items()] == ["token"]
    assert await m.delete("token") is True
    with pytest.raises(KeyNotFound):
        await m.get("token")


@pytest.mark.parametrize("store", ["nomaps", "wide"])
async def test_stores_without_maps_answer_maps_not_allowed(client: Client, store: str) -> None:
    m = client.map(store, "m")
    with pytest.raises(MapsNotAllowed) as info:
        await m.put("k", b"v")
    assert info.value.reason == "MAPS_NOT_ALLOWED" and store in info.value.message
    with pytest.raises(MapsNotAllowed):
        await m.get("k")
    with pytest.raises(MapsNotAllowed):
        _ = [k async for k, _, _ in m.items()]
    # What a plain generated stub sees: FAILED_PRECONDITION with the ErrorInfo reason.
    stub = messaging_pb2_grpc.MapServiceStub(client.channel(client.candidate()))
    with pytest.raises(grpc.aio.AioRpcError) as raw:
        await stub.Put(messaging_pb2.MapPutRequest(store=store, map="m", key="k", value=b"v"))
    assert raw.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    status = rpc_status.from_call(raw.value)  # type: ignore[arg-type]
    assert status is not None
    info_detail = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info_detail)
    assert info_detail.reason == "MAPS_NOT_ALLOWED" and info_detail.domain == "strongroom.io"


async def test_unknown_store_and_bad_requests_are_refused_precisely(client: Client) -> None:
    with pytest.raises(UnknownStore, match="'nosuch' is not defined in the realm"):
        await client.map("nosuch", "m").put("k", b"v")
    with pytest.raises(UnknownStore) as info:
        await client.map("nosuch", "m").get("k")
    assert info.value.code == "NOT_FOUND"
    m = client.map("small", "m")
    with pytest.raises(MessageTooLarge, match="exceeds store 'small' limit of 1024"):
        await m.put("k", b"x" * 1025)
    with pytest.raises(InvalidArgument, match="key is required"):
        await m.put("", b"v")
    with pytest.raises(InvalidArgument, match="exceeds the limit of 1024"):
        await m.get("k" * 1025)
    with pytest.raises(InvalidArgument, match="exceeds the limit of 255"):
        await client.map("small", "n" * 256).put("k", b"v")
    with pytest.raises(KeyNotFound):  # nothing refused was stored
        await m.get("k")


async def test_a_follower_points_at_the_leader(maps_cluster: Cluster) -> None:
    leader = await maps_cluster.leader()
    follower = next(n for n in maps_cluster.names if n != leader)
    async with open_channel(maps_cluster.address(follower), []) as ch:
        stub = messaging_pb2_grpc.MapServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await stub.Get(messaging_pb2.MapGetRequest(store="default", map="m", key="k"), timeout=5)
    assert raw.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailers = dict(raw.value.trailing_metadata() or ())
    assert trailers.get("strongroom-leader") == maps_cluster.address(leader)


async def test_cli_put_get_list_cas_delete(maps_cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    await maps_cluster.leader()
    ep = ["--endpoints", ",".join(maps_cluster.addresses())]

    async def cli(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = await asyncio.to_thread(cli_run, ["map", *argv, *ep])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = await cli("put", "default", "cli", "greeting", "hello", "--json")
    assert code == 0
    version = json.loads(out)["version"]
    code, out, _ = await cli("get", "default", "cli", "greeting")
    assert (code, out) == (0, "hello\n")
    code, out, _ = await cli("get", "default", "cli", "greeting", "--json")
    assert json.loads(out) == {"store": "default", "map": "cli", "key": "greeting", "found": True,
                               "value": "hello", "value_encoding": "utf-8", "version": version}
    code, _, err = await cli("get", "default", "cli", "missing")
    assert code == 1 and "not found" in err and err.startswith("error: KEY_NOT_FOUND: ")
    code, _, err = await cli("cas", "default", "cli", "greeting", "hi", "--expected-version", str(version + 99))
    assert code == 1 and f"version {version}" in err
    code, out, _ = await cli("cas", "default", "cli", "greeting", "aGk=", "--base64",
                             "--expected-version", str(version), "--json")
    assert code == 0 and json.loads(out)["swapped"] is True and json.loads(out)["value"] == "hi"
    await cli("put", "default", "cli", "greeting2", "x")
    code, out, _ = await cli("list", "default", "cli", "--prefix", "greet", "--json")
    assert code == 0 and [json.loads(line)["key"] for line in out.splitlines()] == ["greeting", "greeting2"]
    code, out, _ = await cli("delete", "default", "cli", "greeting")
    assert (code, out) == (0, "deleted greeting\n")
    code, out, _ = await cli("create", "default", "cli", "fresh", "one", "--json")
    assert code == 0
    created = json.loads(out)["version"]
    code, _, err = await cli("create", "default", "cli", "fresh", "two")
    assert code == 1 and err.startswith("error: KEY_EXISTS: ")
    code, out, _ = await cli("update", "default", "cli", "fresh", "two", "--expected-version", str(created))
    assert code == 0 and out.startswith("update fresh: version ")
    code, _, err = await cli("update", "default", "cli", "fresh", "three", "--expected-version", str(created))
    assert code == 1 and err.startswith("error: VERSION_MISMATCH: ")
    code, out, _ = await cli("get", "default", "cli", "fresh")
    assert (code, out) == (0, "two\n")
    code, out, err = await cli("get", "default", "cli", "missing", "--json")
    assert code == 1 and json.loads(out) == {"store": "default", "map": "cli", "key": "missing", "found": False}
    code, _, err = await cli("put", "nomaps", "cli", "k", "v")
    assert code == 1 and "MAPS_NOT_ALLOWED" in err  # the cluster refused: 1
    code, _, err = await cli("cas", "default", "cli", "k", "--expected-version", "0")
    assert code == 2 and "VALUE or --delete" in err


@pytest.mark.slow
async def test_maps_survive_a_leader_failover(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    old = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    m = client.map("default", "durable")
    confirmed: dict[str, tuple[bytes, int]] = {}
    killed = asyncio.Event()

    async def writer(w: int) -> None:
        for i in range(60):
            key, value = f"w{w}/{i:03d}", f"{w}:{i}".encode()
            confirmed[key] = (value, await m.put(key, value))
            if w == 0 and i == 20:
                cluster.kill(old, signal.SIGKILL)
                killed.set()

    try:
        await asyncio.gather(*(writer(w) for w in range(3)))
        assert killed.is_set()
        new = await cluster.leader(exclude=old)
        assert new != old
        # Every confirmed write is there on the new leader, with the version it was given.
        listed = {k: (v, ver) async for k, v, ver in m.items()}
        assert listed == confirmed
        # Versions keep growing past the failover; compare-and-set works against them.
        key = "w0/000"
        _, version = confirmed[key]
        swapped, current = await m.compare_and_set(key, version, b"after")
        assert swapped and current is not None and current.version > max(v for _, v in confirmed.values())
        # The killed member comes back as a follower and catches up to the same maps.
        cluster.start(old)

        async def caught_up() -> bool:
            st_old, st_new = await cluster.status(old), await cluster.status(new)
            return bool(st_old and st_new and st_old.role == "follower"
                        and st_old.applied_index == st_new.commit_index)

        await wait_for(caught_up)
    except StrongroomError:
        print(cluster.logs())
        raise
    finally:
        await client.close()
