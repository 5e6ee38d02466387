"""The leader label at a disaster-recovery standby site (docs/dr.md, "On Kubernetes"): the
standby set's leader leaves its pod unlabelled, so the standby release's leader Service has no
endpoint until activation. Through the real Kubernetes Python client against the loopback API
server of test_leader_label.py, and a member elected through real etcd."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from strongroom.persistence.k8s import LEADER_VALUE, ROLE_LABEL, install_leader_label
from tests.deploy import test_leader_label as base
from tests.deploy.test_leader_label import POD, FakeApiServer, _api, _pod_env, _until

api_server = base.api_server
"""The loopback API server (fixture), with its certificate (fixture, below)."""
certificate = base.certificate


async def test_a_standby_leader_leaves_its_pod_unlabelled_until_its_site_is_activated(
        api_server: FakeApiServer, tmp_path: Path, etcd: Any) -> None:
    """The chart's leader Service selects the label, and a standby leader refuses every client
    write (STANDBY): so the standby set's leader, elected through real etcd, leaves its pod
    unlabelled (the standby release's leader Service stays empty, docs/dr.md "On Kubernetes"),
    and labels it once its site is activated (the DR record says primary of generation 1) and it
    serves."""
    from strongroom.dr.record import DrRole, read_record, write_record
    from strongroom.etcd import EtcdClient
    from strongroom.persistence.config import MemberConfig as NodeConfig
    from strongroom.persistence.node import PersistenceNode
    from strongroom.realm.model import parse_realm

    cluster = f"standby-{tmp_path.name[-12:].strip('_-') or 'x'}".lower()
    realm = parse_realm(f"clusters:\n  - name: {cluster}\n    storage: memory\n    members:\n      - name: a1\n"
                        f"    standby:\n      members:\n        - name: {POD}\n      primary: [\"127.0.0.1:1\"]\n"
                        f"stores:\n  - name: s\n    cluster: {cluster}\n", "test realm")
    node = PersistenceNode(NodeConfig(cluster=cluster, member=POD, address="127.0.0.1:2",
                                      data_dir=tmp_path / "data", etcd_endpoints=etcd.endpoint), realm, 1)
    label = install_leader_label(node, environ=_pod_env(api_server), api=_api(api_server, tmp_path))
    assert label is not None and label.reset_task is not None
    await label.reset_task
    await node.start()
    stopped = False
    try:
        await _until(node.is_leader_role, timeout=20.0)
        assert node.standby
        await asyncio.sleep(1.0)  # the standby leader leads, and labels nothing
        assert [r.body["metadata"]["labels"][ROLE_LABEL] for r in api_server.requests] == [None]

        client = EtcdClient(etcd.endpoint)
        try:
            current = await read_record(client, cluster, node.site.default)
            activated = current.changed(role=DrRole.PRIMARY, generation=1, reason="activated by the test")
            assert await write_record(client, cluster, activated, current)
        finally:
            await client.close()
        assert await node.wait_serving(20.0), "the activated member never served"
        await _until(lambda: len(api_server.requests) >= 2)
        await node.stop()
        stopped = True
    finally:
        if not stopped:
            await node.stop()
    values = [r.body["metadata"]["labels"][ROLE_LABEL] for r in api_server.requests]
    assert values[:2] == [None, LEADER_VALUE]  # startup clear; labelled only once it serves as the primary
