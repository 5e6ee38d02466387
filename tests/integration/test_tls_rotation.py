"""A renewed certificate serves without a restart, on the gRPC port and on the replication link.

A real member process with certificate files of its own (issued by the session's authority into
the test's directory), a real etcd; the check is what the member presents at a handshake, read
by a plain TLS client (`ssl`), and a real client's publish over the renewed certificate. A set
caught half-written (a key that is not the certificate's) is not taken: the previous certificate
serves on and the member says why.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import socket
import ssl
from pathlib import Path

from harness import Cluster, put_realm_sync, realm_yaml, tls_as, wait_for

from strongroom.client import Client
from strongroom.local.etcdproc import start_etcd
from strongroom.security import certs
from strongroom.security.identity import Identity, Kind
from strongroom.security.tls import Tls

MEMBER = Identity(Kind.MEMBER, "m1", "default")


def _presented(address: str, caller: Tls, alpn: str | None) -> bytes:
    """The certificate (DER) the server at `address` presents to `caller` at a new handshake."""
    host, port = address.rsplit(":", 1)
    context = caller.client_context()
    if alpn:
        context.set_alpn_protocols([alpn])
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as conn:
        cert = conn.getpeercert(binary_form=True)
    assert cert is not None
    return cert


def _der(tls: Tls) -> bytes:
    return ssl.PEM_cert_to_DER_cert(tls.cert.decode())


def _renew(ca: certs.LocalCa, directory: Path, days: int) -> Tls:
    """A new certificate and key for the member in `directory` (a validity of its own, so the
    authority issues a new one rather than handing back the one there)."""
    now = datetime.datetime.now(datetime.UTC)
    return ca.issue(MEMBER, directory=directory, not_before=now - datetime.timedelta(minutes=1),
                    not_after=now + datetime.timedelta(days=days))


async def test_a_member_serves_a_renewed_certificate_from_the_next_handshake_on(tmp_path: Path) -> None:
    ca = certs.active()
    assert ca is not None, "the test session runs with a local authority (tests/conftest.py)"
    own_dir = tmp_path / "m1-tls"
    first = _renew(ca, own_dir, 30)
    caller = tls_as(Kind.USER, "rotation")
    etcd = start_etcd(tmp_path / "etcd")
    cluster = Cluster(etcd.endpoint, tmp_path, members=1)
    try:
        put_realm_sync(etcd.endpoint, realm_yaml(members=1), 1)
        cluster.extra_env["m1"] = first.env()
        cluster.start_all()
        await cluster.leader()
        grpc_address = cluster.address("m1")
        found = re.findall(r"replication link (\S+) \(", Path(cluster.log_path("m1")).read_text())
        assert found, "the member logs its replication link's address"
        link_address = found[-1]

        async def presented() -> tuple[bytes, bytes]:
            return (await asyncio.to_thread(_presented, grpc_address, caller, "h2"),
                    await asyncio.to_thread(_presented, link_address, caller, None))

        assert await presented() == (_der(first), _der(first))
        renewed = _renew(ca, own_dir, 60)
        assert renewed.cert != first.cert and renewed.cert_path == first.cert_path
        assert await presented() == (_der(renewed), _der(renewed)), "the renewed certificate is not served"
        async with Client([grpc_address], timeout=20) as client:
            assert (await client.publish("payments", b"over the renewed certificate")).confirmed

        # Half-written: a key that is not the certificate's. The renewed one serves on.
        stranger = _renew(ca, tmp_path / "stranger", 90)
        Path(renewed.key_path).write_bytes(stranger.key)
        assert await presented() == (_der(renewed), _der(renewed))

        async def said_so() -> bool:
            return "changed but cannot be used" in Path(cluster.log_path("m1")).read_text()
        await wait_for(said_so, timeout=10)
        # The certificate that goes with that key is written: the pair serves.
        Path(renewed.cert_path).write_bytes(stranger.cert)
        assert await presented() == (_der(stranger), _der(stranger))
    finally:
        cluster.stop_all()
        etcd.stop()


async def test_members_reconnect_with_the_renewed_certificate_once_the_old_one_expired(tmp_path: Path) -> None:
    """Members keep their channels to etcd and to each other for their lifetime. Their first
    certificates expire shortly after a renewal; then etcd restarts (every member's connection
    to it is made again) and the leader is killed (the others elect a new one through etcd and
    promise to it). A channel reconnecting with the expired certificate is refused by etcd at
    every attempt: there would be no leader again."""
    ca = certs.active()
    assert ca is not None, "the test session runs with a local authority (tests/conftest.py)"
    lifetime = datetime.timedelta(seconds=30)
    issued = datetime.datetime.now(datetime.UTC)
    firsts = {}
    for name in ("m1", "m2", "m3"):
        firsts[name] = ca.issue(Identity(Kind.MEMBER, name, "default"), directory=tmp_path / f"{name}-tls",
                                not_before=issued - datetime.timedelta(minutes=1), not_after=issued + lifetime)
    etcd = start_etcd(tmp_path / "etcd")
    port = int(etcd.endpoint.rsplit(":", 1)[1])
    cluster = Cluster(etcd.endpoint, tmp_path, members=3)
    try:
        put_realm_sync(etcd.endpoint, realm_yaml(members=3), 1)
        for name, first in firsts.items():
            cluster.extra_env[name] = first.env()
        cluster.start_all()
        await cluster.leader()
        async with Client(cluster.addresses(), timeout=20) as client:
            assert (await client.publish("payments", b"before the renewal")).confirmed
        for name, first in firsts.items():
            renewed = ca.issue(Identity(Kind.MEMBER, name, "default"), directory=tmp_path / f"{name}-tls",
                               not_before=issued - datetime.timedelta(minutes=1),
                               not_after=issued + datetime.timedelta(days=60))
            assert renewed.cert != first.cert and renewed.cert_path == first.cert_path
        left = (issued + lifetime - datetime.datetime.now(datetime.UTC)).total_seconds()
        assert left > 5, "the renewal came too late for the test to mean anything: start sooner"

        async def terms() -> set[tuple[str, int]]:
            states = [await cluster.status(n) for n in cluster.names]
            return {(st.leader, st.epoch) if st is not None else ("", 0) for st in states}

        async def agreed() -> bool:
            seen = await terms()
            return len(seen) == 1 and ("", 0) not in seen

        await wait_for(agreed, timeout=10)
        before = await terms()
        # The old certificates expire (the members keep calling etcd meanwhile).
        await asyncio.sleep(max(left + 2, 15.0))

        # Nothing was cut for the renewal: the same leader in the same epoch at every member, and
        # their watches of etcd (opened on the replaced channels) still see a new realm version.
        assert await terms() == before, cluster.logs()
        put_realm_sync(etcd.endpoint, realm_yaml(members=3) + '  - name: "renewed.*"\n    kind: queue\n'
                       '    store: default\n', 2)

        async def read_the_new_realm() -> bool:
            states = [await cluster.status(n) for n in cluster.names]
            return all(st is not None and st.realm_version == 2 for st in states)

        await wait_for(read_the_new_realm, timeout=15)

        etcd.stop()
        etcd = start_etcd(tmp_path / "etcd", port=port)
        leader = await cluster.leader(timeout=30)
        cluster.kill(leader)
        successor = await cluster.leader(timeout=30, exclude=leader)
        async with Client(cluster.addresses(), timeout=20) as client:
            assert (await client.publish("payments", b"after the expiry")).confirmed
        assert successor != leader
        # Not one handshake with the expired certificate: every channel was opened anew before.
        refused = [n for n in cluster.names if "BAD_CERTIFICATE" in Path(cluster.log_path(n)).read_text()]
        assert not refused, f"a handshake of {refused} was refused: {cluster.logs()}"
    finally:
        cluster.stop_all()
        etcd.stop()
