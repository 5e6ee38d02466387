"""`strongroom-router` refuses to start for a cluster the realm does not route: exit status 2 and
the reason, against a real etcd holding the realm (nothing is started, nothing stored)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import pytest

from strongroom.local.etcdproc import EtcdProcess, free_port, start_etcd
from strongroom.local.process import router_argv
from strongroom.realm.store import store_realm

REALM = """\
clusters:
  - name: rio
    members: [{name: r1}]
    router: {address: "127.0.0.1:%d"}
  - name: london
    members: [{name: l1}]
    router: {address: "127.0.0.1:%d"}
  - name: paris
    members: [{name: p1}]
zones:
  - {name: z, clusters: [rio, london]}
stores:
  - {name: wide, routed: true, zones: [z]}
  - {name: local, cluster: paris}
destinations:
  - {name: "wide.*", store: wide}
  - {name: "*", store: local}
"""


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    proc = start_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        asyncio.run(store_realm(proc.endpoint, REALM % (free_port(), free_port()), "router-main.yaml"))
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize(("cluster", "why"), [
    ("paris", "the realm routes nothing at cluster 'paris'"),
    ("tokyo", "the realm defines no cluster 'tokyo'"),
])
def test_a_router_for_a_cluster_the_realm_does_not_route_exits_2(etcd: EtcdProcess, cluster: str,
                                                                 why: str) -> None:
    argv = router_argv(etcd.endpoint, cluster, f"127.0.0.1:{free_port()}", "r1")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert why in done.stderr
