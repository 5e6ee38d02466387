"""A realm with forwarding zones runs each cluster as a site of its own: `strongroom up` starts an
etcd and a realm service per cluster, applies the realm at each, and `down` stops all of them.

Real etcd processes, real realm services and members, started through the `strongroom` command.
(The routers a routed store adds are tested with the router, in test_routing*.py.)
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from strongroom.etcd import EtcdClient
from strongroom.keys import REALM_CURRENT, leader_key
from strongroom.local.etcdproc import free_port
from strongroom.local.launcher import live_pids, load_state
from strongroom.local.process import pid_alive
from tests.integration.test_local_cluster import kill_state_pids, strongroom

REALM = """\
clusters:
  - name: east
    storage: memory
    members: [{name: e1}]
  - name: west
    storage: memory
    members: [{name: w1}]
zones:
  - name: z
    clusters: [east, west]
stores:
  - name: e
    cluster: east
  - name: w
    cluster: west
destinations:
  - name: "e.*"
    store: e
  - name: "w.*"
    store: w
"""


async def _keys(endpoint: str) -> tuple[bool, bool, bool]:
    """Whether this etcd holds the realm, and an east and a west leader key."""
    etcd = EtcdClient([endpoint])
    try:
        realm = await etcd.get(REALM_CURRENT)
        east = await etcd.get(leader_key("east"))
        west = await etcd.get(leader_key("west"))
        return realm is not None, east is not None, west is not None
    finally:
        await etcd.close()


async def _versions(sites: dict[str, Any]) -> dict[str, int]:
    """The realm version each site's etcd holds."""
    out = {}
    for name, site in sites.items():
        etcd = EtcdClient([site["etcd"]["endpoint"]])
        try:
            kv = await etcd.get(REALM_CURRENT)
            assert kv is not None
            out[name] = int(json.loads(kv.value)["version"])
        finally:
            await etcd.close()
    return out


def test_each_cluster_of_a_zoned_realm_is_a_site(tmp_path: Path) -> None:
    realm_file = tmp_path / "zones.yaml"
    realm_file.write_text(REALM)
    data = tmp_path / "data"
    try:
        up = strongroom("up", "--detach", "--realm", str(realm_file), "--data-dir", str(data))
        assert up.returncode == 0, up.stdout + up.stderr
        state = load_state(data)
        assert state is not None
        sites = state["sites"]
        assert set(sites) == {"east", "west"}
        assert sites["east"]["etcd"]["endpoint"] != sites["west"]["etcd"]["endpoint"]
        assert state["clusters"]["east"]["etcd"] == sites["east"]["etcd"]["endpoint"]
        # Each site's etcd holds the realm and its own cluster's leader, nothing of the other's.
        assert asyncio.run(_keys(sites["east"]["etcd"]["endpoint"])) == (True, True, False)
        assert asyncio.run(_keys(sites["west"]["etcd"]["endpoint"])) == (True, False, True)
        published = strongroom("publish", "e.a", "--body", "hello", "--data-dir", str(data))
        assert published.returncode == 0, published.stderr
        # --at picks one cluster's members of the state file.
        west = strongroom("status", "--json", "--at", "west", "--data-dir", str(data))
        assert west.returncode == 0, west.stderr
        assert [m["cluster"] for m in json.loads(west.stdout)] == ["west"]
        missing = strongroom("status", "--at", "north", "--data-dir", str(data))
        assert missing.returncode != 0 and "no cluster 'north'" in missing.stderr
        # `realm apply` applies at every site.
        changed = tmp_path / "zones2.yaml"
        changed.write_text(REALM.replace('  - name: "w.*"', '  - name: "extra.*"\n    store: w\n  - name: "w.*"'))
        applied = strongroom("realm", "apply", str(changed), "--data-dir", str(data))
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert "site east: realm version 2" in applied.stdout and "site west: realm version 2" in applied.stdout
        assert asyncio.run(_versions(sites)) == {"east": 2, "west": 2}
        pids = [pid for _, pid in live_pids(state)]
        assert len(pids) == 6  # two etcds, two realm services, two members
        down = strongroom("down", "--data-dir", str(data))
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(pid_alive(pid) for pid in pids)
    finally:
        kill_state_pids(load_state(data))


def test_a_cluster_with_a_standby_set_runs_a_standby_site_with_its_dr_service(tmp_path: Path) -> None:
    """`strongroom up` with a standby set (examples/dr.yaml on free ports): the primary site, the
    standby site with its own etcd and realm service, the standby members and a DR service at
    each site (the primary site's idle while it is the primary); what is published at the
    primary reaches the standby; status shows both sets and each site's DR service; `down` stops
    everything."""
    ports = [free_port() for _ in range(6)]
    text = (Path(__file__).resolve().parents[2] / "examples" / "dr.yaml").read_text()
    for fixed, port in zip((7501, 7502, 7503, 7511, 7512, 7513), ports, strict=True):
        text = text.replace(f"127.0.0.1:{fixed}", f"127.0.0.1:{port}")
    realm_file = tmp_path / "dr.yaml"
    realm_file.write_text(text)
    data = tmp_path / "data"
    try:
        up = strongroom("up", "--detach", "--realm", str(realm_file), "--data-dir", str(data))
        assert up.returncode == 0, up.stdout + up.stderr
        assert "dr       main" in up.stdout and "standby  main/s1" in up.stdout, up.stdout
        assert "at the primary site: primary of generation 0: nothing to ship" in up.stdout, up.stdout
        state = load_state(data)
        assert state is not None
        main = state["clusters"]["main"]
        assert set(main["standby"]["members"]) == {"s1", "s2", "s3"} and main["standby"]["dr"]["pid"]
        assert main["dr"]["pid"] and main["dr"]["address"] != main["standby"]["dr"]["address"]
        assert main["standby"]["etcd"] == state["sites"]["main-standby"]["etcd"]["endpoint"]
        assert main["standby"]["etcd"] != state["etcd"]["endpoint"]
        # Clients are given the primary's members only.
        for i in range(5):
            published = strongroom("publish", "jobs.queue", "--body", f"job {i}", "--data-dir", str(data))
            assert published.returncode == 0, published.stderr

        def standby_has_them() -> bool:
            status = strongroom("status", "--json", "--data-dir", str(data))
            assert status.returncode == 0, status.stderr
            members = json.loads(status.stdout)
            primary = max(m["commit_index"] for m in members if not m.get("standby"))
            standby = [m for m in members if m.get("standby")]
            return len(standby) == 3 and all(m["applied_index"] >= primary for m in standby)
        deadline = time.monotonic() + 30
        while not standby_has_them():
            assert time.monotonic() < deadline, "the standby did not catch up\n" + \
                (data / "logs" / "main-dr.log").read_text()[-3000:]
            time.sleep(0.5)
        dr = strongroom("dr", "status", "--json", "--data-dir", str(data))
        assert dr.returncode == 0, dr.stdout + dr.stderr
        shipping, idle = json.loads(dr.stdout)  # the standby site's, then the primary site's
        assert shipping["cluster"] == "main" and shipping["state"] == "shipping" and shipping["site"] == "standby"
        assert shipping["address"] == main["standby"]["dr"]["address"]
        assert int(shipping["standby_last_index"]) >= 5 and set(shipping["primary"]) == {
            f"127.0.0.1:{p}" for p in ports[:3]}
        assert shipping["role"] == "standby" and int(shipping.get("generation", 0)) == 0
        # The primary site's DR service serves its status and does nothing: its site is the primary.
        assert idle["address"] == main["dr"]["address"] and idle["site"] == "primary"
        assert idle["state"] == "primary" and idle["role"] == "primary" and int(idle.get("generation", 0)) == 0
        assert int(idle.get("standby_last_index", 0)) == 0 and not idle.get("primary_member")
        assert set(idle["primary"]) == {f"127.0.0.1:{p}" for p in ports[:3]}
        assert set(idle["standby"]) == {f"127.0.0.1:{p}" for p in ports[3:]}
        # `status --json`: every member carries the state of its site's DR service.
        members = json.loads(strongroom("status", "--json", "--data-dir", str(data)).stdout)
        assert {(m["member"], m["dr_service"]["address"], m["dr_service"]["state"]) for m in members} == {
            *((f"m{i}", main["dr"]["address"], "primary") for i in (1, 2, 3)),
            *((f"s{i}", main["standby"]["dr"]["address"], "shipping") for i in (1, 2, 3))}
        # The primary is up: activation is refused (PRIMARY_HEALTHY) and changes nothing.
        refused = strongroom("dr", "activate", "--cluster", "main", "--data-dir", str(data))
        assert refused.returncode == 1 and "PRIMARY_HEALTHY" in refused.stdout, refused.stdout + refused.stderr
        text_status = strongroom("status", "--data-dir", str(data))
        assert "cluster main (standby set): leader s" in text_status.stdout, text_status.stdout
        assert "behind the primary: 0 entries" in text_status.stdout, text_status.stdout
        assert "DR role at this site: standby, generation 0" in text_status.stdout, text_status.stdout
        assert f"DR service at this site ({main['dr']['address']}): primary of generation 0" in text_status.stdout
        assert f"DR service at this site ({main['standby']['dr']['address']}): shipping from" in text_status.stdout
        pids = [pid for _, pid in live_pids(state)]
        assert len(pids) == 12  # two etcds, two realm services, six members, a DR service at each site
        down = strongroom("down", "--data-dir", str(data))
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(pid_alive(pid) for pid in pids)
    finally:
        kill_state_pids(load_state(data))
