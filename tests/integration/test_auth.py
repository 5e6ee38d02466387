"""Users, bearer tokens and per-destination permissions on a real cluster and realm service.

A real etcd, a member process and a `strongroom-realm` process, all with TLS on (the session's
authority, tests/conftest.py), and a realm that enables auth: the operator `test` (this
process's certificate), `app` (publish and subscribe on `orders.*` of store default), `watcher`
(browse) and `nobody` (no role). Each refusal is checked for its status, its ErrorInfo reason and
metadata, its count in `strongroom_refused_total` and that nothing stored changed.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import Cluster, realm_yaml, running_cluster, scrape, strongroom, tls_as, value, wait_for

from strongroom.api.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc, realm_pb2, realm_pb2_grpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import open_channel
from strongroom.client import Client
from strongroom.errors import InvalidArgument, PermissionDenied, StrongroomError, Unauthenticated
from strongroom.grpcerrors import from_rpc_error
from strongroom.local.process import realm_argv, spawn, stop_processes
from strongroom.security.identity import Kind
from strongroom.security.tls import Tls

AUTH = """\
auth:
  enabled: true
roles:
  - name: operator
    permissions:
      - actions: [administer, publish, subscribe]
  - name: orders-app
    permissions:
      - actions: [publish, subscribe]
        store: default
        destinations: ["orders.*"]
  - name: viewer
    permissions:
      - actions: [browse]
users:
  - name: test
    roles: [operator]
  - name: app
    roles: [orders-app]
  - name: watcher
    roles: [viewer]
  - name: nobody
"""


class Site:
    """The module's cluster and its realm service."""

    def __init__(self, cluster: Cluster, realm: str) -> None:
        self.cluster = cluster
        self.realm = realm


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("auth")
    with running_cluster(root, realm_yaml(members=1, extra_sections=AUTH), members=1) as cluster:
        log = root / "realm.log"
        process = spawn(realm_argv(cluster.etcd, "127.0.0.1:0"), log)
        try:
            deadline = time.monotonic() + 30
            port = 0
            while not port and time.monotonic() < deadline:
                for line in log.read_text().splitlines() if log.exists() else ():
                    if "realm service listening on 127.0.0.1:" in line:
                        port = int(line.rsplit(":", 1)[1])
                time.sleep(0.05)
            assert port, log.read_text()
            yield Site(cluster, f"127.0.0.1:{port}")
        finally:
            stop_processes([process])


def _error(exc: grpc.aio.AioRpcError) -> StrongroomError:
    err = from_rpc_error(exc)
    assert err is not None, exc
    return err


async def _refused_call(address: str, call: str, request: object, tls: Tls | None | object = None,
                        token: str | None = None, service: str = "messaging") -> StrongroomError:
    kwargs: dict[str, object] = {} if tls is None else {"tls": tls}
    async with open_channel(address, [], token=token, **kwargs) as channel:  # type: ignore[arg-type]
        stub = {"messaging": messaging_pb2_grpc.MessagingServiceStub, "admin": admin_pb2_grpc.AdminServiceStub,
                "realm": realm_pb2_grpc.RealmServiceStub}[service](channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await getattr(stub, call)(request, timeout=10)
    return _error(info.value)


def _publish(destination: str, body: bytes = b"x") -> messaging_pb2.PublishRequest:
    return messaging_pb2.PublishRequest(destination=destination, message={"body": body})


async def _stored(site: Site) -> int:
    st = await site.cluster.status(await site.cluster.leader())
    assert st is not None
    return sum(s.messages for s in st.stores)


async def _refusals(site: Site, reason: str) -> float:
    st = await site.cluster.status(await site.cluster.leader())
    assert st is not None and st.metrics_url
    return value(scrape(st.metrics_url), "strongroom_refused_total", where="grpc", reason=reason)


async def _issue(site: Site, user: str, ttl: float = 0.0) -> str:
    async with open_channel(site.realm, []) as channel:
        issued = await realm_pb2_grpc.RealmServiceStub(channel).IssueToken(
            realm_pb2.IssueTokenRequest(user=user, ttl_seconds=ttl, description="test"), timeout=10)
    return str(issued.token)


async def _wait_known(site: Site, token: str) -> None:
    """Until the member has the token (it follows the site's etcd)."""
    leader = site.cluster.address(await site.cluster.leader())

    async def known() -> bool:
        async with open_channel(leader, [], token=token) as channel:
            try:
                await admin_pb2_grpc.AdminServiceStub(channel).ListDurables(admin_pb2.ListDurablesRequest(), timeout=5)
            except grpc.aio.AioRpcError as exc:
                return _error(exc).metadata.get("refusal") != "token_unknown"
        return True

    await wait_for(known, timeout=10)


async def test_a_users_certificate_allows_its_grants_and_nothing_else(site: Site) -> None:
    leader = site.cluster.address(await site.cluster.leader())
    app = tls_as(Kind.USER, "app")
    async with open_channel(leader, [], tls=app) as channel:
        reply = await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(_publish("orders.queue"), timeout=10)
        assert reply.confirmed
    before, denied = await _stored(site), await _refusals(site, "not_granted")
    err = await _refused_call(leader, "Publish", _publish("billing.queue"), tls=app)
    assert isinstance(err, PermissionDenied)
    assert err.metadata == {"permission": "publish", "refusal": "not_granted"}
    assert "user 'app' has no permission 'publish' on destination 'billing.queue' of store 'default'" in err.message
    assert "authenticated by certificate" in err.message
    err = await _refused_call(leader, "Status", admin_pb2.StatusRequest(), tls=app, service="admin")
    assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "browse"
    watcher = tls_as(Kind.USER, "watcher")
    async with open_channel(leader, [], tls=watcher) as channel:
        st = await admin_pb2_grpc.AdminServiceStub(channel).Status(admin_pb2.StatusRequest(), timeout=10)
        assert st.member
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), tls=watcher)
    assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "publish"
    err = await _refused_call(leader, "StepDown", admin_pb2.StepDownRequest(), tls=watcher, service="admin")
    assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "administer"
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), tls=tls_as(Kind.USER, "nobody"))
    assert isinstance(err, PermissionDenied)
    assert await _stored(site) == before
    assert await _refusals(site, "not_granted") == denied + 5
    assert "refused (grpc, not_granted)" in Path(site.cluster.log_path(await site.cluster.leader())).read_text()


async def test_a_publish_stream_refuses_the_messages_of_a_destination_it_may_not_use(site: Site) -> None:
    before = await _stored(site)
    token = await _issue(site, "app")
    await _wait_known(site, token)
    async with Client(site.cluster.addresses(), token=token, timeout=10) as client:
        await client.publish("orders.stream.queue", b"mine")
        with pytest.raises(PermissionDenied, match="'publish' on destination 'billing.queue'"):
            await client.publish("billing.queue", b"not mine")
        assert await _stored(site) == before + 1
        with pytest.raises(PermissionDenied, match="'subscribe' on destination 'billing.queue'"):
            sub = await client.subscribe("billing.queue")
            await sub.next(timeout=5)
        sub = await client.subscribe("orders.stream.queue")
        got = await sub.next(timeout=10)
        assert got.body == b"mine"
        await got.ack()
        await sub.close()


async def test_a_token_names_its_user_until_it_is_revoked_and_a_forged_one_is_refused(site: Site) -> None:
    leader = site.cluster.address(await site.cluster.leader())
    token = await _issue(site, "app")
    await _wait_known(site, token)
    # The token counts over the certificate: user nobody's connection calls as app.
    async with open_channel(leader, [], tls=tls_as(Kind.USER, "nobody"), token=token) as channel:
        await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(_publish("orders.queue"), timeout=10)
    before = await _stored(site)
    revoked_before = await _refusals(site, "token_revoked")
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), token=forged)
    assert isinstance(err, Unauthenticated) and err.metadata == {"refusal": "token_forged"}
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), token="srt_" + "0" * 16 + "_" + "1" * 64)
    assert err.metadata == {"refusal": "token_unknown"}
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), token="let-me-in")
    assert err.metadata == {"refusal": "token_malformed"}
    # Revoked with the CLI, as an operator would.
    out = strongroom(site.realm, "auth", "revoke", token.split("_")[1], "--json")
    assert out.returncode == 0, out.stderr
    token_id = token.split("_")[1]

    async def refused_now() -> bool:
        # Until the member has seen the revocation, the probe's publish (to a queue of its own)
        # goes through; from then on it is refused.
        async with open_channel(leader, [], token=token) as channel:
            try:
                await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(_publish("orders.probe.queue"),
                                                                               timeout=10)
            except grpc.aio.AioRpcError as exc:
                return _error(exc).metadata == {"refusal": "token_revoked"}
        return False

    await wait_for(refused_now, timeout=10)
    before = await _stored(site)
    assert f"token {token_id} of user 'app' was revoked" in (
        await _refused_call(leader, "Publish", _publish("orders.queue"), token=token)).message
    assert await _stored(site) == before
    assert await _refusals(site, "token_revoked") >= revoked_before + 2
    listed = strongroom(site.realm, "auth", "list", "--json")
    assert listed.returncode == 0 and f'"id": "{token_id}"' in listed.stdout and '"revoked_at": 0' not in \
        listed.stdout.split(token_id, 1)[1].split("}", 1)[0]
    assert "srt_" not in listed.stdout  # never a token's text


async def test_a_token_ends_when_its_time_is_up(site: Site) -> None:
    leader = site.cluster.address(await site.cluster.leader())
    token = await _issue(site, "app", ttl=2.0)
    await _wait_known(site, token)
    async with open_channel(leader, [], token=token) as channel:
        await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(_publish("orders.queue"), timeout=10)
    await asyncio.sleep(2.2)
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), token=token)
    assert isinstance(err, Unauthenticated) and err.metadata == {"refusal": "token_expired"}


async def test_only_an_administrator_issues_tokens_and_applies_the_realm(site: Site) -> None:
    app = tls_as(Kind.USER, "app")
    err = await _refused_call(site.realm, "IssueToken", realm_pb2.IssueTokenRequest(user="app"), tls=app,
                              service="realm")
    assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "administer"
    err = await _refused_call(site.realm, "Apply", realm_pb2.ApplyRealmRequest(yaml="clusters: []"), tls=app,
                              service="realm")
    assert isinstance(err, PermissionDenied)
    err = await _refused_call(site.realm, "IssueToken", realm_pb2.IssueTokenRequest(user="mallory"),
                              service="realm")
    assert isinstance(err, InvalidArgument) and "the realm has no user 'mallory'" in err.message
    async with open_channel(site.realm, [], tls=tls_as(Kind.USER, "watcher")) as channel:
        got = await realm_pb2_grpc.RealmServiceStub(channel).Get(realm_pb2.GetRealmRequest(), timeout=10)
        assert "auth:" in got.yaml
    issued = strongroom(site.realm, "auth", "issue", "watcher", "--ttl", "60", "--json")
    assert issued.returncode == 0, issued.stderr
    assert '"user": "watcher"' in issued.stdout and '"token": "srt_' in issued.stdout
    refused = strongroom(site.realm, "auth", "issue", "mallory")
    assert refused.returncode == 1 and "no user 'mallory'" in refused.stderr


def test_the_cli_calls_with_a_token(site: Site) -> None:
    token = asyncio.run(_issue(site, "app"))
    servers = ",".join(site.cluster.addresses())
    env_tls = tls_as(Kind.USER, "nobody").env()
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run([*_cli(), "-s", servers, "--token", token, "publish", "orders.queue", "--body", "cli"],
                             check=False, capture_output=True, text=True, env=_env(env_tls), timeout=60)
        if out.returncode == 0 or time.monotonic() > deadline or "token_unknown" not in out.stderr:
            break
        time.sleep(0.2)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([*_cli(), "-s", servers, "publish", "orders.queue", "--body", "cli"],
                         check=False, capture_output=True, text=True, env=_env(env_tls), timeout=60)
    assert out.returncode == 1 and "PERMISSION_DENIED" in out.stderr and "user 'nobody'" in out.stderr


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "strongroom.cli.main"]


def _env(tls_env: dict[str, str]) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    env.update(tls_env)
    return env


async def test_a_token_issued_a_moment_ago_is_taken_and_a_certificate_that_names_no_user_is_refused(
        site: Site) -> None:
    leader = site.cluster.address(await site.cluster.leader())
    token = await _issue(site, "app")
    # No wait for the member's watch: an id it does not know yet is read from etcd once.
    async with open_channel(leader, [], token=token) as channel:
        reply = await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(_publish("orders.queue"), timeout=10)
        assert reply.confirmed
    before = await _stored(site)
    # etcd's certificate is the authority's too, but names neither a user nor a process that calls clients' calls.
    err = await _refused_call(leader, "Publish", _publish("orders.queue"), tls=tls_as(Kind.ETCD, "etcd", "etcd"))
    assert isinstance(err, Unauthenticated) and err.metadata == {"refusal": "wrong_identity"}
    assert await _stored(site) == before


async def test_maps_and_the_committed_log_are_checked_too(site: Site) -> None:
    leader = site.cluster.address(await site.cluster.leader())
    app = tls_as(Kind.USER, "app")
    async with open_channel(leader, [], tls=app) as channel:
        maps = messaging_pb2_grpc.MapServiceStub(channel)
        await maps.Put(messaging_pb2.MapPutRequest(store="default", map="orders.prices", key="a", value=b"1"),
                       timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await maps.Put(messaging_pb2.MapPutRequest(store="default", map="billing.prices", key="a", value=b"1"),
                           timeout=10)
        err = _error(info.value)
        assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "publish"
        # The committed log holds every message: a user reads it only with administer.
        stream = rgrpc.ReplicationServiceStub(channel).StreamCommitted(
            rpb.StreamCommittedRequest(from_index=1, max_entries=1), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.read()
        err = _error(info.value)
        assert isinstance(err, PermissionDenied) and err.metadata["permission"] == "administer"
    async with open_channel(leader, []) as channel:  # user test, an operator
        stream = rgrpc.ReplicationServiceStub(channel).StreamCommitted(
            rpb.StreamCommittedRequest(from_index=1, max_entries=1), timeout=10)
        first = await stream.read()
        assert first.first_index == 1
        stream.cancel()
