"""Failures are the product: leader kill, etcd partition, minority, empty-disk and memory restarts.

Every test runs real etcd, real member processes and a real client; faults are real signals and
real cut TCP links.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import grpc
import pytest
from harness import Cluster, drain_all, put_realm, realm_yaml, wait_for
from proxy import LinkProxy

from strongroom.api.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc
from strongroom.client import Client
from strongroom.errors import StrongroomError
from strongroom.etcd import EtcdClient
from strongroom.keys import leader_key
from strongroom.grpcerrors import from_rpc_error
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.persistence.drivers import DRIVERS, MARKER
from strongroom.channels import open_channel

pytestmark = pytest.mark.slow

# The storage drivers a cluster's realm selects (persistent_store.driver).
EVERY_DRIVER = pytest.mark.parametrize("driver", sorted(DRIVERS))


@EVERY_DRIVER
async def test_kill_leader_under_confirmed_publishing_loses_nothing(make_cluster, driver: str) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(driver=driver)
    old = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    # Two durables on a topic exist before publishing: each must get every message once.
    for durable in ("audit", "billing"):
        sub = await client.subscribe("payments", durable)
        await sub.close()
    total = 1500
    pub_topic = client.publisher("payments", window=32)
    confirmed: list[int] = []
    killed = asyncio.Event()

    async def produce() -> None:
        for i in range(total):
            fut = await pub_topic.send(str(i).encode())
            fut.add_done_callback(lambda f, i=i: confirmed.append(i) if not f.exception() else None)
            if i == total // 3:
                cluster.kill(old, signal.SIGKILL)
                killed.set()
        await pub_topic.flush()

    await produce()
    await pub_topic.close()
    assert killed.is_set()
    assert sorted(confirmed) == list(range(total)), "every publish must end confirmed"
    new = await cluster.leader(exclude=old)
    assert new != old
    for durable in ("audit", "billing"):
        got = await drain_all(client, "payments", durable)
        bodies = [int(m.body) for m in got]
        assert bodies == list(range(total)), f"{durable}: lost/duplicated/reordered"
    # The killed leader comes back as a follower and catches up.
    cluster.start(old)

    async def caught_up() -> bool:
        st_old = await cluster.status(old)
        st_new = await cluster.status(new)
        return bool(st_old and st_new and st_old.role == "follower" and
                    st_old.applied_index == st_new.commit_index)

    await wait_for(caught_up)
    await client.close()


async def test_leader_cut_off_from_etcd_steps_down_and_confirms_nothing_after(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path / "etcd")
    ttl = 2
    await put_realm(etcd.endpoint, realm_yaml(lease_ttl=ttl), 1)
    cluster = Cluster(etcd.endpoint, tmp_path)
    proxies = {n: LinkProxy(etcd.endpoint) for n in cluster.names}
    try:
        for n in cluster.names:
            cluster.start(n, etcd=proxies[n].endpoint)
        old = await cluster.leader()
        client = Client(cluster.addresses(), timeout=30)
        await client.publish("fence.queue", b"before")
        # Publish straight to the old leader (no redirects) while it is cut off from etcd.
        confirmed_after: list[tuple[float, int]] = []
        confirmed_bodies: list[bytes] = []
        stop = time.monotonic() + ttl + 4
        async with open_channel(cluster.address(old), []) as ch:
            stub = messaging_pb2_grpc.MessagingServiceStub(ch)
            proxies[old].cut()
            cut_at = time.monotonic()
            i = 0
            while time.monotonic() < stop:
                i += 1
                body = f"during-{i}".encode()
                try:
                    await stub.Publish(messaging_pb2.PublishRequest(
                        destination="fence.queue", message=common_pb2.Message(body=body, producer_id="fence", sequence=i)),
                        timeout=1.0)
                    confirmed_after.append((time.monotonic() - cut_at, i))
                    confirmed_bodies.append(body)
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.05)
        # The old leader stepped down within its lease TTL and confirmed nothing after it.
        late = [(t, i) for t, i in confirmed_after if t > ttl]
        assert not late, f"confirmed after the lease was gone: {late[:5]}"
        st = await cluster.status(old)
        assert st is not None and st.role != "leader"
        new = await cluster.leader(exclude=old)
        assert new != old
        # Whatever it did confirm before stepping down survived.
        got = [m.body for m in await drain_all(client, "fence.queue")]
        assert got[0] == b"before"
        for body in confirmed_bodies:
            assert got.count(body) == 1, body
        # Healed, the old leader rejoins as a follower.
        proxies[old].restore()
        await client.publish("fence.queue", b"after-heal")
        await client.close()
    finally:
        cluster.stop_all()
        for p in proxies.values():
            p.close()
        etcd.stop()


async def test_minority_cannot_commit_until_quorum_returns(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    await client.publish("quorum.queue", b"first")
    followers = [n for n in cluster.names if n != leader]
    for f in followers:
        cluster.kill(f, signal.SIGKILL)
    st = await cluster.status(leader)
    assert st is not None
    commit_before = st.commit_index
    short = Client([cluster.address(leader)], timeout=3)
    msg = short.make_message(b"second")
    req = messaging_pb2.PublishRequest(destination="quorum.queue", message=msg)
    async with open_channel(cluster.address(leader), []) as ch:
        stub = messaging_pb2_grpc.MessagingServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Publish(req, timeout=6)
        # Not confirmed: either still waiting at the deadline, or the leader gave up for want
        # of a majority and said so.
        err = from_rpc_error(info.value)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED or (
            err is not None and err.reason == "NO_QUORUM"), info.value
        st = await cluster.status(leader)
        assert st is not None and st.commit_index == commit_before, "a minority committed"
    cluster.start(followers[0])
    # The same message id retried after quorum returns is stored exactly once (the leader may
    # have stepped aside meanwhile for want of a majority: the client finds the new one).
    retry = Client(cluster.addresses(), timeout=60)

    async def call(address: str) -> messaging_pb2.PublishResponse:
        return await retry.stub(address).Publish(req, timeout=10)

    resp = await retry.retrying(call)
    assert resp.confirmed
    await retry.close()
    got = [m.body for m in await drain_all(client, "quorum.queue")]
    assert got == [b"first", b"second"]
    await client.close()
    await short.close()


async def test_streams_whose_channel_is_closed_under_them_send_their_unanswered_work_again(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """The leader's address is dropped from the client's endpoints (`set_endpoints`: a member
    moved) while a publisher and a unit-of-work sender wait for answers on streams to it: the
    dropped channel's close cancels those calls under their readers. Each must take that as a
    broken connection and send what is unanswered again on a new stream, as after any failover
    (taken as its own cancellation, the stream ended silently and its futures never resolved);
    every message and UOW is then stored exactly once, in order."""
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    followers = [n for n in cluster.names if n != leader]
    client = Client(cluster.addresses(), timeout=30)
    try:
        await (await client.subscribe("moved", "d")).close()
        pub = client.publisher("moved", window=16)
        sender = client.uow_sender("moved.queue", window=8)
        assert (await (await pub.send(b"0"))).confirmed  # both streams open, on the leader
        await (await sender.send([b"u0"], uow_id="u0"))
        for f in followers:
            cluster.kill(f, signal.SIGSTOP)  # nothing can commit: the work stays unanswered
        try:
            pending = [await pub.send(str(i).encode()) for i in range(1, 6)]
            unanswered = [await sender.send([f"u{i}".encode()], uow_id=f"u{i}") for i in range(1, 4)]
            await asyncio.sleep(0.5)
            assert not any(f.done() for f in pending + unanswered)
            await client.set_endpoints([cluster.address(f) for f in followers])
        finally:
            for f in followers:
                cluster.kill(f, signal.SIGCONT)
        # The followers answer NOT_LEADER naming the leader: the streams go there again, on
        # new channels.
        results = await asyncio.wait_for(asyncio.gather(*pending), 30)
        assert all(r.confirmed and r.resent for r in results), results
        await asyncio.wait_for(asyncio.gather(*unanswered), 30)
        await pub.close()
        await sender.close()
        assert sender.streams > 1
        assert [m.body for m in await drain_all(client, "moved", "d")] == [str(i).encode() for i in range(6)]
        received = []
        while (uow := await client.receive_uow("moved.queue", "r1", wait=3.0)) is not None:
            received.append((uow.uow_id, [m.body for m in uow.messages]))
            await uow.commit()
        assert received == [(f"u{i}", [f"u{i}".encode()]) for i in range(4)]
    finally:
        await client.close()


async def test_follower_with_empty_disk_catches_up_then_counts(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(compact_after_entries=100)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    pub = client.publisher("catchup.queue", window=64)
    futs = [await pub.send(f"a{i}".encode()) for i in range(300)]
    await asyncio.gather(*futs)
    wiped, other = [n for n in cluster.names if n != leader]
    cluster.kill(wiped, signal.SIGKILL)
    futs = [await pub.send(f"b{i}".encode()) for i in range(300)]
    await asyncio.gather(*futs)
    cluster.start(wiped, wipe=True)

    async def synced() -> bool:
        st = await cluster.status(wiped)
        lst = await cluster.status(leader)
        return bool(st and lst and st.synced and st.applied_index >= lst.commit_index - 1)

    await wait_for(synced)
    # Now the restarted member is needed for a majority: it must count.
    cluster.kill(other, signal.SIGKILL)
    futs = [await pub.send(f"c{i}".encode()) for i in range(50)]
    await asyncio.wait_for(asyncio.gather(*futs), 30)
    await pub.close()
    # A follower learns the commit index with the next append (at most a few ms later).
    lst = await cluster.status(leader)
    assert lst is not None

    async def applied_all() -> bool:
        st = await cluster.status(wiped)
        return bool(st and st.applied_index >= lst.commit_index)

    await wait_for(applied_all)
    st = await cluster.status(wiped)
    assert st is not None
    queue = [d for s in st.stores for d in s.durables if d.destination == "catchup.queue"][0]
    assert queue.pending_messages == 650
    got = [m.body for m in await drain_all(client, "catchup.queue")]
    assert got == [f"a{i}".encode() for i in range(300)] + [f"b{i}".encode() for i in range(300)] + \
        [f"c{i}".encode() for i in range(50)]
    await client.close()


async def test_follower_restarted_behind_is_sent_entries_the_leader_keeps_only_on_disk(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Applied entries leave the leader's memory (storage keeps them): a follower that comes
    back far behind, without a snapshot to catch up from, is sent them read back from disk."""
    from strongroom.persistence.log import KEEP_APPLIED

    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    await client.publish("behind.queue", b"first")
    behind, other = [n for n in cluster.names if n != leader]
    cluster.kill(behind, signal.SIGKILL)
    # One confirmed publish at a time: one entry each, many more than the leader keeps.
    missed = [f"m{i}".encode() for i in range(3 * KEEP_APPLIED)]
    for body in missed:
        await client.publish("behind.queue", body)
    cluster.start(behind)
    lst = await cluster.status(leader)
    assert lst is not None and lst.commit_index - 1 > KEEP_APPLIED

    async def caught_up() -> bool:
        st = await cluster.status(behind)
        return bool(st and st.applied_index >= lst.commit_index)

    await wait_for(caught_up)
    # Without the other follower, the one that came back is needed for every confirmation.
    cluster.kill(other, signal.SIGKILL)
    await asyncio.wait_for(client.publish("behind.queue", b"last"), 30)
    got = [m.body for m in await drain_all(client, "behind.queue")]
    assert got == [b"first", *missed, b"last"]
    await client.close()


async def test_operations_of_a_log_format_are_written_only_once_every_member_reads_it(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """A member of an older version would skip an operation it does not know: while one
    member's registration names no log format (as an older version's does), the leader writes
    one PublishOp per message; once it names format 2, one PublishBatchOp per run, but a durable
    delete (format 3) is refused with LOG_FORMAT_PENDING, and done once it names format 3."""
    import json

    from strongroom.errors import LogFormatPending
    from strongroom.persistence.log import LOG_FORMAT

    from strongroom.etcd import EtcdClient
    from strongroom.keys import member_key
    from strongroom.persistence.storage import DiskStorage

    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    old = [n for n in cluster.names if n != leader][0]
    client = Client(cluster.addresses(), timeout=30)
    etcd = EtcdClient(cluster.etcd)
    key = member_key(cluster.cluster, old)

    async def registered() -> bool:  # a leader is chosen before every follower has registered
        return await etcd.get(key) is not None

    await wait_for(registered)
    kv = await etcd.get(key)
    assert kv is not None
    record = json.loads(kv.value)
    assert record["log_format"] == LOG_FORMAT == 7

    def notices(name: str, fmt: int) -> int:
        return cluster.log_path(leader).read_text().count(f"member {name} reads log format {fmt}")

    async def noticed(name: str, fmt: int, more_than: int = 0) -> None:
        async def seen() -> bool:
            return notices(name, fmt) > more_than

        await wait_for(seen)

    async def publish_run(prefix: str) -> None:
        pub = client.publisher("format.queue", window=64)
        for i in range(20):
            await pub.send(b"%s-%d" % (prefix.encode(), i))
        await pub.close()

    try:
        for name in cluster.names:
            if name != leader:
                await noticed(name, LOG_FORMAT)
        sub = await client.subscribe("format.topic", "gone")  # a durable to delete
        await sub.close()
        await publish_run("two")
        await etcd.put(key, json.dumps({k: v for k, v in record.items() if k != "log_format"}).encode())
        await noticed(old, 1)
        await publish_run("one")
        await etcd.put(key, json.dumps({**record, "log_format": 2}).encode())
        await noticed(old, 2)
        await publish_run("mid")
        with pytest.raises(LogFormatPending, match="needs log format 3"):
            await client.delete_durable("format.topic", "gone")
        before = notices(old, LOG_FORMAT)
        await etcd.put(key, json.dumps(record).encode())
        await noticed(old, LOG_FORMAT, more_than=before)
        assert await client.delete_durable("format.topic", "gone") == ("default", 0)
        await publish_run("again")
        got = [m.body for m in await drain_all(client, "format.queue")]
        assert got == [b"%s-%d" % (p, i) for p in (b"two", b"one", b"mid", b"again") for i in range(20)]
    finally:
        await etcd.close()
        await client.close()
    cluster.stop_all()
    storage = DiskStorage(cluster.data_dir(leader), sync=False)
    kinds: dict[bytes, set[str]] = {}
    for entry in storage.load().entries:
        for op in entry.ops:
            which = op.WhichOneof("op")
            msgs = op.publish_batch.messages if which == "publish_batch" else [op.publish.message] if which == "publish" else []
            for m in msgs:
                kinds.setdefault(m.body.split(b"-")[0], set()).add(which)
    storage.close()
    assert kinds == {b"two": {"publish_batch"}, b"one": {"publish"}, b"mid": {"publish_batch"},
                     b"again": {"publish_batch"}}


async def test_an_operation_of_a_kind_this_version_does_not_know_stops_the_apply_and_is_never_skipped(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """A committed entry holds a publish and an operation of a kind this version does not know
    (as a newer version writes it; here put into every member's log while the cluster is down,
    which is what going back to an older version leaves). After the restart the recovering
    leader commits it. Every member must stop applying before that entry, the publish in it
    not applied either (an entry is all or nothing), say why in its status, and no member may
    lead. A member that skipped the operation would apply the publish and serve."""
    from strongroom.api.v1 import replication_pb2 as rpb
    from strongroom.persistence.storage import DiskStorage

    cluster: Cluster = make_cluster()
    await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    for i in range(3):
        assert (await client.publish("unknown.queue", b"m%d" % i)).confirmed
    await client.close()

    async def logs_equal() -> bool:
        sts = [await cluster.status(n) for n in cluster.names]
        return all(st is not None for st in sts) and len({(st.last_index, st.applied_index) for st in sts}) == 1  # type: ignore[union-attr]

    await wait_for(logs_equal)
    cluster.stop_all()
    last = 0
    for name in cluster.names:
        storage = DiskStorage(cluster.data_dir(name), sync=True)
        entries = storage.load().entries
        publish = next(op for e in reversed(entries) for op in e.ops if op.WhichOneof("op") in ("publish", "publish_batch"))
        newer = rpb.Operation()
        newer.CopyFrom(publish)
        if newer.WhichOneof("op") == "publish":
            newer.publish.message.body = b"from-a-newer-version"
        else:
            del newer.publish_batch.messages[1:]
            newer.publish_batch.messages[0].body = b"from-a-newer-version"
        unknown = rpb.Operation.FromString(bytes([0x9A, 0x06, 0x00]))  # field 99, empty
        assert unknown.WhichOneof("op") is None
        last = entries[-1].index
        storage.append([rpb.LogEntry(index=last + 1, epoch=entries[-1].epoch, ops=[newer, unknown])])
        storage.close()
    cluster.start_all()

    async def all_stopped() -> bool:
        sts = [await cluster.status(n) for n in cluster.names]
        return all(st is not None and st.apply_stopped and st.role == "follower" for st in sts)

    try:
        await wait_for(all_stopped, timeout=60)
    except TimeoutError:
        pytest.fail("not every member stopped applying and stepped down\n" + cluster.logs())
    await asyncio.sleep(3 * 2.0)  # three lease TTLs (the realm's 2 s): nobody campaigns again
    for name in cluster.names:
        st = await cluster.status(name)
        assert st is not None and st.role == "follower" and not st.leader, (name, st)
        assert st.applied_index == last, (name, st.applied_index, last)
        assert f"after index {last}:" in st.apply_stopped and "field 99" in st.apply_stopped, st.apply_stopped
        queue = [d for s in st.stores for d in s.durables if d.destination == "unknown.queue"]
        assert [s.messages for s in st.stores if s.name == "default"] == [3], (name, st.stores)
        assert queue and queue[0].pending_messages == 3, (name, queue)
        assert "CRITICAL" in cluster.log_path(name).read_text()


async def test_memory_member_restarted_copies_state_from_peers(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(storage="memory")
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    for i in range(40):
        await client.publish("mem.queue", f"m{i}".encode())
    follower = next(n for n in cluster.names if n != leader)
    cluster.kill(follower, signal.SIGKILL)
    cluster.start(follower)

    async def copied() -> bool:
        st = await cluster.status(follower)
        if st is None or not st.synced:
            return False
        q = [d for s in st.stores for d in s.durables if d.destination == "mem.queue"]
        return bool(q) and q[0].pending_messages == 40

    await wait_for(copied)
    # With the copied state, the restarted member can carry the cluster after the leader goes.
    cluster.kill(leader, signal.SIGKILL)
    await cluster.leader(exclude=leader)
    got = [m.body for m in await drain_all(client, "mem.queue")]
    assert got == [f"m{i}".encode() for i in range(40)]
    await client.close()


async def test_non_replicated_store_is_lost_with_its_leader(make_cluster) -> None:  # type: ignore[no-untyped-def]
    extra = "  - name: volatile\n    cluster: default\n    replicated: false\n"
    dests = '  - name: "volatile.*"\n    kind: queue\n    store: volatile\n'
    cluster: Cluster = make_cluster(extra_stores=extra, extra_destinations=dests)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    for i in range(10):
        res = await client.publish("volatile.q", f"v{i}".encode())
        assert res.confirmed
    st = await cluster.status(leader)
    assert st is not None and [s for s in st.stores if s.name == "volatile"][0].messages == 10
    cluster.kill(leader, signal.SIGKILL)
    new = await cluster.leader(exclude=leader)
    st = await cluster.status(new)
    assert st is not None and [s for s in st.stores if s.name == "volatile"][0].messages == 0
    got = await drain_all(client, "volatile.q", idle=1.0)
    assert got == []  # documented: non-replicated contents go with the leader
    await client.close()


async def test_member_with_unknown_name_is_refused(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    await cluster.leader()
    cluster.names.append("intruder")
    cluster.ports["intruder"] = free_port()
    proc = cluster.start("intruder")
    code = proc.wait(timeout=30)
    assert code == 2
    text = cluster.log_path("intruder").read_text()
    assert "UNKNOWN_MEMBER" in text and "'intruder'" in text
    cluster.names.remove("intruder")


async def test_a_member_on_a_data_directory_of_the_other_driver_is_refused_and_its_store_kept(  # type: ignore[no-untyped-def]
        make_cluster) -> None:
    cluster: Cluster = make_cluster(driver="sqlite")
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    for i in range(20):
        assert (await client.publish("kept.queue", f"k{i}".encode())).confirmed
    follower = next(n for n in cluster.names if n != leader)
    cluster.kill(follower, signal.SIGTERM)
    assert (cluster.data_dir(follower) / MARKER).read_text().strip() == "sqlite"
    # The realm now says rocksdb: the members running keep their driver (fixed at start); the
    # one restarted on its SQLite data directory refuses to start and says why.
    await put_realm(cluster.etcd, realm_yaml(driver="rocksdb"), 2)
    proc = cluster.start(follower)
    assert proc.wait(timeout=30) == 2
    text = cluster.log_path(follower).read_text()
    assert "STORE_DRIVER_MISMATCH" in text
    assert f"the data directory {cluster.data_dir(follower)} holds a sqlite store but the realm selects " \
           "the rocksdb driver" in text and "unload and load" in text
    assert (cluster.data_dir(follower) / MARKER).read_text().strip() == "sqlite"
    assert not (cluster.data_dir(follower) / "db" / "CURRENT").exists()  # no RocksDB files written
    # With the realm back on sqlite it starts on its store as it was and catches up.
    await put_realm(cluster.etcd, realm_yaml(driver="sqlite"), 3)
    cluster.start(follower)

    async def caught_up() -> bool:
        st, lead = await cluster.status(follower), await cluster.status(leader)
        return bool(st and lead and st.role == "follower" and st.applied_index == lead.commit_index)

    await wait_for(caught_up)
    got = await drain_all(client, "kept.queue", idle=1.0)
    assert [m.body for m in got] == [f"k{i}".encode() for i in range(20)]
    await client.close()


async def test_status_reports_leader_epoch_and_counts(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    client = Client(cluster.addresses())
    for i in range(5):
        await client.publish("count.queue", b"12345")
    # A member started a moment ago may not have heard of the leader yet (its etcd watch or the
    # first append is on the way), and on a loaded machine one may miss the client's status
    # timeout once: every member must answer and name it soon, and none another.
    deadline = time.monotonic() + 10
    while True:
        statuses = await client.status()
        assert {s.leader for s in statuses} <= {leader, ""}
        if (len(statuses) == 3 and {s.leader for s in statuses} == {leader}) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert len(statuses) == 3
    assert {s.leader for s in statuses} == {leader}
    lst = [s for s in statuses if s.member == leader][0]
    assert lst.role == "leader" and lst.epoch > 0
    store = [s for s in lst.stores if s.name == "default"][0]
    assert store.messages == 5 and store.bytes > 25
    first_epoch = lst.epoch
    cluster.kill(leader, signal.SIGKILL)
    new = await cluster.leader(exclude=leader)
    st = await cluster.status(new)
    assert st is not None and st.epoch > first_epoch  # epochs strictly increase
    await client.close()
    with pytest.raises(StrongroomError):
        dead = Client([cluster.address(leader)], timeout=1)
        try:
            await dead.publish("count.queue", b"x")
        finally:
            await dead.close()


async def _until_key_held_by(cluster: Cluster, member: str, timeout: float) -> None:
    """Until `member` holds the cluster's leader key in etcd (it may not serve yet)."""
    etcd = EtcdClient(cluster.etcd)
    try:
        async def held() -> bool:
            kv = await etcd.get(leader_key(cluster.cluster))
            return kv is not None and json.loads(kv.value).get("member") == member

        await wait_for(held, timeout=timeout)
    finally:
        await etcd.close()


async def test_a_leader_that_adopts_a_peers_log_stores_the_same_bytes(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """A new leader less advanced than a peer fetches the peer's entries in recovery and stores
    them as the peer stores them (FetchResponse.raw_entries), and a restarted member sends the
    bytes it stored, not its loaded entries serialised again: every member holds the same bytes
    for every entry. Parsed and serialised again, a leader's entry (its time written before its
    operations) came out with its fields in another order, and a DR standby fed from one member
    differed byte for byte from another member's log."""
    from dr_sites import committed_log

    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    behind, ahead = [m for m in cluster.names if m != leader]
    cluster.kill(behind, signal.SIGKILL)
    async with Client(cluster.addresses(), timeout=30) as client:
        for i in range(30):  # entries the leader makes as bytes, its time before its operations
            assert (await client.publish("orders.queue", b"order-%04d" % i)).confirmed
        # `behind` alone takes the leader key; `ahead` then promises and holds more: adopted.
        cluster.kill(leader, signal.SIGKILL)
        cluster.kill(ahead, signal.SIGTERM)
        cluster.start(behind)
        await _until_key_held_by(cluster, behind, timeout=60)  # the old leader's lease ran out first
        cluster.start(ahead)
        assert await cluster.leader(timeout=60) == behind
        assert "adopting log of " + ahead in cluster.log_path(behind).read_text()
        cluster.start(leader)
        assert (await client.publish("orders.queue", b"after")).confirmed

        async def applied_everywhere() -> bool:
            sts = [await cluster.status(m) for m in cluster.names]
            return all(s is not None for s in sts) and len({s.applied_index for s in sts}) == 1  # type: ignore[union-attr]

        await wait_for(applied_everywhere, timeout=60)
    st = await cluster.status(behind)
    assert st is not None
    logs: dict[str, dict[int, bytes]] = {}

    async def read_logs() -> bool:  # a member just started may not take the stream yet
        for m in cluster.names:
            if m not in logs:
                try:
                    logs[m] = await committed_log(cluster.address(m), st.commit_index)
                except grpc.aio.AioRpcError:
                    return False
        return True

    await wait_for(read_logs, timeout=30)
    assert sorted(logs[behind]) == list(range(1, st.commit_index + 1))
    for m in cluster.names:
        differing = [i for i in logs[behind] if logs[m].get(i) != logs[behind][i]]
        assert not differing, f"{m} holds other bytes at indexes {differing[:5]} (of {len(differing)})"
