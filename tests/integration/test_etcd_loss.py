"""etcd restarted without its data: the cluster never leads with an epoch it promised already,
and the realm the members run is written back.

A real etcd, real members on real RocksDB, a real client. etcd's revisions start from 1 again
after the loss, so every new leader key's epoch is below what the members promised: without
the epoch base (persistence/election.py) no leader could ever serve again (every member
refuses), and a leader whose epoch only equals one already issued would share it with the old
leader. Without the realm written back, the operator's next apply would be version 1 again,
below what the members run, and never reach them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from harness import Cluster, put_realm, realm_yaml, wait_for

from strongroom.client import Client
from strongroom.etcd import EtcdClient
from strongroom.keys import epoch_base_key, stored_key
from strongroom.local.etcdproc import start_etcd
from strongroom.realm.store import RealmStore

pytestmark = pytest.mark.slow

SERVING = re.compile(r" (m\d) INFO strongroom\.node: leader of \S+ serving at epoch (\d+)")


async def _publish(client: Client, destination: str, bodies: list[bytes]) -> None:
    pub = client.publisher(destination, window=64)
    futures = [await pub.send(b) for b in bodies]
    for f in futures:
        await f
    await pub.close()


def serving_epochs(cluster: Cluster, since: dict[str, int] | None = None) -> list[tuple[int, str]]:
    """(epoch, member) of every 'serving at epoch' line in the members' logs (after the byte
    offsets `since`, when given)."""
    out = []
    for name in cluster.names:
        text = cluster.log_path(name).read_bytes()[(since or {}).get(name, 0):].decode(errors="replace")
        for match in SERVING.finditer(text):
            out.append((int(match.group(2)), match.group(1)))
    return out


async def test_etcd_restarted_without_its_data_gets_a_leader_above_every_promise(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path / "etcd")
    port = int(etcd.endpoint.rsplit(":", 1)[1])
    realm = realm_yaml(lease_ttl=2)
    await put_realm(etcd.endpoint, realm, 1)
    cluster = Cluster(etcd.endpoint, tmp_path)
    client = Client(cluster.addresses(), timeout=60)
    try:
        # etcd's revision well above what a fresh etcd reaches in this test, then a leader of
        # it: its epoch (the key's create revision) is far above the new etcd's revisions.
        scratch = EtcdClient(etcd.endpoint)
        for i in range(300):
            await scratch.put("/scratch/revision", str(i).encode())
        await scratch.close()
        cluster.start_all()
        leader = await cluster.leader()
        status = await cluster.status(leader)
        assert status is not None
        old_epoch = status.epoch
        assert old_epoch > 300
        await _publish(client, "before.queue", [f"b{i}".encode() for i in range(200)])
        realm2 = realm + '  - name: "*.later"\n    kind: queue\n    store: default\n'
        await put_realm(etcd.endpoint, realm2, 2)

        async def run_version(version: int) -> bool:
            states = [await cluster.status(n) for n in cluster.names]
            return all(st is not None and st.realm_version == version for st in states)
        await wait_for(lambda: run_version(2))

        # etcd loses its data: stopped, its data dir removed, started again on the same port.
        logged = {name: cluster.log_path(name).stat().st_size for name in cluster.names}
        etcd.stop()
        shutil.rmtree(tmp_path / "etcd" / "etcd")
        etcd = start_etcd(tmp_path / "etcd", port=port)

        async def serving_above() -> bool:
            for name in cluster.names:
                st = await cluster.status(name)
                if st is not None and st.role == "leader" and st.epoch > old_epoch:
                    return True
            return False
        await wait_for(serving_above, timeout=60)

        await _publish(client, "before.queue", [f"a{i}".encode() for i in range(200)])
        sub = await client.subscribe("before.queue", "", credit=512)
        got = []
        while True:
            try:
                m = await sub.next(timeout=3)
            except TimeoutError:
                break
            got.append(bytes(m.body))
            await sub.ack(m)
        await sub.close()
        assert got == [f"b{i}".encode() for i in range(200)] + [f"a{i}".encode() for i in range(200)]

        # No epoch served by two members, and none after the loss at or below the old one.
        served = serving_epochs(cluster)
        owners: dict[int, set[str]] = {}
        for epoch, member in served:
            owners.setdefault(epoch, set()).add(member)
        assert all(len(m) == 1 for m in owners.values()), served
        after = serving_epochs(cluster, since=logged)
        assert after and all(epoch > old_epoch for epoch, _ in after), (old_epoch, after)

        # The new etcd holds the base that lifted the epochs, every member's stored-state key
        # again (a member that later loses its disk must still be known to have held state) and
        # the realm version the members run; the next apply is numbered above it and reaches them.
        check = EtcdClient(etcd.endpoint)
        try:
            current = await RealmStore(check).current()
            assert current is not None and current.version == 2 and current.yaml == realm2
            await put_realm(etcd.endpoint, realm2.replace("*.later", "*.latest"), 3)
            await wait_for(lambda: run_version(3))
            base = await check.get(epoch_base_key("default"))
            assert base is not None and int(base.value) >= old_epoch - 1, base
            for name in cluster.names:
                assert await check.get(stored_key("default", name)) is not None, name
        finally:
            await check.close()
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        await client.close()
        cluster.stop_all()
        etcd.stop()
