"""The leader's wall clock stepped by minutes while it runs: no lifetime ends early, none never.

Real etcd, real members whose CLOCK_REALTIME an LD_PRELOAD shim shifts at run time
(`strongroom.chaos.clockshift`; the monotonic clock is left alone, as after `date -s` or an NTP
step). Time-to-lives on the wall clock and retentions (both on the wall clock by design) and
time-to-lives on the pseudo-clock are measured while the leader's clock jumps 10 minutes ahead,
then 10 minutes behind: every message is still there after the forward jump and gone within a
few seconds of its lifetime after the backward one. Without `strongroom.clocks` (the leader
reading `time.time()`), the forward jump expired the wall-clock ones at once and the backward
one kept them for ten minutes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from harness import Cluster, put_realm, realm_yaml, wait_for

from strongroom.chaos.clockshift import build_clock_shim, clock_env, set_offset
from strongroom.client import Client
from strongroom.local.etcdproc import start_etcd

pytestmark = pytest.mark.slow

LIFETIME = 15
STORES = {"walls": "a.wall", "pseudos": "a.pseudo", "retains": "a.retain"}
EXTRA_STORES = "".join(f"  - name: {s}\n    cluster: default\n" for s in STORES)
EXTRA_DESTINATIONS = f"""\
  - name: "*.wall"
    kind: queue
    store: walls
    ttl_seconds: {LIFETIME}
    ttl_clock: wall
  - name: "*.pseudo"
    kind: queue
    store: pseudos
    ttl_seconds: {LIFETIME}
  - name: "*.retain"
    kind: topic
    store: retains
    retain_seconds: {LIFETIME}
"""


async def counts(cluster: Cluster, member: str) -> dict[str, int]:
    st = await cluster.status(member)
    assert st is not None
    return {s.name: int(s.messages) for s in st.stores if s.name in STORES}


async def test_a_leader_clock_stepped_by_minutes_ends_no_lifetime_early_and_none_never(tmp_path: Path) -> None:
    shim = build_clock_shim(tmp_path / "shim")
    if shim is None:
        pytest.skip("no C compiler: the clock shim cannot be built")
    etcd = start_etcd(tmp_path / "etcd")
    await put_realm(etcd.endpoint, realm_yaml(lease_ttl=2, extra_stores=EXTRA_STORES,
                                              extra_destinations=EXTRA_DESTINATIONS), 1)
    cluster = Cluster(etcd.endpoint, tmp_path)
    offsets = {n: tmp_path / f"{n}.clock" for n in cluster.names}
    for n in cluster.names:
        cluster.extra_env[n] = clock_env(shim, offsets[n])
    client = Client(cluster.addresses(), timeout=30)
    try:
        cluster.start_all()
        leader = await cluster.leader()
        epoch = (await cluster.status(leader)).epoch  # type: ignore[union-attr]
        for destination in STORES.values():
            pub = client.publisher(destination, window=16)
            for f in [await pub.send(f"{destination}-{i}".encode()) for i in range(10)]:
                await f
            await pub.close()
        published = time.monotonic()
        assert await counts(cluster, leader) == {s: 10 for s in STORES}

        # Ten minutes ahead: nothing may expire early.
        set_offset(offsets[leader], 600)
        await asyncio.sleep(3)
        assert await counts(cluster, leader) == {s: 10 for s in STORES}, "expired early after a forward step"

        # Ten minutes behind the true time: every lifetime still ends on time.
        set_offset(offsets[leader], -600)

        async def all_gone() -> bool:
            return await counts(cluster, leader) == {s: 0 for s in STORES}
        await wait_for(all_gone, timeout=LIFETIME + 10)
        ended = time.monotonic() - published
        assert ended >= LIFETIME - 0.5, ended
        status = await cluster.status(leader)
        assert status is not None and status.role == "leader" and status.epoch == epoch, "the leader changed"
        assert "stepped while it ran" in cluster.log_path(leader).read_text()
        for n in cluster.names:  # every member applied the same decisions
            assert await counts(cluster, n) == {s: 0 for s in STORES}, n
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        await client.close()
        cluster.stop_all()
        etcd.stop()
