"""Disaster recovery, standby side (docs/dr.md): a primary site and a standby site, each with its
own real etcd, three real members each and the real `strongroom-dr` between them. The standby's
log is the primary's entry for entry, its state the primary's at the same index, through SIGKILL
of the primary's leader and of the standby's leader under load; the standby serves no client."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from dr_sites import Sites, caught_up, committed_log, grid, load
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import wait_for

from strongroom.api.v1 import admin_pb2, dr_pb2, dr_pb2_grpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS
from strongroom.client import Client
from strongroom.errors import LogDiverged, NotStandby, StandbyRefusal
from strongroom.grpcerrors import from_rpc_error

pytestmark = pytest.mark.slow


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[Sites]:
    s = Sites(tmp_path)
    try:
        s.start()
        yield s
    finally:
        s.stop()


async def test_the_standby_holds_the_primarys_log_and_state_and_serves_no_client(sites: Sites) -> None:
    leader = await sites.primary.leader()
    await sites.standby.leader()
    acked: dict[str, int] = {}
    async with Client(sites.primary.addresses(), timeout=30) as client:
        await client.subscribe("orders", "audit")  # a second durable that never acks
        await load(client, "orders", 300, acked)
        await load(client, "jobs.queue", 200, acked)
    primary, standby = await caught_up(sites)
    assert len(standby) == 3 and all(s.standby for s in standby) and not primary.standby
    for s in standby:
        assert grid(s) == grid(primary), f"{s.member} differs from the primary"
    # The lag: on the standby leader, the primary's commit index and nothing behind; the CLI shows
    # the standby set apart, with it.
    lead = next(x for x in standby if x.role == "leader")
    assert lead.primary_commit_index >= primary.commit_index and lead.seconds_behind_primary == 0.0
    cli = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "strongroom.cli.main", "status", "--endpoints",
                                                   ",".join(sites.standby.addresses() + sites.primary.addresses())],
                                  capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "cluster default (standby set): leader " + lead.member in cli.stdout, cli.stdout
    assert "behind the primary: 0 entries, 0.0 s" in cli.stdout, cli.stdout
    assert f"cluster default: leader {primary.member}" in cli.stdout, cli.stdout
    orders = {(d, n): p for d, n, p, _ in grid(primary)["default"][2]}
    assert orders[("orders", "audit")] == 300 and orders[("orders", "reader")] == 100
    # Entry for entry the primary's log (same index, same bytes, no gap, nothing of its own after
    # it): nothing applied twice, nothing missing.
    upto = primary.commit_index
    assert all(s.last_index == upto for s in standby), [(s.member, s.last_index, upto) for s in standby]
    mine = await committed_log(sites.primary.address(leader), upto)
    theirs = await committed_log(sites.standby.address("s2"), upto)
    assert sorted(theirs) == list(range(min(theirs), upto + 1)) and min(theirs) == 1
    assert theirs == mine
    await _refuses_another_history(sites, lead, mine)
    # The DR service's own view, over DrService.Status; its health says SERVING.
    async with grpc.aio.insecure_channel(sites.dr_address, options=CHANNEL_OPTIONS) as channel:
        dr = await dr_pb2_grpc.DrServiceStub(channel).Status(dr_pb2.DrStatusRequest(), timeout=5)
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="strongroom.v1.DrService"), timeout=5)
    assert dr.cluster == "default" and dr.state == "shipping" and health.status == health_pb2.HealthCheckResponse.SERVING
    assert dr.primary_commit_index >= primary.commit_index and dr.standby_last_index == primary.commit_index
    assert dr.entries_behind == 0 and dr.primary_member in sites.primary.names
    assert list(dr.primary) == sites.primary.addresses() and sorted(dr.standby) == sorted(sites.standby.addresses())
    # Clients get STANDBY at the standby set, naming the primary; shipping to the primary is refused.
    async with grpc.aio.insecure_channel(sites.standby.address("s1"), options=CHANNEL_OPTIONS) as channel:
        from strongroom.api.v1 import messaging_pb2, messaging_pb2_grpc
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(
                messaging_pb2.PublishRequest(destination="orders", message={"body": b"x"}), timeout=5)
        err = from_rpc_error(info.value)
        assert isinstance(err, StandbyRefusal) and sites.primary.address("m1") in err.metadata["primary"]
    async with grpc.aio.insecure_channel(sites.primary.address(leader), options=CHANNEL_OPTIONS) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await rgrpc.ReplicationServiceStub(channel).ShipEntries(rpb.ShipEntriesRequest(), timeout=5)
        assert isinstance(from_rpc_error(info.value), NotStandby)


async def _refuses_another_history(sites: Sites, lead: admin_pb2.ClusterStatus, log: dict[int, bytes]) -> None:
    """Shipments that do not continue the standby's log are refused with DIVERGED and store
    nothing, a malformed snapshot with INVALID_ARGUMENT; one that starts past its end is not
    accepted (the DR service ships again from the standby's end)."""
    last = max(log)
    held = rpb.LogEntry.FromString(log[last])
    stranger = rpb.LogEntry(index=last + 1, epoch=held.epoch + 1000).SerializeToString()
    async with grpc.aio.insecure_channel(sites.standby.address(lead.member), options=CHANNEL_OPTIONS) as channel:
        stub = rgrpc.ReplicationServiceStub(channel)
        for request in (
                # entries after an entry of another epoch at the primary
                rpb.ShipEntriesRequest(first_index=last + 1, entries=[stranger], prev_epoch=held.epoch + 7),
                # a snapshot of another epoch at an index the standby holds
                rpb.ShipEntriesRequest(first_index=last + 1, entries=[stranger], snapshot=b"x", snapshot_index=last,
                                       snapshot_epoch=held.epoch + 7, prev_epoch=held.epoch + 7),
                # entries the standby holds, with other contents
                rpb.ShipEntriesRequest(first_index=last, entries=[rpb.LogEntry(index=last, epoch=held.epoch + 3)
                                                                  .SerializeToString()],
                                       prev_epoch=rpb.LogEntry.FromString(log[last - 1]).epoch)):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ShipEntries(request, timeout=5)
            assert isinstance(from_rpc_error(info.value), LogDiverged), info.value.details()
        for request in (rpb.ShipEntriesRequest(first_index=last + 1, snapshot_index=last, snapshot_epoch=held.epoch),
                        rpb.ShipEntriesRequest(first_index=last + 3, snapshot=b"x", snapshot_index=last + 1,
                                               snapshot_epoch=held.epoch)):
            # a snapshot without its state, or not followed by its index + 1
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ShipEntries(request, timeout=5)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
        gap = await stub.ShipEntries(rpb.ShipEntriesRequest(first_index=last + 5, entries=[
            rpb.LogEntry(index=last + 5 + i, epoch=held.epoch).SerializeToString() for i in range(2)],
            prev_epoch=held.epoch), timeout=5)
        assert not gap.accepted and gap.last_index == last
    after = await sites.standby.status(lead.member)
    assert after is not None and after.last_index == last and after.commit_index == last


async def test_sigkill_of_either_leader_under_load_leaves_the_standby_equal_to_the_primary(sites: Sites) -> None:
    await sites.primary.leader()
    standby_leader = await sites.standby.leader()
    confirmed: list[bytes] = []
    stop = asyncio.Event()
    async with Client(sites.primary.addresses(), timeout=60) as client:
        await client.subscribe("ledger", "audit")
        publisher = client.publisher("ledger", window=32)

        async def produce() -> None:
            i = 0
            while not stop.is_set():
                body = f"l{i}".encode()
                fut = await publisher.send(body)
                fut.add_done_callback(lambda f, b=body: confirmed.append(b) if not f.exception() else None)
                i += 1
                if i % 32 == 0:
                    await asyncio.sleep(0.01)
            await publisher.flush()

        producing = asyncio.create_task(produce())
        try:
            await asyncio.sleep(2.0)
            sites.standby.kill(standby_leader, signal.SIGKILL)
            await asyncio.sleep(2.0)
            old = await sites.primary.leader()
            sites.primary.kill(old, signal.SIGKILL)
            await asyncio.sleep(3.0)
            sites.standby.start(standby_leader)  # back, on its disk
            sites.primary.start(old)
            await asyncio.sleep(2.0)
        finally:
            stop.set()
            await producing
    assert len(confirmed) > 200
    primary, standby = await caught_up(sites)
    assert len(standby) == 3
    for s in standby:
        assert grid(s) == grid(primary), f"{s.member} differs from the primary\n{sites.logs()}"
    ledger = {(d, n): p for d, n, p, _ in grid(primary)["default"][2]}
    assert ledger[("ledger", "audit")] >= len(set(confirmed))
    leader = await sites.primary.leader()
    upto = primary.commit_index
    assert all(s.last_index == upto for s in standby), [(s.member, s.last_index, upto) for s in standby]
    mine = await committed_log(sites.primary.address(leader), upto)
    theirs = await committed_log(sites.standby.address(standby_leader), upto)
    assert sorted(theirs) == list(range(1, upto + 1)) and theirs == mine


async def test_a_standby_that_starts_after_the_primary_compacted_gets_its_state_then_the_entries(
        tmp_path: Path) -> None:
    """The primary compacted its log before the standby site existed: the stream starts with the
    primary's state snapshot, the standby leader installs it, its followers catch up from it, and
    the entries after it follow; the standby's grid equals the primary's."""
    sites = Sites(tmp_path, compact_after_entries=100)
    try:
        sites.primary.start_all()
        leader = await sites.primary.leader()
        acked: dict[str, int] = {}
        async with Client(sites.primary.addresses(), timeout=30) as client:
            for i in range(150):
                await client.publish("early.queue", f"e{i}".encode())
            await load(client, "later", 60, acked)

            async def compacted() -> bool:
                st = await sites.primary.status(leader)
                return st is not None and st.snapshot_index >= 100
            await wait_for(compacted, timeout=20)
            sites.start_standby()
            await sites.standby.leader()
            for i in range(20):  # entries after the snapshot
                await client.publish("early.queue", f"f{i}".encode())
        primary, standby = await caught_up(sites)
        assert len(standby) == 3
        for s in standby:
            assert s.snapshot_index >= 100, f"{s.member} did not start from the primary's state"
            assert grid(s) == grid(primary), f"{s.member} differs from the primary\n{sites.logs()}"
        early = {(d, n): p for d, n, p, _ in grid(primary)["default"][2]}
        assert early[("early.queue", "")] == 170
    finally:
        sites.stop()
