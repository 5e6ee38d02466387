"""Migration of a cluster's persistent stores by unload and load (docs/store-operations.md,
"Migration: unload and load"), with real etcd, member processes, RocksDB and SQLite files and
the `strongroom store unload` / `load` processes talking gRPC.

The main test moves a 3-member RocksDB cluster holding a backlog of 100 000 messages, a durable
with acknowledged messages, a committed and an open unit of work, to SQLite: one unload and one load
instance per member (started in both orders), reports compared record by record, the cluster
restarted on the new stores with the realm's driver changed, and everything there: the backlog
whole, in order, once; the committed unit of work whole, the open one backed out as at any
restart; what was acknowledged still gone. The others: every handshake problem stops both instances with the same sentence and
changes nothing; a store a member holds is not unloaded; only administration is served.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess as sp
import time
import sys
from pathlib import Path
from typing import Any

import grpc
import pyarrow.parquet as pq
import pytest

from harness import Cluster, free_port, put_realm, realm_yaml, wait_for
from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import admin_pb2_grpc as agrpc
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.client import Client
from strongroom.grpcerrors import from_rpc_error
from strongroom.persistence.drivers import MARKER, RocksDriver
from strongroom.persistence.pstore_report import read_report
from strongroom.persistence.storage import DiskStorage
from strongroom.channels import open_channel

pytestmark = pytest.mark.slow

BACKLOG = 100_000
ENV = {k: v for k, v in os.environ.items() if k != "STRONGROOM_PSTORE_REPORT"}


def instance(mode: str, store: Path, listen: str, partner: str, *extra: str, member: str = "m1",
             cwd: Path | None = None, env: dict[str, str] | None = None) -> sp.Popen[str]:
    """A `strongroom store unload|load` process (JSON outcome on stdout, progress on stderr)."""
    argv = [sys.executable, "-m", "strongroom.cli.main", "store", mode, "--cluster", "default", "--member", member,
            "--store-dir", str(store), "--listen", listen, "--partner", partner, "--json", "--wait", "60", *extra]
    return sp.Popen(argv, stdout=sp.PIPE, stderr=sp.PIPE, text=True, env={**ENV, **(env or {})}, cwd=cwd)


def report_rows(events: Path, kind: str) -> dict[str, list[tuple[str, str, int]]]:
    """The PSTORE report rows of `kind` in a store event log, per member: (detail, record type,
    length) in line order; each member's rows of one run."""
    rows = [r for f in sorted(events.glob("cluster=default/hour=*/records-*.parquet"))
            for r in pq.read_table(f).to_pylist() if r["kind"] == kind]
    out: dict[str, list[tuple[str, str, int]]] = {}
    for member in {r["target"] for r in rows}:
        mine = sorted((r for r in rows if r["target"] == member), key=lambda r: r["log_index"])
        assert len({r["epoch"] for r in mine}) == 1 and [r["log_index"] for r in mine] == list(range(1, len(mine) + 1))
        out[member] = [(r["detail"], r["reason"], r["size"]) for r in mine]
    return out


def outcome(proc: sp.Popen[str], timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, json.loads(out) if out.strip() else {}, err


def records_digest(store: Path) -> str:
    """A digest of every raw record of a RocksDB store, read without changing it."""
    h = hashlib.sha256()
    for family, key, value in RocksDriver.read_stored(store / "db"):
        h.update(family.encode() + b"\0" + len(key).to_bytes(4, "big") + key + len(value).to_bytes(8, "big") + value)
    return h.hexdigest()


def sst_files(store: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (store / "db").iterdir() if p.suffix == ".sst" or p.name == "CURRENT"}


def migrate_every_member(cluster: Cluster, tmp_path: Path, driver: str = "sqlite") -> dict[str, dict[str, Any]]:
    """Unload every (stopped) member's store into a new one of `driver` under tmp_path/new, one
    pair of instances per member, all at once, started in both orders; checks both sides'
    outcomes, the reports and that the old stores did not change; the unloads' outcomes."""
    before = {m: (records_digest(cluster.data_dir(m)), sst_files(cluster.data_dir(m))) for m in cluster.names}
    reports = tmp_path / "reports"
    reports.mkdir()
    # The first member's reports go to a store event log too: the unload's by option, the
    # load's by the environment.
    events = tmp_path / "events"
    pairs = {}
    for n, member in enumerate(cluster.names):
        unload_at, load_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        new = tmp_path / "new" / member
        unload_args = ("unload", cluster.data_dir(member), unload_at, load_at, "--report",
                       *(("--event-log-dir", str(events)) if n == 0 else ()))
        load_args = ("load", new, load_at, unload_at, "--driver", driver, "--report")
        load_env = {"STRONGROOM_EVENT_LOG_DIR": str(events)} if n == 0 else {}
        # Either order: the first member's unload starts first, the others' load.
        first, second = (unload_args, load_args) if n == 0 else (load_args, unload_args)
        a = instance(*first, member=member, cwd=reports, env=load_env if first is load_args else None)  # type: ignore[arg-type]
        time.sleep(1.0 if n == 0 else 0.2)
        b = instance(*second, member=member, cwd=reports, env=load_env if second is load_args else None)  # type: ignore[arg-type]
        pairs[member] = (a, b) if n == 0 else (b, a)
    found = {}
    for member, (unload, load) in pairs.items():
        u_code, u, u_err = outcome(unload)
        l_code, lo, l_err = outcome(load)
        assert (u_code, l_code) == (0, 0), u_err + l_err
        assert u["match"] and lo["match"] and u["driver"] == "rocksdb" and lo["driver"] == driver
        assert u["records"] == lo["records"] > 0 and u["bytes"] == lo["bytes"]
        assert u["families"] == lo["families"]
        # The reports, in the seed's names, equal record by record.
        unload_report = reports / f"PSTORE.REPORT.default.{member}.UNLOAD"
        load_report = reports / f"PSTORE.REPORT.default.{member}.LOAD"
        assert u["report"].endswith(unload_report.name) and lo["report"].endswith(load_report.name)
        cmp = sp.run([sys.executable, "-m", "strongroom.cli.main", "store", "compare-reports", str(unload_report),
                      str(load_report), "--json"], capture_output=True, text=True, env=ENV, check=False)
        assert cmp.returncode == 0, cmp.stdout + cmp.stderr
        assert json.loads(cmp.stdout)["equal"] and json.loads(cmp.stdout)["records"]["first"] == u["records"]
        text = unload_report.read_text()
        assert "Unloaded" in text and "Publication" in text and "Master" in text
        assert "Loaded" in load_report.read_text()
        assert "the counts of both sides match" not in u_err  # --json: the outcome is the JSON
        assert "handshake held" in u_err and "handshake with the unload instance" in l_err
        found[member] = u
    # The first member's report lines are rows of the event log, line for line, for both sides.
    first = cluster.names[0]
    for kind, side in (("records_unloaded", "UNLOAD"), ("records_loaded", "LOAD")):
        lines = read_report(reports / f"PSTORE.REPORT.default.{first}.{side}")
        assert report_rows(events, kind) == {first: [(f"{ln.identifier} {ln.elements}", ln.record_type, ln.length)
                                                     for ln in lines]}, kind
    # The old stores were read, not changed.
    for member in cluster.names:
        assert (records_digest(cluster.data_dir(member)), sst_files(cluster.data_dir(member))) == before[member]

    return found


async def test_a_rocksdb_cluster_with_a_backlog_and_open_uows_moves_to_sqlite_whole(  # type: ignore[no-untyped-def]
        make_cluster, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster(driver="rocksdb")
    await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    # A topic durable with part of its messages acknowledged, a backlog on a queue, a committed
    # unit of work not yet received and one still open.
    sub = await client.subscribe("news", "audit")
    await sub.close()
    for i in range(10):
        assert (await client.publish("news", f"n{i}".encode())).confirmed
    audit = await client.subscribe("news", "audit", credit=10)
    acked = [await audit.next(timeout=10) for _ in range(4)]
    await client.ack("news", "audit", [m.seq for m in acked], audit.subscription_id)
    await audit.close()
    pub = client.publisher("backlog.queue", window=256)
    for i in range(BACKLOG):
        await pub.send(b"b%06d" % i)
    await pub.flush()
    await pub.close()
    done = client.unit_of_work("work.queue")
    done.add(b"w1")
    done.add(b"w2")
    assert (await done.commit()).status == "ACCEPTED"
    open_uow = client.unit_of_work("work.queue")
    open_uow.add(b"o1")
    assert (await open_uow.send()).status == "RECEIVED"
    leader = await cluster.leader()
    st = await cluster.status(leader)
    assert st is not None
    commit_index = st.commit_index
    await client.close()
    cluster.stop_all()
    # No PSTORE report unless the realm turns it on (persistent_store.report).
    assert not any((cluster.data_dir(m) / "PSTORE.REPORT").exists() for m in cluster.names)
    outcomes = migrate_every_member(cluster, tmp_path)
    for u in outcomes.values():
        # The log holds every message (the backlog's, the news's and the committed UOW's).
        assert u["elements"] >= BACKLOG + 10 + 2
        assert "Unit of work" in Path(u["report"]).read_text()
    # The new stores take the members' places, the realm selects sqlite, the cluster starts.
    for member in cluster.names:
        old = cluster.data_dir(member)
        shutil.move(old, tmp_path / f"old-{member}")
        shutil.move(tmp_path / "new" / member, old)
        assert (old / MARKER).read_text().strip() == "sqlite"
    await put_realm(cluster.etcd, realm_yaml(driver="sqlite"), 2)
    cluster.start_all()
    leader = await cluster.leader(timeout=60)
    client = Client(cluster.addresses(), timeout=30)
    try:
        st = await cluster.status(leader)
        assert st is not None and st.commit_index >= commit_index
        # The committed UOW is there whole; the open one was backed out by the new leader, as
        # any restart of a cluster does (README, Units of work), and its status kept.
        assert (await client.uow_status(done.uow_id)).status == "ACCEPTED"
        assert (await client.uow_status(open_uow.uow_id)).status == "BACKEDOUT"
        got = await client.receive_uow("work.queue", "r1", wait=5)
        assert got is not None and got.uow_id == done.uow_id and [m.body for m in got.messages] == [b"w1", b"w2"]
        assert await got.commit() == "PROCESSED"
        assert await client.receive_uow("work.queue", "r1", wait=0.5) is None
        # The durable's acknowledged messages stay gone; the rest are there.
        audit = await client.subscribe("news", "audit", credit=10)
        rest = [(await audit.next(timeout=10)).body for _ in range(6)]
        assert rest == [f"n{i}".encode() for i in range(4, 10)]
        await audit.close()
        # The whole backlog, in order, once.
        sub = await client.subscribe("backlog.queue", "", credit=2048)
        bodies = []
        while len(bodies) < BACKLOG:
            msg = await sub.next(timeout=15)
            bodies.append(msg.body)
        assert bodies == [b"b%06d" % i for i in range(BACKLOG)]
        with pytest.raises(TimeoutError):
            await sub.next(timeout=1.0)
        await sub.close()
        # New work is stored in the new stores.
        assert (await client.publish("backlog.queue", b"after")).confirmed
    finally:
        await client.close()


def small_store(path: Path) -> None:
    """A member's store holding a few log entries (RocksDB), written as a member writes it."""
    from strongroom.api.v1 import replication_pb2 as rpb

    storage = DiskStorage(path, sync=True)
    entries = [rpb.LogEntry(index=i, epoch=1) for i in range(1, 6)]
    storage.append(entries, commit_index=5)
    storage.set_promised(1, "m1")
    storage.close()


def both_stop(a: sp.Popen[str], b: sp.Popen[str]) -> tuple[list[str], list[str]]:
    a_code, a_out, a_err = outcome(a, timeout=90)
    b_code, b_out, b_err = outcome(b, timeout=90)
    assert (a_code, b_code) == (2, 2), a_err + b_err
    return a_out["problems"], b_out["problems"]


def test_every_handshake_problem_stops_both_and_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "m1"
    small_store(store)
    digest = records_digest(store)

    def pair(unload_extra: tuple[str, ...] = (), load_dir: Path | None = None, load_extra: tuple[str, ...] = (),
             load_partner: str | None = None, load_mode: str = "load",
             load_member: str = "m1") -> tuple[list[str], list[str]]:
        u_at, l_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        target = load_dir or tmp_path / f"new-{free_port()}"
        second_extra = ("--driver", "sqlite", *load_extra) if load_mode == "load" else load_extra
        b = instance(load_mode, target if load_mode == "load" else store, l_at, load_partner or u_at,
                     *second_extra, member=load_member)
        a = instance("unload", store, u_at, l_at, *unload_extra)
        return both_stop(a, b)

    # The same store on both sides.
    u, lo = pair(load_dir=store)
    for problems in (u, lo):
        assert any("both instances point at the same store" in p for p in problems)
        assert any("already holds a store" in p for p in problems)
    # A partner address that is not the unload's.
    wrong = f"127.0.0.1:{free_port()}"
    u, lo = pair(load_partner=wrong)
    assert any(f"was given {wrong} as its partner" in p for p in u) and u == lo
    # Two unload instances.
    u, lo = pair(load_mode="unload")
    assert any("both instances run in mode pstore-unload" in p for p in u + lo)
    # Another member's store.
    u, lo = pair(load_member="m2")
    assert any("pair the instances of one member" in p for p in u) and u == lo
    # A load directory that holds a store already.
    full = tmp_path / "full"
    small_store(full)
    full_digest = records_digest(full)
    u, lo = pair(load_dir=full)
    assert any(f"the load's data directory {full} already holds a store" in p for p in u)
    assert records_digest(full) == full_digest
    assert records_digest(store) == digest
    # Nothing was written by the failed loads: their directories hold no store.
    for new in tmp_path.glob("new-*"):
        assert not (new / "db").exists() and not (new / MARKER).exists()


def test_a_store_a_member_holds_is_not_unloaded(tmp_path: Path) -> None:
    store = tmp_path / "m1"
    small_store(store)
    held = RocksDriver(store / "db", ("log", "meta"))  # as a running member holds it (RocksDB's LOCK)
    try:
        u_at, l_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        b = instance("load", tmp_path / "new", l_at, u_at, "--driver", "sqlite")
        a = instance("unload", store, u_at, l_at)
        u, lo = both_stop(a, b)
        assert any("a process holds the store" in p and "stop the member" in p for p in u) and u == lo
    finally:
        held.close()


async def test_an_instance_waiting_for_its_partner_serves_administration_only(tmp_path: Path) -> None:
    l_at, u_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = instance("load", tmp_path / "new", l_at, u_at, "--driver", "sqlite")
    try:
        async with open_channel(l_at, []) as channel:
            async def status() -> apb.ClusterStatus | None:
                try:
                    return await agrpc.AdminServiceStub(channel).Status(apb.StatusRequest(), timeout=2)
                except grpc.aio.AioRpcError:
                    return None

            async def answers() -> bool:
                return await status() is not None

            await wait_for(answers, timeout=30)
            st = await status()
            assert st is not None and st.migration.run_mode == "pstore-load"
            assert (st.migration.partner_address, st.migration.driver) == (u_at, "sqlite")
            assert st.migration.state == "waiting for the partner"
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await mgrpc.MessagingServiceStub(channel).Publish(mpb.PublishRequest(destination="q"), timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            err = from_rpc_error(raised.value)
            assert err is not None and err.reason == "NOT_OPERATIONAL" and err.metadata["partner"] == u_at
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


async def test_indexes_on_disk_and_restore_point_checkpoints_move_to_sqlite(  # type: ignore[no-untyped-def]
        make_cluster, tmp_path: Path) -> None:
    """A cluster with indexes on disk keeps its state in the database and a checkpoint database
    per restore point: all of them move, and the members restart on them."""
    cluster: Cluster = make_cluster(driver="rocksdb", indexes_on_disk=True, compact_after_entries=100)
    await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    pub = client.publisher("backlog.queue", window=64)
    for i in range(3000):
        await pub.send(b"c%05d" % i)
    await pub.flush()
    await pub.close()
    sub = await client.subscribe("backlog.queue", "", credit=100)
    for i in range(500):
        msg = await sub.next(timeout=10)
        assert msg.body == b"c%05d" % i
        await client.ack("backlog.queue", "", [msg.seq], sub.subscription_id)
    await sub.close()
    await client.close()
    cluster.stop_all()
    outcomes = migrate_every_member(cluster, tmp_path)
    for u in outcomes.values():
        databases = {name.rsplit("/", 1)[0] for name in u["families"]}
        assert "db" in databases and any(d.startswith("checkpoints/") for d in databases), databases
        assert any(name.startswith("db/state_") for name in u["families"])
    for member in cluster.names:
        old = cluster.data_dir(member)
        shutil.move(old, tmp_path / f"old-{member}")
        shutil.move(tmp_path / "new" / member, old)
    await put_realm(cluster.etcd, realm_yaml(driver="sqlite", indexes_on_disk=True, compact_after_entries=100), 2)
    cluster.start_all()
    await cluster.leader(timeout=60)
    client = Client(cluster.addresses(), timeout=30)
    try:
        sub = await client.subscribe("backlog.queue", "", credit=512)
        bodies = [(await sub.next(timeout=15)).body for _ in range(2500)]
        assert bodies == [b"c%05d" % i for i in range(500, 3000)]
        with pytest.raises(TimeoutError):
            await sub.next(timeout=1.0)
        await sub.close()
    finally:
        await client.close()


async def test_a_transfer_that_breaks_off_stops_the_load(tmp_path: Path) -> None:
    """The test is the unload instance here: a handshake that holds, one chunk of records, then
    the stream cancelled: the load stops (status 2) saying so, instead of waiting for a summary."""
    from strongroom.api.v1 import migration_pb2 as mig_pb
    from strongroom.api.v1 import migration_pb2_grpc as mig_grpc
    from strongroom.persistence import migration as mig
    from strongroom.persistence.migration_server import side_message

    l_at, u_at = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = instance("load", tmp_path / "new", l_at, u_at, "--driver", "sqlite")
    (tmp_path / "old").mkdir()
    me = mig.side(mig.MigrationMode.UNLOAD, u_at, l_at, "rocksdb", tmp_path / "old", "default", "m1")
    try:
        async with open_channel(l_at, []) as channel:
            stub = mig_grpc.StoreMigrationServiceStub(channel)

            async def answered() -> bool:
                try:
                    reply = await stub.Handshake(mig_pb.MigrationHandshake(side=side_message(me)), timeout=2)
                except grpc.aio.AioRpcError:
                    return False
                assert list(reply.problems) == []
                return True

            await wait_for(answered, timeout=30)
            call = stub.Transfer()
            await call.write(mig_pb.RecordChunk(database="db", families=["log", "meta"], records=[
                mig_pb.StoreRecord(family="log", key=(i).to_bytes(8, "big"), value=b"x") for i in range(1, 11)]))
            await asyncio.sleep(1.0)
            call.cancel()
        code, out, err = outcome(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 2, err
    assert any("broke off after 10 records" in p for p in out["problems"]), out
