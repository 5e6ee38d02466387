"""A member whose store was damaged while it was down (a flipped bit in its RocksDB WAL) never
serves or votes from it (docs/store-operations.md, "A damaged store"), with real etcd, member
processes and RocksDB.

The damage is the one Jepsen used against NATS JetStream: the damaged member is the only one
besides the leader that stored the newest confirmed messages (the third member was down), and the
leader is then killed. RocksDB's default WAL recovery would open the damaged member with half its
log and no error, and that member and the third would elect a leader without the newest
confirmed messages. Here it finds the damage, moves the store aside, says so in its status,
and does not count toward a majority until it has caught up: once the old leader is back, every
confirmed message is there, exactly once, in order, and the damaged member rebuilt from its
peers."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from harness import Cluster, scrape, value, wait_for

from strongroom.client import Client
from strongroom.errors import StrongroomError

pytestmark = pytest.mark.slow

MESSAGES = 300


def flip_in_the_middle(wal_dir: Path) -> Path:
    """Flip one bit half-way into the largest WAL file of a stopped member."""
    wal = max((p for p in wal_dir.glob("*.log")), key=lambda p: p.stat().st_size)
    with open(wal, "r+b") as f:
        at = wal.stat().st_size // 2
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x08]))
    return wal


async def test_a_member_with_a_damaged_wal_rebuilds_and_nothing_confirmed_is_lost(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    damaged, third = [m for m in cluster.names if m != leader]
    cluster.kill(third, signal.SIGKILL)
    client = Client(cluster.addresses(), timeout=30)
    try:
        # Confirmed by the leader and `damaged` alone.
        seqs = []
        for i in range(MESSAGES):
            result = await client.publish("orders.queue", b"order-%04d" % i)
            assert result.confirmed
            seqs.append(result.message_seq)
        cluster.kill(damaged, signal.SIGKILL)
        wal = flip_in_the_middle(cluster.data_dir(damaged) / "db")
        assert wal.stat().st_size > 0
        cluster.kill(leader, signal.SIGKILL)
        cluster.start(damaged)
        cluster.start(third)

        async def says_damaged() -> bool:
            st = await cluster.status(damaged)
            return st is not None and "moved to" in st.store_damage

        await wait_for(says_damaged, timeout=30)
        st = await cluster.status(damaged)
        assert st is not None and "Corruption" in st.store_damage and not st.synced, st
        assert list(cluster.data_dir(damaged).glob("damaged-*/db")), "the damaged files were not kept"
        # Neither the damaged member (it lost what it had acknowledged) nor the third (it holds
        # nothing new) may lead a cluster without the confirmed messages: no leader until the
        # old one is back.
        await asyncio.sleep(6)
        for member in (damaged, third):
            st = await cluster.status(member)
            assert st is not None and st.role != "leader", (member, st.role)
        cluster.start(leader)
        await cluster.leader(timeout=60)

        async def rebuilt() -> bool:
            sts = [await cluster.status(m) for m in cluster.names]
            return all(s is not None for s in sts) and all(s.synced for s in sts) and len(
                {s.applied_index for s in sts}) == 1  # type: ignore[union-attr]

        await wait_for(rebuilt, timeout=60)
        sub = await client.subscribe("orders.queue", credit=MESSAGES)
        got = [await sub.next(timeout=20) for _ in range(MESSAGES)]
        assert [m.seq for m in got] == seqs
        assert [m.body for m in got] == [b"order-%04d" % i for i in range(MESSAGES)]
        for m in got:
            await sub.ack(m)
        await sub.close()
    finally:
        await client.close()


async def test_a_single_member_whose_store_is_damaged_does_not_start_empty(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """With no peer to rebuild from, a member that lost what it acknowledged must not lead an
    empty store (it would serve as if nothing had been confirmed): the cluster stays unavailable
    and says why. Before, a recovery in which no member held state started the cluster empty,
    which only a memory cluster may do."""
    cluster: Cluster = make_cluster(members=1)
    (member,) = cluster.names
    await cluster.leader()
    async with Client(cluster.addresses(), timeout=10) as client:
        for i in range(20):
            assert (await client.publish("orders.queue", b"order-%04d" % i)).confirmed
    cluster.kill(member, signal.SIGKILL)
    flip_in_the_middle(cluster.data_dir(member) / "db")
    cluster.start(member)

    async def says_damaged() -> bool:
        st = await cluster.status(member)
        return st is not None and "moved to" in st.store_damage

    await wait_for(says_damaged, timeout=30)
    await asyncio.sleep(5)  # more than 2 x TTL: recoveries tried and refused
    st = await cluster.status(member)
    assert st is not None and st.role != "leader" and not st.synced, st
    assert "does not start empty on its own" in cluster.log_path(member).read_text()
    async with Client(cluster.addresses(), timeout=3) as client:
        with pytest.raises(StrongroomError) as refused:
            await client.publish("orders.queue", b"after")
        assert refused.value.retriable, refused.value


async def test_a_member_whose_snapshot_install_was_cut_short_rebuilds_instead_of_refusing_to_start(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Indexes on disk: a member killed in the middle of installing a snapshot (its state
    families half rewritten, the install marker still set: written here into its real RocksDB
    files while it is down, as the install leaves them) starts, moves the store aside, catches
    up from its peers and holds every confirmed message; before, it refused to start until an
    operator emptied its data directory."""
    from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES
    from strongroom.persistence.storage import STATE_INSTALLING, DiskStorage

    cluster: Cluster = make_cluster(indexes_on_disk=True)
    leader = await cluster.leader()
    cut = next(m for m in cluster.names if m != leader)
    async with Client(cluster.addresses(), timeout=30) as client:
        for i in range(MESSAGES // 3):
            assert (await client.publish("orders.queue", b"order-%04d" % i)).confirmed
        cluster.kill(cut, signal.SIGKILL)
        storage = DiskStorage(cluster.data_dir(cut), sync=True, state_families=STATE_COLUMN_FAMILIES)
        try:
            wb = storage.batch()
            wb.put(STATE_INSTALLING, b"1", storage.state_handle("sm"))
            storage.write_state(wb)
        finally:
            storage.close()
        cluster.start(cut)

        async def rebuilt() -> bool:
            st = await cluster.status(cut)
            return st is not None and "interrupted" in st.store_damage and st.synced and \
                st.applied_index >= MESSAGES // 3

        await wait_for(rebuilt, timeout=40)
        cluster.kill(leader, signal.SIGKILL)  # the rebuilt member now counts toward a majority
        assert (await client.publish("orders.queue", b"after")).confirmed
        sub = await client.subscribe("orders.queue", credit=MESSAGES)
        got = [await sub.next(timeout=20) for _ in range(MESSAGES // 3 + 1)]
        for m in got:
            await sub.ack(m)
        await sub.close()
    assert [m.body for m in got] == [b"order-%04d" % i for i in range(MESSAGES // 3)] + [b"after"]


SCRUB_EVERY_SECOND = "    persistent_store:\n      scrub_interval_seconds: 1\n"


async def test_a_bit_flipped_in_a_running_members_file_is_found_and_the_member_rebuilds(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Damage while the member runs (persistence/scrub.py): a bit flipped in an SST file of a
    running follower. Its scrub finds it, the member stops serving and voting and starts again
    in the same process on an empty store, says so in its status, and rebuilds from its peers.
    Then it is the only member beside the leader that holds the newest confirmed messages (the
    third is killed), and the leader is killed too: every confirmed message is there, once, in
    order, from what it rebuilt."""
    cluster: Cluster = make_cluster(cluster_extra=SCRUB_EVERY_SECOND)
    leader = await cluster.leader()
    damaged, third = [m for m in cluster.names if m != leader]
    client = Client(cluster.addresses(), timeout=30)
    try:
        bodies = [b"order-%04d" % i for i in range(MESSAGES)]
        for body in bodies[:MESSAGES // 2]:
            assert (await client.publish("orders.queue", body)).confirmed
        db = cluster.data_dir(damaged) / "db"

        async def has_table_file() -> bool:  # a scrub's checkpoint flushes the write buffer
            return any(p.stat().st_size > 4096 for p in db.glob("*.sst"))

        await wait_for(has_table_file, timeout=20)
        st = await cluster.status(damaged)
        assert st is not None and st.metrics_url
        url = st.metrics_url

        async def scrubbed_clean() -> bool:  # what an operator's alert reads
            return value(scrape(url), "strongroom_scrubs_total") >= 1

        await wait_for(scrubbed_clean, timeout=20)
        figures = scrape(url)
        assert time.time() - 30 < value(figures, "strongroom_scrub_last_clean_timestamp_seconds") <= time.time()
        assert value(figures, "strongroom_scrub_last_seconds") > 0
        assert value(figures, "strongroom_store_damaged") == 0
        sst = max(db.glob("*.sst"), key=lambda p: p.stat().st_size)
        with open(sst, "r+b") as f:
            f.seek(sst.stat().st_size // 3)
            byte = f.read(1)
            f.seek(sst.stat().st_size // 3)
            f.write(bytes([byte[0] ^ 0x08]))

        address = cluster.address(damaged)

        def starts() -> int:
            return cluster.log_path(damaged).read_text().count(f"listening on {address},")

        async def started_again() -> bool:
            # The new member answers its status (server started) before it has joined the
            # election and written its "listening on" line: wait for both.
            st = await cluster.status(damaged)
            return st is not None and "found by the scrub" in st.store_damage and starts() >= 2

        await wait_for(started_again, timeout=30)
        # Restarted in place: the same process, listening again on the same address, once.
        assert cluster.procs[damaged].poll() is None and starts() == 2, starts()
        assert value(scrape(url), "strongroom_store_damaged") == 1  # the same endpoint, the new member
        (moved,) = cluster.data_dir(damaged).glob("damaged-*")
        assert (moved / "db").is_dir()
        log = cluster.log_path(damaged).read_text()
        assert "the scrub found its persistent store damaged" in log, log[-3000:]
        for body in bodies[MESSAGES // 2:]:  # confirmed while it rebuilds
            assert (await client.publish("orders.queue", body)).confirmed

        async def rebuilt() -> bool:
            st, lead = await cluster.status(damaged), await cluster.status(leader)
            return bool(st and lead and st.synced and st.applied_index == lead.commit_index)

        await wait_for(rebuilt, timeout=60)
        cluster.kill(third, signal.SIGKILL)
        tail = b"after-the-rebuild"
        assert (await client.publish("orders.queue", tail)).confirmed  # the leader and the rebuilt member
        cluster.kill(leader, signal.SIGKILL)
        cluster.start(third)
        await cluster.leader(timeout=60, exclude=leader)
        sub = await client.subscribe("orders.queue", credit=MESSAGES + 1)
        got = [await sub.next(timeout=20) for _ in range(MESSAGES + 1)]
        assert [m.body for m in got] == [*bodies, tail]
        for m in got:
            await sub.ack(m)
        with pytest.raises(TimeoutError):  # nothing twice
            await sub.next(timeout=2)
        await sub.close()
    finally:
        await client.close()
