"""The committed-entry stream (`ReplicationService.StreamCommitted`) of real member processes:
the same entries at every member, new commits as they happen, a heartbeat, a snapshot for a
compacted start, and a reader that loses its member under load and resumes at another with
every confirmed publish exactly once."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import grpc
import pytest
from harness import Cluster, put_realm_sync, realm_yaml, wait_for
from proxy import LinkProxy

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS, open_channel
from strongroom.client import Client
from strongroom.dr.reader import CommittedReader
from strongroom.grpcerrors import from_rpc_error
from strongroom.local.etcdproc import free_port, start_etcd

pytestmark = pytest.mark.slow


class Reader:
    """A reader of one member's stream, keeping what it received."""

    def __init__(self, address: str, from_index: int = 1, heartbeat_ms: int = 200, max_entries: int = 0) -> None:
        self.channel = open_channel(address, CHANNEL_OPTIONS)
        self.call = rgrpc.ReplicationServiceStub(self.channel).StreamCommitted(
            rpb.StreamCommittedRequest(from_index=from_index, heartbeat_ms=heartbeat_ms, max_entries=max_entries))
        self.next_index = from_index
        self.entries: dict[int, bytes] = {}
        self.messages: list[rpb.CommittedEntries] = []
        self.commit_index = 0

    async def read_until(self, index: int, timeout: float = 20.0) -> None:
        """Read until the entries through `index` are in."""
        async def go() -> None:
            while self.next_index <= index:
                await self.read_one()
        await asyncio.wait_for(go(), timeout)

    async def read_one(self) -> rpb.CommittedEntries:
        msg = await self.call.read()
        assert msg is not grpc.aio.EOF, "the stream ended"
        self.messages.append(msg)
        if msg.snapshot_index:
            assert msg.snapshot_index >= self.next_index - 1
            self.next_index = msg.snapshot_index + 1
        assert msg.first_index == self.next_index, (msg.first_index, self.next_index)
        for i, raw in enumerate(msg.entries, msg.first_index):
            entry = rpb.LogEntry.FromString(raw)
            assert entry.index == i
            assert i not in self.entries
            self.entries[i] = raw
        self.next_index = msg.first_index + len(msg.entries)
        assert msg.commit_index >= self.next_index - 1
        self.commit_index = msg.commit_index
        return msg

    async def close(self) -> None:
        self.call.cancel()
        await self.channel.close()


def published_bodies(entries: dict[int, bytes]) -> Counter[bytes]:
    """How often each message body appears in the publish operations of the entries."""
    out: Counter[bytes] = Counter()
    for raw in entries.values():
        for op in rpb.LogEntry.FromString(raw).ops:
            which = op.WhichOneof("op")
            if which == "publish_batch":
                out.update(m.body for m in op.publish_batch.messages)
            elif which == "publish":
                out[op.publish.message.body] += 1
    return out


async def test_every_member_streams_the_same_committed_entries_then_new_ones_and_heartbeats(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    follower = next(n for n in cluster.names if n != leader)
    await wait_for(lambda: _answers(cluster, follower), timeout=30)
    async with Client(cluster.addresses(), timeout=20) as client:
        for i in range(30):
            await client.publish("stream.queue", f"a{i}".encode())
        commit = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
        readers = [Reader(cluster.address(leader)), Reader(cluster.address(follower))]
        try:
            for r in readers:
                await r.read_until(commit)
            common = range(1, commit + 1)
            assert [readers[0].entries[i] for i in common] == [readers[1].entries[i] for i in common]
            assert published_bodies(readers[0].entries) == Counter(f"a{i}".encode() for i in range(30))
            # Idle: heartbeats (no entries) with the commit index.
            beat = await asyncio.wait_for(readers[1].read_one(), 5)
            while beat.entries:
                beat = await asyncio.wait_for(readers[1].read_one(), 5)
            assert beat.commit_index >= commit and beat.member == follower
            # Every message says the member's applied index and the messages stored through it
            # (the same at every member: the entries since store none).
            lead_beat = await asyncio.wait_for(readers[0].read_one(), 5)
            while lead_beat.entries:
                lead_beat = await asyncio.wait_for(readers[0].read_one(), 5)
            assert beat.applied_index >= commit and lead_beat.applied_index >= commit
            assert beat.stored_messages == lead_beat.stored_messages == 30
            # New commits follow on the open stream.
            for i in range(5):
                await client.publish("stream.queue", f"b{i}".encode())
            later = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
            await readers[1].read_until(later)
            assert published_bodies(readers[1].entries) == Counter(
                [f"a{i}".encode() for i in range(30)] + [f"b{i}".encode() for i in range(5)])
        finally:
            for r in readers:
                await r.close()


async def test_a_compacted_start_gets_the_state_snapshot_then_the_entries_after_it(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(compact_after_entries=100)
    leader = await cluster.leader()
    async with Client(cluster.addresses(), timeout=20) as client:
        for i in range(160):
            await client.publish("compacted.queue", f"m{i}".encode())
        await wait_for(lambda: _compacted(cluster, leader), timeout=20)
        commit = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
        reader = Reader(cluster.address(leader), from_index=1)
        try:
            first = await asyncio.wait_for(reader.read_one(), 10)
            assert first.snapshot_index >= 100 and first.snapshot_epoch > 0
            state = rpb.StateSnapshot.FromString(first.snapshot)
            assert state.applied_index == first.snapshot_index
            assert first.first_index == first.snapshot_index + 1
            assert first.snapshot_index + len(first.entries) >= commit - 2  # the state is the member's latest
            for i in range(5):  # entries follow the snapshot
                await client.publish("compacted.queue", f"n{i}".encode())
            later = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
            await reader.read_until(later)
            assert min(reader.entries) == first.snapshot_index + 1
            assert published_bodies(reader.entries)[b"n4"] == 1
            assert {m.message.body for m in state.messages} >= {f"m{i}".encode() for i in range(160)}
        finally:
            await reader.close()


async def _answers(cluster: Cluster, name: str) -> bool:
    return await cluster.status(name) is not None


async def _compacted(cluster: Cluster, name: str) -> bool:
    status = await cluster.status(name)
    return bool(status and status.snapshot_index >= 100)


async def test_a_reader_that_loses_its_member_under_load_resumes_at_another_with_nothing_lost_or_twice(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    first, second = [n for n in cluster.names if n != leader]
    for name in (first, second):  # up and answering (the leader may serve before they listen)
        await wait_for(lambda name=name: _answers(cluster, name), timeout=30)
    confirmed: list[bytes] = []
    async with Client(cluster.addresses(), timeout=30) as client:
        publisher = client.publisher("resume.queue", window=32)
        stop = asyncio.Event()

        async def produce() -> None:
            i = 0
            while not stop.is_set():
                body = f"r{i}".encode()
                fut = await publisher.send(body)
                fut.add_done_callback(lambda f, b=body: confirmed.append(b) if not f.exception() else None)
                i += 1
                if i % 64 == 0:
                    await asyncio.sleep(0)
            await publisher.flush()

        producing = asyncio.create_task(produce())
        reader = Reader(cluster.address(first))
        try:
            await asyncio.sleep(1.0)
            await reader.read_until(reader.next_index + 10)
            cluster.kill(first, signal.SIGKILL)
            with pytest.raises(grpc.aio.AioRpcError):
                while True:
                    await asyncio.wait_for(reader.read_one(), 10)
            # Resume at another member, after the last index received.
            got = reader.entries
            await reader.close()
            reader = Reader(cluster.address(second), from_index=max(got) + 1)
            reader.entries.update(got)
            await asyncio.sleep(1.0)
            stop.set()
            await producing
            commit = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
            await reader.read_until(commit)
        finally:
            stop.set()
            await reader.close()
        assert sorted(reader.entries) == list(range(1, max(reader.entries) + 1))
        counts = published_bodies(reader.entries)
        assert confirmed and all(counts[b] == 1 for b in confirmed), "a confirmed publish missing or twice"


async def test_from_index_zero_is_invalid_argument(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(members=1)
    name = await cluster.leader()
    reader = Reader(cluster.address(name), from_index=0)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await reader.read_one()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        err = from_rpc_error(info.value)
        assert err is not None and err.reason == "INVALID_ARGUMENT" and "from_index" in err.message
    finally:
        await reader.close()


async def test_the_dr_reader_follows_the_log_across_a_member_killed_under_load(
        make_cluster) -> None:  # type: ignore[no-untyped-def]
    """`CommittedReader` (what the DR service reads the primary with): the member it reads is
    killed with SIGKILL while publishers run; it goes on at another member after the last index
    it yielded, and the log it assembles has every index once and every confirmed publish."""
    cluster: Cluster = make_cluster()
    leader = await cluster.leader()
    confirmed: list[bytes] = []
    entries: dict[int, bytes] = {}
    reader = CommittedReader([cluster.address(n) for n in cluster.names if n != leader], 1, heartbeat=0.2)
    async with Client(cluster.addresses(), timeout=30) as client:
        publisher = client.publisher("dr-reader.queue", window=32)
        stop = asyncio.Event()

        async def produce() -> None:
            i = 0
            while not stop.is_set():
                body = f"d{i}".encode()
                fut = await publisher.send(body)
                fut.add_done_callback(lambda f, b=body: confirmed.append(b) if not f.exception() else None)
                i += 1
                if i % 64 == 0:
                    await asyncio.sleep(0)
            await publisher.flush()

        async def read(until: int) -> None:
            async for batch in reader.batches():
                assert not batch.snapshot
                for i, raw in enumerate(batch.entries, batch.first_index):
                    assert i not in entries
                    entries[i] = raw
                if reader.next_index > until:
                    return

        producing = asyncio.create_task(produce())
        try:
            await asyncio.sleep(1.0)
            await asyncio.wait_for(read(20), 20)
            victim = reader.member
            assert victim in cluster.names and victim != leader
            cluster.kill(victim, signal.SIGKILL)
            await asyncio.sleep(1.0)
            stop.set()
            await producing
            commit = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
            await asyncio.wait_for(read(commit), 30)
        finally:
            stop.set()
        assert reader.reconnects >= 1 and reader.member != victim
        assert sorted(entries) == list(range(1, max(entries) + 1))
        counts = published_bodies(entries)
        assert confirmed and all(counts[b] == 1 for b in confirmed), "a confirmed publish missing or twice"


async def test_the_dr_reader_leaves_a_member_cut_off_from_its_leader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A follower cut off from its leader still answers the reader, with heartbeats whose commit
    index no longer moves; it says how long it has not heard from a leader, and the reader goes
    on at another member once that is stale, with nothing skipped."""
    etcd = start_etcd(tmp_path / "etcd")
    cluster = Cluster(etcd.endpoint, tmp_path)
    # m3's peers reach it only through proxies the test cuts; the reader reaches it directly.
    grpc_proxy = LinkProxy(cluster.address("m3"))
    link_port = free_port()
    link_proxy = LinkProxy(f"127.0.0.1:{link_port}")
    cluster.extra_args["m3"] = ["--advertise", grpc_proxy.endpoint, "--replication-listen", f"127.0.0.1:{link_port}",
                                "--replication-advertise", link_proxy.endpoint]
    try:
        put_realm_sync(etcd.endpoint, realm_yaml(), 1)
        cluster.start("m1")
        cluster.start("m2")
        await cluster.leader()  # m1 or m2: m3 joins as a follower
        cluster.start("m3")
        await wait_for(lambda: _answers(cluster, "m3"), timeout=30)
        reader = CommittedReader([cluster.address(n) for n in ("m3", "m1", "m2")], 1, heartbeat=0.2, stale_after=2.0,
                                 start=0)
        entries: dict[int, bytes] = {}

        async def read(until: int) -> None:
            async for batch in reader.batches():
                for i, raw in enumerate(batch.entries, batch.first_index):
                    assert i not in entries
                    entries[i] = raw
                if reader.next_index > until:
                    return

        async with Client(cluster.addresses(), timeout=30) as client:
            for i in range(20):
                await client.publish("cut.queue", f"a{i}".encode())
            leader = await cluster.leader()
            await wait_for(lambda: _applied(cluster, "m3", leader), timeout=20)
            commit = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
            await asyncio.wait_for(read(commit), 20)
            assert reader.member == "m3"
            grpc_proxy.cut()
            link_proxy.cut()
            for i in range(20):
                await client.publish("cut.queue", f"b{i}".encode())
            commit = (await cluster.status(leader)).commit_index  # type: ignore[union-attr]
            await asyncio.wait_for(read(commit), 30)
        assert reader.member in ("m1", "m2") and reader.reconnects >= 1
        assert sorted(entries) == list(range(1, max(entries) + 1))
        assert published_bodies(entries) == Counter([f"a{i}".encode() for i in range(20)]
                                                    + [f"b{i}".encode() for i in range(20)])
    finally:
        cluster.stop_all()
        etcd.stop()
        grpc_proxy.close()
        link_proxy.close()


async def _applied(cluster: Cluster, name: str, leader: str) -> bool:
    mine, theirs = await cluster.status(name), await cluster.status(leader)
    return bool(mine and theirs and mine.applied_index >= theirs.commit_index)
