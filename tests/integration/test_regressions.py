"""Regressions found by the fault-injection suite (tests/chaos, `make chaos`).

Each test is the smallest reproduction of one failure the chaos runs found. A test marked
`xfail(strict=True)` documents a bug not fixed yet: it starts passing (and so failing the
suite) the day the product is fixed; then drop the marker.

- an idle `Subscription.next(timeout)` cancelled the stream (fixed in 08b8b18);
- a leader whose disk filled up kept leading without committing (fixed in 08b8b18);
- a step-down could hang for good in `PeerReplicator.stop()` (fixed in 83130a1).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness import Cluster, put_realm, realm_yaml, wait_for

from strongroom.client import Client
from strongroom.local.etcdproc import start_etcd
from strongroom.persistence.replicator import HEARTBEAT_SECONDS, PeerReplicator
from strongroom.persistence.transport import FollowerConnection

pytestmark = pytest.mark.slow


async def test_subscription_survives_an_idle_next_timeout(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """An idle `next(timeout)` raising TimeoutError must leave the subscription usable.

    Found by the pause-leader, partition-members and etcd-down chaos runs: every consumer that
    polled with a timeout while no message came stopped for good."""
    cluster: Cluster = make_cluster()
    await cluster.leader()
    client = Client(cluster.addresses(), timeout=20)
    try:
        sub = await client.subscribe("regress-idle.queue", credit=16)
        await client.publish("regress-idle.queue", b"first")
        first = await sub.next(timeout=10)
        assert first is not None and first.body == b"first"
        await sub.ack(first)
        with pytest.raises(TimeoutError):  # idle: nothing to deliver
            await sub.next(timeout=0.3)
        await client.publish("regress-idle.queue", b"second")
        try:
            second = await sub.next(timeout=10)
        except asyncio.CancelledError:
            pytest.fail("next() raised CancelledError: the idle timeout had cancelled the stream")
        assert second is not None and second.body == b"second"
        await sub.close()
    finally:
        await client.close()


def _mount_tmpfs(path: Path, size_mb: int) -> bool:
    from strongroom.chaos.cluster import mount_tmpfs

    return mount_tmpfs(path, size_mb) is None


def _fill(path: Path) -> None:
    from strongroom.chaos.faults import fill_disk

    fill_disk(path)


async def test_leader_with_a_full_disk_lets_the_others_commit(tmp_path: Path) -> None:
    """Disk full on the leader: it must stop acknowledging and the two others must keep
    committing (through a new leader) within a few lease TTLs.

    Found by the disk-full chaos run (tmpfs data dirs)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    etcd = start_etcd(tmp_path / "etcd")
    ttl = 2
    cluster = Cluster(etcd.endpoint, tmp_path)
    mounted: list[Path] = []
    client: Client | None = None
    try:
        await put_realm(etcd.endpoint, realm_yaml(lease_ttl=ttl), 1)
        for name in cluster.names:
            if not _mount_tmpfs(cluster.data_dir(name), 64):
                pytest.skip("mount -t tmpfs is not permitted here")
            mounted.append(cluster.data_dir(name))
        cluster.start_all()
        leader = await cluster.leader()
        client = Client(cluster.addresses(), timeout=20)
        assert (await client.publish("regress-disk.queue", b"before")).confirmed
        await asyncio.get_running_loop().run_in_executor(None, _fill, cluster.data_dir(leader))
        # Enough bytes that the leader's next log writes need space it no longer has.
        started = time.monotonic()
        body = b"x" * 256 * 1024
        for i in range(40):
            try:
                res = await asyncio.wait_for(client.publish("regress-disk.queue", body), 6 * ttl)
            except TimeoutError:
                pytest.fail(f"publish {i} not committed within {6 * ttl}s; {time.monotonic() - started:.0f}s "
                            f"after the leader {leader}'s disk filled up\n" + cluster.logs())
            assert res.confirmed
    finally:
        if client is not None:
            await client.close()
        for name in cluster.names:
            cluster.kill(name, signal.SIGKILL)
        from strongroom.chaos.cluster import unmount

        for path in mounted:
            unmount(path)
        etcd.stop()


async def test_replicator_stop_returns_when_kicked_in_the_same_turn() -> None:
    """`_step_down` stops every replicator; the leader's last commit kicked them in the same
    turn (`_advance_commit`, then the failing round). `stop()` must still return.

    Found twice by the chaos runs (task dumps of the live member, SIGUSR1):
    - disk-full: the full-disk leader logged "stepping down", then `_step_down` waited forever
      in `await rep.stop()` (replicate-m1 "cancelling" at replicator.py
      `await asyncio.wait_for(self._kick.wait(), HEARTBEAT_SECONDS)`), so `election.resign()`
      never ran, its lease kept being renewed and no member was elected until the process was
      killed 10 s later;
    - etcd-down: a leader whose lease ran out stepped down from `_advance_commit`; that
      `_step_down` task hung the same way before `dispatcher.stop()`, so its subscriptions were
      never closed and every consumer sat on a silent stream for good (931 messages stored but
      never delivered until a fresh subscriber came).
    Every step-down path awaits `rep.stop()` (lease lost, quorum watchdog, newer epoch, storage
    failure)."""
    # A term the replicator only reads: no longer alive, so each round is a heartbeat wait.
    term = SimpleNamespace(epoch=1, log=SimpleNamespace(last_index=0), alive=lambda: False)
    rep = PeerReplicator(term, FollowerConnection("default", "m2", lambda name: "127.0.0.1:9"))  # type: ignore[arg-type]
    rep.start()
    # Let it settle into its heartbeat wait (after its 0.1 s idle sleep).
    await asyncio.sleep(0.1 + HEARTBEAT_SECONDS / 2)

    async def kick_then_stop() -> None:
        rep.kick()
        await rep.stop()

    stopper = asyncio.create_task(kick_then_stop())
    done, _ = await asyncio.wait({stopper}, timeout=3 * HEARTBEAT_SECONDS + 1)
    hung = not done
    if hung:  # free the test: a second cancel is not swallowed
        assert rep._task is not None
        rep._task.cancel()
        await asyncio.wait({stopper}, timeout=2)
    assert not hung, "PeerReplicator.stop() did not return: the replicator task swallowed its cancellation"


async def test_member_whose_disk_filled_works_again_once_space_returns(tmp_path: Path) -> None:
    """A follower's disk fills, then frees: the follower must catch up again without a restart.

    Found by the disk-full chaos runs: after an ENOSPC write RocksDB refused every later write
    until the database was reopened, so the member stayed broken while reporting SERVING."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    from strongroom.chaos.faults import free_disk

    etcd = start_etcd(tmp_path / "etcd")
    cluster = Cluster(etcd.endpoint, tmp_path)
    mounted: list[Path] = []
    client: Client | None = None
    try:
        await put_realm(etcd.endpoint, realm_yaml(lease_ttl=2), 1)
        for name in cluster.names:
            if not _mount_tmpfs(cluster.data_dir(name), 64):
                pytest.skip("mount -t tmpfs is not permitted here")
            mounted.append(cluster.data_dir(name))
        cluster.start_all()
        leader = await cluster.leader()
        follower = next(n for n in cluster.names if n != leader)
        client = Client(cluster.addresses(), timeout=20)
        assert (await client.publish("regress-enospc.queue", b"before")).confirmed
        # The follower runs and holds "before" (else its disk fills while it starts, and a
        # member that cannot open its storage exits: not the case this test is about).
        first = await cluster.status(leader)
        assert first is not None

        async def follower_holds_it() -> bool:
            st = await cluster.status(follower)
            return st is not None and st.applied_index >= first.commit_index
        await wait_for(follower_holds_it, timeout=60)
        await asyncio.get_running_loop().run_in_executor(None, _fill, cluster.data_dir(follower))
        body = b"y" * 128 * 1024
        for _ in range(20):  # the others keep committing while the follower cannot write
            assert (await client.publish("regress-enospc.queue", body)).confirmed
        free_disk(cluster.data_dir(follower))
        for _ in range(5):
            assert (await client.publish("regress-enospc.queue", body)).confirmed
        leader_status = await cluster.status(leader)
        assert leader_status is not None
        deadline = time.monotonic() + 20
        while True:
            st = await cluster.status(follower)
            if st is not None and st.applied_index >= leader_status.commit_index:
                break
            assert time.monotonic() < deadline, "the follower never wrote again after its disk freed up\n" + cluster.logs()
            await asyncio.sleep(0.2)
        assert cluster.procs[follower].poll() is None  # caught up in the same process
    finally:
        if client is not None:
            await client.close()
        for name in cluster.names:
            cluster.kill(name, signal.SIGKILL)
        from strongroom.chaos.cluster import unmount

        for path in mounted:
            unmount(path)
        etcd.stop()
