"""Standby on a shared store (docs/store-operations.md): a single-member cluster run as a standard
and a standby instance on one data directory, with real etcd, real member processes over real
gRPC and real RocksDB. Faults are real signals (SIGKILL, SIGSTOP / SIGCONT)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import drain, put_realm_sync, realm_yaml, wait_for

from strongroom.api.v1 import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc
from strongroom.client import Client
from strongroom.errors import NotOperational
from strongroom.grpcerrors import PARTNER_METADATA_KEY, from_rpc_error
from strongroom.local.etcdproc import free_port, start_etcd
from strongroom.local.leader import member_status
from strongroom.local.process import member_argv, spawn, stop_processes
from strongroom.channels import open_channel

pytestmark = pytest.mark.slow

INTERVAL = 0.5
"""The realm's control interval in these tests (seconds)."""


class Pair:
    """The two instances of member m1 of cluster `solo`, on one data directory."""

    def __init__(self, etcd: str, root: Path) -> None:
        self.etcd = etcd
        self.root = root
        self.addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        self.data_dir = root / "shared" / "m1"
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def realm(self) -> str:
        extra = (f"    shared_store:\n      instances: [{self.addresses[0]}, {self.addresses[1]}]\n"
                 f"      control_interval_seconds: {INTERVAL}\n")
        return realm_yaml(cluster="solo", members=1, lease_ttl=2, cluster_extra=extra)

    def log(self, i: int) -> Path:
        return self.root / f"instance{i}.log"

    def start(self, i: int, mode: str, data_dir: Path | None = None) -> subprocess.Popen[bytes]:
        proc = spawn(member_argv(self.etcd, "solo", "m1", self.addresses[i], data_dir or self.data_dir,
                                 extra=["--run-mode", mode]), self.log(i))
        self.procs[i] = proc
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- instance {i} ---\n{self.log(i).read_text()[-3000:]}"
                         for i in self.procs if self.log(i).exists())

    async def standard(self, timeout: float = 30.0, exclude: int | None = None) -> int:
        """The instance serving as the standard (its member leads and serves)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, address in enumerate(self.addresses):
                if i == exclude or i not in self.procs or self.procs[i].poll() is not None:
                    continue
                st = await member_status(address, 1.0)
                if st is not None and st.role == "leader" and st.shared_store.run_mode == "standard":
                    return i
            await asyncio.sleep(0.1)
        raise TimeoutError("no standard serves\n" + self.logs())

    async def status(self, i: int) -> admin_pb2.ClusterStatus | None:
        return await member_status(self.addresses[i], 1.0)

    async def watching(self, i: int, timeout: float = 20.0) -> None:
        """Until instance `i` is a standby watching its partner (TimeoutError after `timeout` s)."""
        async def watches() -> bool:
            st = await self.status(i)
            return st is not None and st.shared_store.run_mode == "standby" and "watching" in st.shared_store.state
        await wait_for(watches, timeout)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a paused one must be able to end
        stop_processes(list(self.procs.values()), grace=10)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    etcd = start_etcd(tmp_path / "etcd")
    p = Pair(etcd.endpoint, tmp_path)
    try:
        put_realm_sync(etcd.endpoint, p.realm(), 1)
        yield p
    finally:
        p.stop()
        etcd.stop()


def lock_holders(path: Path) -> set[int]:
    """The pids holding an fcntl lock on `path`, from /proc/locks (by inode)."""
    inode = os.stat(path).st_ino
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters are marked "->")
        if "->" in fields or len(fields) < 6:
            continue
        pid, ident = fields[4], fields[5]
        if ident.rsplit(":", 1)[-1] == str(inode):
            holders.add(int(pid))
    return holders


def store_files_open(pid: int, data_dir: Path) -> list[str]:
    """The files under the store's database directory the process has open."""
    db = str((data_dir / "db").resolve())
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(db):
            out.append(target)
    return out


async def publish_range(client: Client, destination: str, start: int, end: int) -> list[int]:
    """Publish bodies start..end-1 confirmed, one after the other; the confirmed ones."""
    confirmed = []
    for i in range(start, end):
        await client.publish(destination, str(i).encode())
        confirmed.append(i)
    return confirmed


async def drain_ints(client: Client, destination: str, idle: float = 3.0) -> list[int]:
    """Every message of `destination` until none comes for `idle` s, acked: their bodies as ints."""
    sub = await client.subscribe(destination, credit=512)
    got = [int(msg.body) for msg in await drain(sub, 2**31, idle)]
    await sub.close()
    return got


async def test_takeover_after_sigkill_loses_nothing_and_the_client_follows(pair: Pair) -> None:
    pair.start(0, "standard")
    assert await pair.standard() == 0
    pair.start(1, "standby")
    await pair.watching(1)
    st = await pair.status(0)
    assert st is not None and st.shared_store.partner_address == pair.addresses[1]
    assert st.shared_store.store_id and st.shared_store.run_mode == "standard"

    # The client is given the standard's address alone: it learns the partner from its answers.
    async with Client([pair.addresses[0]], timeout=60) as client:
        sent = await publish_range(client, "orders.queue", 0, 200)
        assert pair.addresses[1] in client.connection.endpoints

        # A standby does not serve: NOT_LEADER naming the standard, as any member that does not lead.
        async with open_channel(pair.addresses[1], []) as channel:
            stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Publish(messaging_pb2.PublishRequest(destination="orders.queue",
                                                                message=common_pb2.Message(body=b"x")), timeout=5)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert ("strongroom-leader", pair.addresses[0]) in tuple(refused.value.trailing_metadata() or ())

        pair.procs[0].kill()
        pair.procs[0].wait()
        took_over = time.monotonic()
        # Publishing goes on with the same client: it rides out the takeover at the partner.
        sent += await publish_range(client, "orders.queue", 200, 300)
        assert await pair.standard() == 1
        assert time.monotonic() - took_over < 30
        got = await drain_ints(client, "orders.queue")
    assert got == sent == list(range(300)), "a confirmed message was lost or duplicated across the takeover"
    text = pair.log(1).read_text()
    assert "taking the store over" in text and "handshake" in text

    # The old standard comes back as the standby of the new one.
    pair.start(0, "standby")
    await pair.watching(0)


async def test_not_operational_while_taking_over(pair: Pair) -> None:
    """While the standard does not answer and its lock is held, the standby answers
    NOT_OPERATIONAL (retriable) with its state."""
    pair.start(0, "standard")
    await pair.standard()
    pair.start(1, "standby")
    await pair.watching(1)
    os.kill(pair.procs[0].pid, signal.SIGSTOP)
    try:
        async def waiting() -> bool:
            st = await pair.status(1)
            return st is not None and "lock is held" in st.shared_store.state
        await wait_for(waiting, 10)
        async with open_channel(pair.addresses[1], []) as channel:
            stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Publish(messaging_pb2.PublishRequest(destination="orders.queue",
                                                                message=common_pb2.Message(body=b"x")), timeout=5)
        err = from_rpc_error(refused.value)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert isinstance(err, NotOperational) and err.retriable
        assert err.metadata["partner"] == pair.addresses[0] and "lock is held" in err.metadata["state"]
    finally:
        os.kill(pair.procs[0].pid, signal.SIGCONT)


async def test_paused_standard_is_never_joined_by_a_second_writer(pair: Pair) -> None:
    pair.start(0, "standard")
    await pair.standard()
    pair.start(1, "standby")
    await pair.watching(1)
    standard, standby = pair.procs[0].pid, pair.procs[1].pid
    lock = pair.data_dir / "store.lock"
    rocks_lock = pair.data_dir / "db" / "LOCK"
    async with Client([pair.addresses[0]], timeout=60) as client:
        sent = await publish_range(client, "orders.queue", 0, 100)
        assert lock_holders(lock) == {standard} and lock_holders(rocks_lock) == {standard}

        os.kill(standard, signal.SIGSTOP)
        paused_for = max(6 * INTERVAL, 5.0)  # past the control interval and the lease TTL (2 s)
        deadline = time.monotonic() + paused_for
        try:
            while time.monotonic() < deadline:
                # All along, the paused standard holds both locks and the standby has not opened the store.
                assert lock_holders(lock) == {standard}
                assert lock_holders(rocks_lock) == {standard}
                assert store_files_open(standby, pair.data_dir) == []
                await asyncio.sleep(0.2)
            st = await pair.status(1)
            assert st is not None and st.shared_store.run_mode == "standby" and st.role != "leader"
            assert "lock is held" in st.shared_store.state, st.shared_store.state
        finally:
            os.kill(standard, signal.SIGCONT)

        # The standard resumes and goes on serving; the standby goes back to watching it.
        sent += await publish_range(client, "orders.queue", 100, 200)
        assert await pair.standard() == 0
        await pair.watching(1)
        assert lock_holders(lock) == {standard} and lock_holders(rocks_lock) == {standard}
        assert store_files_open(standby, pair.data_dir) == []
        got = await drain_ints(client, "orders.queue")
    assert got == sent == list(range(200))
    text = pair.log(1).read_text()
    assert "lock is held" in text and "taking the store over" not in text, pair.logs()


async def test_both_started_as_standby_the_first_up_becomes_standard(pair: Pair) -> None:
    pair.start(0, "standby")
    pair.start(1, "standby")
    first = await pair.standard()
    other = 1 - first
    await pair.watching(other)
    holders = lock_holders(pair.data_dir / "store.lock")
    assert holders == {pair.procs[first].pid}
    async with Client(pair.addresses, timeout=30) as client:
        assert await publish_range(client, "orders.queue", 0, 20) == list(range(20))
        assert await drain_ints(client, "orders.queue") == list(range(20))
    # The other one is the standby still, and took nothing over.
    assert "taking the store over" not in pair.log(other).read_text()


async def test_standby_on_another_directory_fails_the_handshake(pair: Pair, tmp_path: Path) -> None:
    pair.start(0, "standard")
    await pair.standard()
    proc = pair.start(1, "standby", data_dir=tmp_path / "elsewhere")
    assert proc.wait(timeout=30) == 2
    text = pair.log(1).read_text()
    assert re.search(r"handshake with the partner failed: not the same store", text), text


async def test_a_second_standard_is_refused(pair: Pair) -> None:
    pair.start(0, "standard")
    await pair.standard()
    proc = pair.start(1, "standard")
    assert proc.wait(timeout=30) == 2
    assert "is held by another instance" in pair.log(1).read_text()


async def test_plain_stub_reads_the_partner_from_the_standard(pair: Pair) -> None:
    pair.start(0, "standard")
    await pair.standard()
    async with open_channel(pair.addresses[0], []) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        call = stub.Publish(messaging_pb2.PublishRequest(destination="orders.queue",
                                                         message=common_pb2.Message(body=b"1", producer_id="p",
                                                                                    sequence=1)), timeout=10)
        await call
        assert (PARTNER_METADATA_KEY, pair.addresses[1]) in tuple(await call.trailing_metadata())
        status = await admin_pb2_grpc.AdminServiceStub(channel).Status(admin_pb2.StatusRequest(), timeout=5)
        assert status.shared_store.partner_address == pair.addresses[1]


def test_up_starts_both_instances_and_the_cluster_serves_after_the_standard_dies(tmp_path: Path) -> None:
    """`strongroom up` runs both instances of a shared store; after a SIGKILL of the standard
    the CLI (whose endpoints are both instances, from the state file) is served by the other."""
    import json
    import subprocess as sp
    import sys

    from strongroom.local.launcher import load_state
    from strongroom.local.process import pid_alive

    addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    realm = tmp_path / "realm.yaml"
    realm.write_text(realm_yaml(cluster="solo", members=1, lease_ttl=2, cluster_extra=(
        f"    shared_store:\n      instances: [{addresses[0]}, {addresses[1]}]\n"
        f"      control_interval_seconds: {INTERVAL}\n")))
    data = tmp_path / "up"
    env = {k: v for k, v in os.environ.items() if k not in ("STRONGROOM_ENDPOINTS", "STRONGROOM_DATA_DIR")}

    def cli(*argv: str) -> sp.CompletedProcess[str]:
        return sp.run([sys.executable, "-m", "strongroom.cli.main", *argv], capture_output=True, text=True,
                      timeout=120, env=env, check=False)

    try:
        up = cli("up", "--detach", "--data-dir", str(data), "--realm", str(realm))
        assert up.returncode == 0, up.stdout + up.stderr
        state = load_state(data)
        assert state is not None
        instances = state["clusters"]["solo"]["members"]
        assert sorted(instances) == ["m1@1", "m1@2"]
        assert sorted(i["address"] for i in instances.values()) == sorted(addresses)
        assert len({i["data_dir"] for i in instances.values()}) == 1, "both instances use the one store"
        status = json.loads(cli("status", "--json", "--data-dir", str(data)).stdout)
        modes = sorted(m.get("shared_store", {}).get("run_mode", "") for m in status)
        assert modes == ["standard", "standby"], status
        standard = next(i for i in instances.values() if i["address"] == next(
            m["leader_address"] for m in status if m.get("shared_store", {}).get("run_mode") == "standard"))
        pub = cli("publish", "jobs.queue", "--count", "5", "--body", "before", "--data-dir", str(data))
        assert pub.returncode == 0, pub.stderr
        os.kill(standard["pid"], signal.SIGKILL)
        pub = cli("publish", "jobs.queue", "--count", "5", "--body", "after", "--data-dir", str(data))
        assert pub.returncode == 0, pub.stderr
        sub = cli("subscribe", "jobs.queue", "--count", "10", "--json", "--data-dir", str(data))
        assert sub.returncode == 0, sub.stderr
        bodies = [json.loads(line)["body"] for line in sub.stdout.splitlines() if line.strip()]
        assert bodies == ["before"] * 5 + ["after"] * 5
    finally:
        state = load_state(data)
        cli("down", "--data-dir", str(data))
        for cluster in (state or {}).get("clusters", {}).values():
            for m in cluster["members"].values():
                if pid_alive(m["pid"]):
                    os.kill(m["pid"], signal.SIGKILL)
