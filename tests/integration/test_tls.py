"""TLS on every connection of a real cluster, and what it refuses.

The whole suite runs with TLS on (tests/conftest.py: one authority for the session, each process
a certificate of its own). Here, the attempts a cluster must refuse: no certificate, another
authority's, an expired one, a certificate of the right authority whose holder may not make the
call (a router appending, a member calling as another), on the gRPC port and on the replication
link. Each is refused with its reason, counted in `strongroom_refused_total` and logged, and
changes nothing stored.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from harness import Cluster, scrape, tls_as, value, wait_for

from strongroom.api.v1 import messaging_pb2, messaging_pb2_grpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import open_channel
from strongroom.client import Client
from strongroom.errors import PermissionDenied, Unauthenticated
from strongroom.grpcerrors import from_rpc_error
from strongroom.persistence.link import PREAMBLE, frame
from strongroom.security import certs
from strongroom.security.identity import Identity, Kind
from strongroom.security.revocation import serial_of_pem
from strongroom.security.tls import Tls

QUEUE = "tls.queue"


def _stranger_tls(tmp: Path) -> Tls:
    """A certificate for member m1 of cluster default from an authority nobody trusts, held by
    a caller that trusts the cluster's (so the refusal is the cluster's, not the caller's)."""
    other = certs.LocalCa(tmp / "other-ca", name="another authority")
    ours = certs.active()
    assert ours is not None
    theirs = other.issue(Identity(Kind.MEMBER, "m1", "default"))
    return Tls.load(ours.ca_path, theirs.cert_path, theirs.key_path)


def _expired_tls(tmp: Path) -> Tls:
    """A certificate of the session's authority for the user `late`, expired yesterday."""
    ca = certs.active()
    assert ca is not None
    now = datetime.datetime.now(datetime.timezone.utc)
    return ca.issue(Identity(Kind.USER, "late"), not_before=now - datetime.timedelta(days=30),
                    not_after=now - datetime.timedelta(days=1), directory=tmp / "expired")


async def _metrics(cluster: Cluster, name: str) -> dict:  # type: ignore[type-arg]
    st = await cluster.status(name)
    assert st is not None and st.metrics_url
    return scrape(st.metrics_url)


def _refused(samples: dict, where: str, reason: str) -> float:  # type: ignore[type-arg]
    return value(samples, "strongroom_refused_total", where=where, reason=reason)


async def _stored(cluster: Cluster, leader: str) -> tuple[int, int]:
    """(commit index, messages in the default store) as the leader says."""
    st = await cluster.status(leader)
    assert st is not None
    return st.commit_index, sum(s.messages for s in st.stores)


async def _publish_with(address: str, tls: Tls | None) -> grpc.aio.AioRpcError:
    async with open_channel(address, [], tls=tls) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(
                messaging_pb2.PublishRequest(destination=QUEUE, message={"body": b"intruder"}), timeout=5)
    return info.value


async def test_a_client_without_a_certificate_of_the_authority_is_refused_and_counted(
        shared_cluster: Cluster, tmp_path: Path) -> None:
    cluster = shared_cluster
    leader = await cluster.leader()
    async with Client(cluster.addresses()) as client:  # this process's certificate: accepted
        await client.publish(QUEUE, b"welcome")
    before_metrics = await _metrics(cluster, leader)
    before = await _stored(cluster, leader)
    attempts = {"plaintext": None, "another authority": _stranger_tls(tmp_path),
                "expired": _expired_tls(tmp_path)}
    for label, tls in attempts.items():
        err = await _publish_with(cluster.address(leader), tls)
        assert err.code() == grpc.StatusCode.UNAVAILABLE, (label, err)

    async def counted() -> bool:
        # Each attempt failed its handshake at least once (gRPC's client tries again within the
        # call's deadline, so possibly more than once).
        after = await _metrics(cluster, leader)
        return _refused(after, "grpc", "tls_handshake") >= _refused(before_metrics, "grpc", "tls_handshake") + 3

    await wait_for(counted, timeout=10)
    # The messages, not the commit index: the leader's pseudo-clock ticks (a log entry every
    # 10 s) go on while the attempts are refused (a CI run saw one land in between).
    assert (await _stored(cluster, leader))[1] == before[1]
    log = Path(cluster.log_path(leader)).read_text()
    assert "Handshake failed" in log  # gRPC's own line, with its reason, in the member's log


async def test_a_router_cannot_replicate_and_a_member_cannot_call_as_another(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    leader = await cluster.leader()
    follower = next(n for n in cluster.names if n != leader)

    async def caught_up() -> bool:  # an earlier test's publish may still be on its way to the follower
        return (await _stored(cluster, follower))[1] == (await _stored(cluster, leader))[1]

    await wait_for(caught_up, timeout=10)
    before = await _stored(cluster, follower)
    before_metrics = await _metrics(cluster, follower)
    st = await cluster.status(follower)
    assert st is not None
    attempts = [
        (tls_as(Kind.ROUTER, "r1"), leader, "wrong_identity", "not router/default/r1"),
        (tls_as(Kind.MEMBER, "m1", "elsewhere"), leader, "wrong_identity", "not member/elsewhere/m1"),
        # a member of the cluster (itself, here) calling as the leader
        (tls_as(Kind.MEMBER, follower), leader, "impersonation", f"called as member {leader!r}"),
    ]
    for tls, claimed, reason, says in attempts:
        async with open_channel(cluster.address(follower), [], tls=tls) as channel:
            stub = rgrpc.ReplicationServiceStub(channel)
            chunk = rpb.SnapshotChunk(epoch=st.epoch + 1000, leader=claimed, last_index=1, last_epoch=1,
                                      data=b"not a state", done=True)
            # InstallSnapshot in the reader/writer style, its chunk written only where the member
            # must read it to decide (the leader it names): grpc.aio reports a message sent after
            # the server ended the call as INTERNAL, hiding the server's status (a CI run saw it).
            install = stub.InstallSnapshot(timeout=5)
            if reason == "impersonation":
                await install.write(chunk)
            for call in (stub.Promise(rpb.PromiseRequest(epoch=st.epoch + 1000, leader=claimed), timeout=5),
                         stub.Append(rpb.AppendRequest(epoch=st.epoch + 1000, leader=claimed), timeout=5),
                         install):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call
                assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
                err = from_rpc_error(info.value)
                assert isinstance(err, PermissionDenied)
                assert err.metadata == {"permission": "replicate", "refusal": reason}
                assert says in err.message
    after_metrics = await _metrics(cluster, follower)
    assert _refused(after_metrics, "grpc", "wrong_identity") == _refused(before_metrics, "grpc", "wrong_identity") + 6
    assert _refused(after_metrics, "grpc", "impersonation") == _refused(before_metrics, "grpc", "impersonation") + 3
    # Nothing was promised: the epoch a thousand ahead would have fenced the cluster's leader.
    after = await cluster.status(follower)
    assert after is not None and after.epoch == st.epoch
    assert (await _stored(cluster, follower))[1] == before[1]
    assert "refused (grpc, impersonation)" in Path(cluster.log_path(follower)).read_text()



async def test_a_revoked_certificate_is_refused_at_every_call_without_a_restart(shared_cluster: Cluster) -> None:
    """`strongroom certs revoke`: the members take the authority's new list at their next look at
    it (within a second) and refuse every call presenting that certificate UNAUTHENTICATED
    (refusal `certificate_revoked`), a unary call and a stream alike, counted and logged;
    nothing is stored. Other certificates are served as before."""
    cluster = shared_cluster
    leader = await cluster.leader()
    holder = tls_as(Kind.USER, "lost-laptop")  # a certificate of its own: revoking it touches no one else
    address = cluster.address(leader)

    async def publish_as(tls: Tls) -> messaging_pb2.PublishResponse:
        async with open_channel(address, [], tls=tls) as channel:
            return await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(
                messaging_pb2.PublishRequest(destination=QUEUE, message={"body": b"from the laptop"}), timeout=5)

    assert (await publish_as(holder)).message_seq > 0
    # A subscription opened before the revocation: it gets a message now, and is ended by the
    # revocation at its next one.
    channel = open_channel(address, [], tls=holder)
    subscription = messaging_pb2_grpc.MessagingServiceStub(channel).Subscribe(timeout=60)
    await subscription.write(messaging_pb2.SubscribeRequest(open=messaging_pb2.OpenSubscription(
        destination=QUEUE, credit=1)))
    assert (await subscription.read()).WhichOneof("response") == "opened"
    async with Client(cluster.addresses()) as client:
        for body in (b"before the revocation", b"after the revocation"):
            await client.publish(QUEUE, body)
    assert (await subscription.read()).WhichOneof("response") == "deliveries"
    before_metrics = await _metrics(cluster, leader)
    ca = certs.active()
    assert ca is not None
    revoke = subprocess.run([sys.executable, "-m", "strongroom.cli.main", "certs", "revoke", str(holder.cert_path),
                             "--json"], capture_output=True, text=True, timeout=60,
                            env={**_fresh_env(), certs.AUTHORITY_ENV: str(ca.directory)})
    assert revoke.returncode == 0, revoke.stderr
    serial = json.loads(revoke.stdout)["serial"]

    async def refused() -> bool:
        try:
            await publish_as(holder)
        except grpc.aio.AioRpcError as err:
            return err.code() == grpc.StatusCode.UNAUTHENTICATED
        return False

    await wait_for(refused, timeout=10)  # within a second or two (a publish before that is stored)
    before = await _stored(cluster, leader)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await publish_as(holder)
    err = from_rpc_error(info.value)
    assert isinstance(err, Unauthenticated) and err.metadata == {"refusal": "certificate_revoked"}
    assert f"serial {serial}" in err.message and "revoked by the authority" in err.message
    async with open_channel(address, [], tls=holder) as channel:  # a stream, refused as it opens
        stream = messaging_pb2_grpc.MessagingServiceStub(channel).Subscribe(timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.read()
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await subscription.write(messaging_pb2.SubscribeRequest(credit=1))  # room for the next message
    with pytest.raises(grpc.aio.AioRpcError) as info:
        while True:
            assert (await subscription.read()).WhichOneof("response") != "deliveries"
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await channel.close()
    assert (await _stored(cluster, leader))[1] == before[1]
    after_metrics = await _metrics(cluster, leader)
    assert (_refused(after_metrics, "grpc", "certificate_revoked")
            >= _refused(before_metrics, "grpc", "certificate_revoked") + 4)
    assert "refused (grpc, certificate_revoked)" in Path(cluster.log_path(leader)).read_text()
    async with Client(cluster.addresses()) as client:  # this process's certificate is served as before
        await client.publish(QUEUE, b"still served")
    listed = subprocess.run([sys.executable, "-m", "strongroom.cli.main", "certs", "list", "--json"],
                            capture_output=True, text=True, timeout=60,
                            env={**_fresh_env(), certs.AUTHORITY_ENV: str(ca.directory)})
    assert listed.returncode == 0, listed.stderr
    rows = {row["identity"]: row for row in json.loads(listed.stdout)["certificates"]}
    assert rows["user/lost-laptop"]["revoked_at"] and not rows["user/test"]["revoked_at"]



def _etcd_version_as(endpoint: str, tls: Tls) -> str:
    """etcd's /version over a new mutual-TLS connection as `tls`'s holder ("refused: ..." if not)."""
    import urllib.request

    context = ssl.create_default_context(cafile=str(tls.ca_path))
    context.load_cert_chain(tls.cert_path, tls.key_path)
    try:
        with urllib.request.urlopen(f"https://{endpoint}/version", context=context, timeout=30) as answer:
            return str(json.loads(answer.read())["etcdserver"])
    except (OSError, ssl.SSLError) as exc:
        if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
            raise  # slow, not refused
        return f"refused: {exc}"


async def test_etcd_refuses_a_new_connection_of_a_revoked_certificate(shared_cluster: Cluster) -> None:
    """etcd is given the authority's list too (--client-crl-file), and reads it at each new
    connection: a revoked member's certificate cannot open one to campaign or read the realm."""
    holder = tls_as(Kind.MEMBER, "m7")  # of its own: no process of the suite holds it
    fine = tls_as(Kind.USER, "etcd-reader")
    endpoint = shared_cluster.etcd
    first = _etcd_version_as(endpoint, holder)
    assert not first.startswith("refused"), first
    ca = certs.active()
    assert ca is not None
    ca.revoke(serial_of_pem(holder.cert))
    after = _etcd_version_as(endpoint, holder)
    assert after.startswith("refused"), after
    other = _etcd_version_as(endpoint, fine)
    assert not other.startswith("refused"), other
    number = serial_of_pem(holder.cert)
    serial = number.to_bytes((number.bit_length() + 7) // 8, "big").hex()  # etcd's spelling: two digits a byte
    assert f"certificate serial {serial} revoked" in (shared_cluster.root / "etcd" / "etcd.log").read_text()


def _link_address(cluster: Cluster, name: str) -> str:
    found = re.findall(r"replication link (\S+) \(", Path(cluster.log_path(name)).read_text())
    assert found, "the member logs its replication link's address"
    return found[-1]


async def _link_attempt(address: str, tls: Tls) -> bytes:
    """Open the link with `tls`, send the start of a connection meant for m1, read until the
    other side closes; what was read (nothing: the member never answers a refused peer)."""
    host, port = address.rsplit(":", 1)
    context = tls.client_context()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context, server_hostname=host), 10)
    except (ssl.SSLError, ConnectionError):
        return b""  # refused during the handshake (TLS 1.3 may also report it at the first read)
    try:
        writer.write(PREAMBLE + frame(b"default/m1"))
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        writer.close()


async def test_the_replication_link_takes_only_members_of_its_cluster(shared_cluster: Cluster, tmp_path: Path) -> None:
    cluster = shared_cluster
    await cluster.leader()
    name = "m1"
    address = _link_address(cluster, name)
    before = await _metrics(cluster, name)
    assert await _link_attempt(address, _stranger_tls(tmp_path)) == b""
    assert await _link_attempt(address, tls_as(Kind.ROUTER, "r1")) == b""

    async def counted() -> bool:
        after = await _metrics(cluster, name)
        return (_refused(after, "link", "tls_handshake") == _refused(before, "link", "tls_handshake") + 1
                and _refused(after, "link", "wrong_identity") == _refused(before, "link", "wrong_identity") + 1)

    await wait_for(counted, timeout=10)
    log = Path(cluster.log_path(name)).read_text()
    assert "refused (link, wrong_identity)" in log and "refused (link, tls_handshake)" in log
    # The cluster still replicates over its links: a publish confirmed by a majority.
    async with Client(cluster.addresses()) as client:
        await client.publish(QUEUE, b"still replicated")


def _fresh_env() -> dict[str, str]:
    """The environment of a user who has never run Strongroom: none of the test session's TLS."""
    import os

    drop = ("STRONGROOM_TLS_CA", "STRONGROOM_TLS_CERT", "STRONGROOM_TLS_KEY", certs.AUTHORITY_ENV,
            "STRONGROOM_DATA_DIR", "STRONGROOM_ENDPOINTS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strongroom.cli.main", *argv], capture_output=True, text=True,
                          env=_fresh_env(), timeout=120)


async def _status_over(address: str, tls: Tls | None) -> grpc.StatusCode:
    from strongroom.api.v1 import admin_pb2, admin_pb2_grpc

    async with open_channel(address, [], tls=tls) as channel:
        try:
            await admin_pb2_grpc.AdminServiceStub(channel).Status(admin_pb2.StatusRequest(), timeout=5)
        except grpc.aio.AioRpcError as err:
            return err.code()
    return grpc.StatusCode.OK


async def test_up_runs_mutual_tls_by_default_and_plaintext_only_when_asked(tmp_path: Path) -> None:
    secure, plain = tmp_path / "secure", tmp_path / "plain"
    try:
        up = _cli("up", "--detach", "--data-dir", str(secure))
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"TLS: on, authority {secure / 'tls' / 'ca.pem'}" in up.stdout
        state = json.loads((secure / "state.json").read_text())
        assert state["tls"]["ca"] == str(secure / "tls" / "ca.pem")
        address = next(iter(state["clusters"]["default"]["members"].values()))["address"]
        # The CLI finds the certificate in the state file: the README's commands work unchanged.
        status = _cli("status", "--json", "--data-dir", str(secure))
        assert status.returncode == 0, status.stderr
        operator = Tls.load(state["tls"]["ca"], state["tls"]["cert"], state["tls"]["key"])
        assert operator.identity() == certs.OPERATOR
        assert await _status_over(address, operator) == grpc.StatusCode.OK
        assert await _status_over(address, None) == grpc.StatusCode.UNAVAILABLE
        # Another deployment's certificate (the test session's authority) is refused too.
        assert await _status_over(address, tls_as(Kind.USER, "visitor")) == grpc.StatusCode.UNAVAILABLE

        up = _cli("up", "--detach", "--insecure", "--data-dir", str(plain))
        assert up.returncode == 0, up.stdout + up.stderr
        assert "--insecure: every port of this deployment is plaintext" in up.stderr
        assert "TLS: OFF (--insecure)" in up.stdout
        state = json.loads((plain / "state.json").read_text())
        assert state["tls"] is None
        address = next(iter(state["clusters"]["default"]["members"].values()))["address"]
        assert _cli("status", "--data-dir", str(plain)).returncode == 0
        assert await _status_over(address, None) == grpc.StatusCode.OK
        logs = "".join(p.read_text() for p in (plain / "logs").glob("default-*.log"))
        assert "TLS is OFF" in logs
    finally:
        for where in (secure, plain):
            _cli("down", "--data-dir", str(where))
