"""The replication link (plain TCP between leader and follower): framing, refusals, a follower
going away, a silent follower, and a cluster where one member takes appends over gRPC instead."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness import Cluster, put_realm_sync, realm_yaml, tls_as

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.channels import PROCESS
from strongroom.client import Client
from strongroom.etcd import EtcdClient
from strongroom.keys import member_key
from strongroom.local.etcdproc import start_etcd
from strongroom.persistence.link import (
    MAX_FRAME,
    PREAMBLE,
    LinkClosed,
    LinkConnection,
    LinkServer,
    bind,
    frame,
)
from strongroom.persistence.transport import FollowerConnection
from strongroom.persistence.transport import PeerUnreachable as _AppendTimeout
from strongroom.security import tls
from strongroom.security.identity import Kind


@pytest.fixture(autouse=True)
def _as_member_m1() -> object:
    """The link's ends here run in this process, as member m1 of cluster default would (its
    certificate on both ends: the link takes members of its cluster only)."""
    before = tls.current()
    tls.use(tls_as(Kind.MEMBER, "m1"))
    yield
    tls.use(before)


def _connect(port: int) -> socket.socket:
    """A raw connection to the link, through its TLS (as this process's member certificate)."""
    raw = socket.create_connection(("127.0.0.1", port))
    settings = tls.current()
    assert settings is not None
    return settings.client_context().wrap_socket(raw, server_hostname="127.0.0.1")


class _Recorder:
    """A follower's answer: ok up to the last entry received; every request kept."""

    def __init__(self, hang: bool = False) -> None:
        self.requests: list[tuple[rpb.AppendRequestRaw, list[rpb.LogEntry], list[bytes]]] = []
        self.hang = hang

    async def __call__(self, req: rpb.AppendRequestRaw, entries: list[rpb.LogEntry],
                       raws: list[bytes]) -> rpb.AppendResponse:
        self.requests.append((req, entries, raws))
        if self.hang:
            await asyncio.Event().wait()
        return rpb.AppendResponse(ok=True, promised_epoch=req.epoch, last_index=req.prev_index + len(entries))


def _append(prev_index: int, n: int) -> bytes:
    req = rpb.AppendRequest(epoch=7, leader="m1", prev_index=prev_index, prev_epoch=7, commit_index=prev_index)
    for i in range(n):
        req.entries.add(index=prev_index + i + 1, epoch=7).ops.add().publish.destination = f"d{i}"
    return req.SerializeToString()


async def _serving(handler: _Recorder, port: int = 0, tls: object = PROCESS) -> tuple[LinkServer, int]:
    sock, bound = bind(f"127.0.0.1:{port}")
    server = LinkServer(sock, handler, "default", "m2", tls=tls)
    await server.start()
    return server, bound


HELLO = frame(b"default/m2")  # the member a connection is meant for


async def _answers_an_append(port: int) -> bool:
    """A connection meant for default/m2 gets an append answered."""
    link = await LinkConnection.open(f"127.0.0.1:{port}", 2, "default", "m2")
    try:
        return (await link.exchange(frame(_append(0, 1)), timeout=2)).ok
    finally:
        link.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


async def test_appends_are_answered_in_order_with_the_entries_as_sent() -> None:
    handler = _Recorder()
    server, port = await _serving(handler)
    try:
        link = await LinkConnection.open(f"127.0.0.1:{port}", 2, "default", "m2")
        answers = [await link.exchange(frame(_append(prev, 3)), timeout=2) for prev in (0, 3, 6)]
        assert [(a.ok, a.last_index, a.promised_epoch) for a in answers] == [(True, 3, 7), (True, 6, 7), (True, 9, 7)]
        assert [req.prev_index for req, _, _ in handler.requests] == [0, 3, 6]
        req, entries, raws = handler.requests[1]
        assert [e.index for e in entries] == [4, 5, 6]
        assert [rpb.LogEntry.FromString(r) for r in raws] == entries
        assert [e.ops[0].publish.destination for e in entries] == ["d0", "d1", "d2"]
        link.close()
    finally:
        await server.stop()


async def test_a_connection_without_the_preamble_or_with_an_oversized_frame_is_closed_unanswered() -> None:
    handler = _Recorder()
    server, port = await _serving(handler)
    try:
        loop = asyncio.get_running_loop()
        for payload in (b"GET / HTTP/1.1\r\n\r\n",
                        PREAMBLE + HELLO + (MAX_FRAME + 1).to_bytes(4, "big") + b"x" * 64,
                        PREAMBLE + HELLO + (5).to_bytes(4, "big") + b"\xff\xff\xff\xff\xff"):  # not protobuf
            with await loop.run_in_executor(None, _connect, port) as s:
                s.sendall(payload)
                assert await loop.run_in_executor(None, _closed_by_peer, s)
        assert handler.requests == []
        assert await _answers_an_append(port)  # the server still answers well-formed appends
    finally:
        await server.stop()


async def test_a_connection_meant_for_another_member_is_closed_unanswered() -> None:
    """A leader holding a stale address that another member now listens on must not have that
    member's answers counted as the one it meant (a false majority)."""
    handler = _Recorder()
    server, port = await _serving(handler)
    try:
        for cluster, member in (("default", "m3"), ("other", "m2")):
            link = await LinkConnection.open(f"127.0.0.1:{port}", 2, cluster, member)
            with pytest.raises(LinkClosed, match="ended the connection"):
                await link.exchange(frame(_append(0, 1)), timeout=2)
        assert handler.requests == []
        assert await _answers_an_append(port)
    finally:
        await server.stop()


async def test_a_follower_that_does_not_answer_times_the_append_out() -> None:
    server, port = await _serving(_Recorder(hang=True))
    try:
        link = await LinkConnection.open(f"127.0.0.1:{port}", 2, "default", "m2")
        t0 = time.monotonic()
        with pytest.raises(LinkClosed, match="no answer"):
            await link.exchange(frame(_append(0, 1)), timeout=0.3)
        assert time.monotonic() - t0 < 3
        with pytest.raises(LinkClosed):
            await link.exchange(frame(_append(0, 1)), timeout=0.3)
    finally:
        await server.stop()


async def test_the_replicator_sees_a_follower_gone_and_reconnects_when_it_is_back() -> None:
    """A follower that went away is unreachable to the replicator (not a crash of its task),
    and the next append opens a new connection to the follower, back on the same address."""
    handler = _Recorder()
    server, port = await _serving(handler)
    address = f"127.0.0.1:{port}"
    rep = FollowerConnection("default", "m2", lambda name: "127.0.0.1:9", lambda name: address)
    try:
        assert (await rep._exchange_on_link(address, frame(_append(0, 1)))).last_index == 1
        await server.stop()
        with pytest.raises(_AppendTimeout):
            await rep._exchange_on_link(address, frame(_append(1, 1)))
        with pytest.raises(_AppendTimeout):
            await rep._exchange_on_link(address, frame(_append(1, 1)))  # nobody listens: cannot connect
        server, _ = await _serving(handler, port)
        assert (await rep._exchange_on_link(address, frame(_append(1, 1)))).last_index == 2
        assert [req.prev_index for req, _, _ in handler.requests] == [0, 1]
    finally:
        await rep.close()
        await server.stop()


@pytest.fixture
async def mixed_cluster(tmp_path: Path) -> AsyncIterator[tuple[Cluster, str]]:
    """Three disk-sync members; m3 opens no replication link (appends reach it over gRPC)."""
    etcd = start_etcd(tmp_path / "etcd")
    cluster = Cluster(etcd.endpoint, tmp_path)
    try:
        put_realm_sync(etcd.endpoint, realm_yaml(), 1)
        cluster.extra_args["m3"] = ["--replication-listen", "none"]
        # m3 starts once m1 or m2 leads, so the leader has one follower of each kind.
        cluster.start("m1")
        cluster.start("m2")
        await cluster.leader()
        cluster.start("m3")
        yield cluster, etcd.endpoint
    finally:
        cluster.stop_all()
        etcd.stop()


async def test_members_with_and_without_a_link_are_both_replicated_to(mixed_cluster: tuple[Cluster, str]) -> None:
    cluster, endpoint = mixed_cluster
    leader = await cluster.leader()
    assert leader != "m3"
    etcd = EtcdClient(endpoint)
    try:
        records: dict[str, dict[str, str]] = {}
        deadline = time.monotonic() + 30
        while len(records) < len(cluster.names):  # m3 registers once it is up
            for name in cluster.names:
                kv = await etcd.get(member_key("default", name))
                if kv is not None:
                    records[name] = json.loads(kv.value)
            assert time.monotonic() < deadline, (records, cluster.logs())
            await asyncio.sleep(0.1)
    finally:
        await etcd.close()
    assert "replication" not in records["m3"]
    for name in ("m1", "m2"):
        host, port = records[name]["replication"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) not in (0, cluster.ports[name])

    async with Client(cluster.addresses()) as client:
        for i in range(30):
            assert (await client.publish("link.queue", f"m{i}".encode())).confirmed
    # Both followers hold every entry: the leader's view, and each follower's own commit.
    deadline = time.monotonic() + 15
    while True:
        st = await cluster.status(leader)
        assert st is not None
        views = {m.name: (m.reachable, m.match_index) for m in st.members if m.name != leader}
        own = {n: await cluster.status(n) for n in views}
        if all(ok and match >= st.last_index for ok, match in views.values()) and \
                all(s is not None and s.applied_index >= st.commit_index for s in own.values()):
            break
        assert time.monotonic() < deadline, (views, cluster.logs())
        await asyncio.sleep(0.1)
    log_text = cluster.log_path(leader).read_text()
    other = next(n for n in views if n != "m3")
    assert "member m3 takes appends over gRPC" in log_text
    assert f"member {other} takes appends on its replication link at {records[other]['replication']}" in log_text
    # The leader's status says how each member gets its appends.
    assert {m.name: m.replication for m in st.members} == {leader: "", other: "link", "m3": "grpc"}


async def test_a_revoked_certificate_is_refused_at_either_end_of_the_link(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower refuses a leader whose certificate the authority revoked, the leader a
    follower's: no append crosses, and each refusal is counted (security/revocation.py)."""
    from strongroom.security import refusals, revocation
    from strongroom.security.certs import LocalCa
    from strongroom.security.identity import Identity

    monkeypatch.setattr(revocation, "LOOK_EVERY_SECONDS", 0.0)
    ca = LocalCa(tmp_path / "ca")
    monkeypatch.setattr(revocation, "_current", revocation.Revocations(ca.crl_path, ca.ca_path.read_bytes()))
    leader, follower = (ca.issue(Identity(Kind.MEMBER, name, "default")) for name in ("m1", "m2"))
    before = refusals.snapshot().get(("link", "certificate_revoked"), 0)

    async def one_round(follower_tls: tls.Tls, leader_tls: tls.Tls) -> tuple[bool, int]:
        """Whether an append was answered, and how many the follower received."""
        handler = _Recorder()
        server, port = await _serving(handler, tls=follower_tls)
        try:
            link = await LinkConnection.open(f"127.0.0.1:{port}", 2, "default", "m2", tls=leader_tls)
            try:
                return (await link.exchange(frame(_append(0, 1)), timeout=2)).ok, len(handler.requests)
            finally:
                link.close()
        except LinkClosed:
            return False, len(handler.requests)
        finally:
            await server.stop()

    assert await one_round(follower, leader) == (True, 1)
    ca.revoke(revocation.serial_of_pem(leader.cert))
    assert await one_round(follower, leader) == (False, 0)
    renewed_leader = ca.issue(Identity(Kind.MEMBER, "m1", "default"))  # a new one in place of the revoked
    assert await one_round(follower, renewed_leader) == (True, 1)
    assert refusals.snapshot().get(("link", "certificate_revoked"), 0) == before + 1
    ca.revoke(revocation.serial_of_pem(follower.cert))  # now the leader's check refuses the follower
    assert await one_round(follower, renewed_leader) == (False, 0)
    assert refusals.snapshot().get(("link", "certificate_revoked"), 0) == before + 2
    # A connection open when its leader's certificate is revoked takes no further append.
    third = ca.issue(Identity(Kind.MEMBER, "m3", "default"))
    fresh_follower = ca.issue(Identity(Kind.MEMBER, "m2", "default"))  # in place of the revoked one
    handler = _Recorder()
    server, port = await _serving(handler, tls=fresh_follower)
    try:
        link = await LinkConnection.open(f"127.0.0.1:{port}", 2, "default", "m2", tls=third)
        assert (await link.exchange(frame(_append(0, 1)), timeout=2)).ok
        ca.revoke(revocation.serial_of_pem(third.cert))
        with pytest.raises(LinkClosed):
            await link.exchange(frame(_append(1, 1)), timeout=2)
        assert len(handler.requests) == 1
        link.close()
    finally:
        await server.stop()
    assert refusals.snapshot().get(("link", "certificate_revoked"), 0) == before + 3
