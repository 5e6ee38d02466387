"""Disaster recovery, standby side (docs/dr.md): a primary site and a standby site, each with its
own real etcd, three real members each and the real `strongroom-dr` between them. The standby's
log is the primary's entry for entry, its state the primary's at the same index, through SIGKILL
of the primary's leader and of the standby's leader under load; the standby serves no client."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from dr_sites import Sites, caught_up, committed_log, grid, load
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import as_dr, scrape, value, wait_for

from strongroom.api.v1 import admin_pb2, dr_pb2, dr_pb2_grpc
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.api.v1 import replication_pb2_grpc as rgrpc
from strongroom.channels import CHANNEL_OPTIONS, open_channel
from strongroom.client import Client
from strongroom.dr.transport import dr_status
from strongroom.errors import LogDiverged, NotStandby, StandbyRefusal, StrongroomError
from strongroom.grpcerrors import from_rpc_error
from strongroom.local.process import stop_processes

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
    # The primary's status and the standby's are read one after the other: a pseudo-clock tick
    # of the quiet primary can reach the standby in between. Read again until one view holds.
    for _ in range(3):
        primary, standby = await caught_up(sites)
        if all(s.last_index == primary.commit_index for s in standby):
            break
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
    async with open_channel(sites.dr_address, CHANNEL_OPTIONS) as channel:
        dr = await dr_pb2_grpc.DrServiceStub(channel).Status(dr_pb2.DrStatusRequest(), timeout=5)
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="strongroom.v1.DrService"), timeout=5)
    assert dr.cluster == "default" and dr.state == "shipping" and health.status == health_pb2.HealthCheckResponse.SERVING
    assert dr.primary_commit_index >= primary.commit_index and dr.standby_last_index == primary.commit_index
    assert dr.entries_behind == 0 and dr.primary_member in sites.primary.names
    assert list(dr.primary) == sites.primary.addresses() and sorted(dr.standby) == sorted(sites.standby.addresses())
    # Clients get STANDBY at the standby set, naming the primary; shipping to the primary is refused.
    async with open_channel(sites.standby.address("s1"), CHANNEL_OPTIONS) as channel:
        from strongroom.api.v1 import messaging_pb2, messaging_pb2_grpc
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await messaging_pb2_grpc.MessagingServiceStub(channel).Publish(
                messaging_pb2.PublishRequest(destination="orders", message={"body": b"x"}), timeout=5)
        err = from_rpc_error(info.value)
        assert isinstance(err, StandbyRefusal) and sites.primary.address("m1") in err.metadata["primary"]
    async with open_channel(sites.primary.address(leader), CHANNEL_OPTIONS, tls=as_dr()) as channel:
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
    async with open_channel(sites.standby.address(lead.member), CHANNEL_OPTIONS, tls=as_dr()) as channel:
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


async def _primary_heartbeat(address: str, from_index: int) -> rpb.CommittedEntries:
    """A heartbeat of the primary member at `address`'s committed-entry stream (what the DR
    service hands on to the standby leader): its commit index and stored messages."""
    async with open_channel(address, CHANNEL_OPTIONS) as channel:
        call = rgrpc.ReplicationServiceStub(channel).StreamCommitted(
            rpb.StreamCommittedRequest(from_index=from_index, heartbeat_ms=200))
        try:
            while True:
                msg = await asyncio.wait_for(call.read(), 10)
                if not msg.entries:
                    return msg
        finally:
            call.cancel()


async def _dr_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "strongroom.cli.main", *args],
                                   capture_output=True, text=True, timeout=60)


async def test_the_standby_says_how_many_messages_it_is_behind_and_catches_up(sites: Sites) -> None:
    """The lag in messages (the messages the primary stored through its applied index against the
    standby's through its own). The standby members hang (SIGSTOP: the DR service's ShipEntries
    gets no answer) while N messages are published: the DR service, reading the primary ahead of
    its call in flight, says N messages behind (`DrService.Status`, `strongroom dr status` and
    its --json); once they go on, what was read meanwhile is shipped together and the lag is 0.
    With the DR service stopped, the primary's heartbeat (its stored messages) handed to the
    standby leader as the DR service hands it on makes the leader say N behind (`AdminService`
    status, `strongroom status`); the DR service back, 0 again."""
    leader = await sites.primary.leader()
    await sites.standby.leader()
    async with Client(sites.primary.addresses(), timeout=30) as client:
        for i in range(20):
            await client.publish("lag.queue", f"before {i}".encode())

        async def caught_up(stored: int) -> bool:
            try:
                st = await dr_status(sites.dr_address)
            except StrongroomError:
                return False
            target = (await sites.primary.status(leader)).commit_index  # type: ignore[union-attr]
            return st.standby_last_index >= target and st.primary_stored_messages == stored
        await wait_for(lambda: caught_up(20), timeout=60)
        st = await dr_status(sites.dr_address)
        assert (st.messages_behind, st.primary_stored_messages, st.standby_stored_messages) == (0, 20, 20), st
        shipped_before = st.batches_shipped

        n = 150
        sites.pause_standby()
        try:
            await asyncio.sleep(0.5)  # the DR service's next ShipEntries is under way, unanswered
            for i in range(n):  # one entry each: the stream sends them one per message
                await client.publish("lag.queue", f"held {i}".encode())
            target = (await sites.primary.status(leader)).commit_index  # type: ignore[union-attr]

            async def heard() -> bool:
                st = await dr_status(sites.dr_address)
                return st.primary_commit_index >= target and st.primary_stored_messages == 20 + n
            await wait_for(heard, timeout=20)
            st = await dr_status(sites.dr_address)
            assert (st.messages_behind, st.standby_stored_messages) == (n, 20), st
            assert st.entries_behind >= n and st.state == "shipping"
            # Its metrics endpoint says the same (nothing moves while the standby hangs).
            metrics = await asyncio.to_thread(scrape, st.metrics_url)
            site = {"cluster": st.cluster, "site": "standby"}
            assert value(metrics, "strongroom_dr_messages_behind", **site) == n
            assert value(metrics, "strongroom_dr_shipping", **site) == 1
            assert value(metrics, "strongroom_dr_shipped_batches_total", **site) == st.batches_shipped
            assert value(metrics, "strongroom_dr_entries_behind", **site) >= n
            as_json = await _dr_cli("dr", "status", "--dr", sites.dr_address, "--json")
            assert as_json.returncode == 0, as_json.stdout + as_json.stderr
            (shown,) = json.loads(as_json.stdout)
            assert int(shown["messages_behind"]) == n and int(shown["primary_stored_messages"]) == 20 + n
            text = await _dr_cli("dr", "status", "--dr", sites.dr_address)
            assert f" entries, {n} messages, " in text.stdout, text.stdout
        finally:
            sites.pause_standby(signal.SIGCONT)
        await wait_for(lambda: caught_up(20 + n), timeout=60)
        st = await dr_status(sites.dr_address)
        assert (st.messages_behind, st.entries_behind, st.standby_stored_messages) == (0, 0, 20 + n), st
        # What was read while the call hung went in a few calls, not one per entry.
        assert st.batches_shipped - shipped_before <= 5, st

        # The DR service stopped: the primary's heartbeat, handed on to the standby leader, says
        # how many messages it lacks.
        stop_processes([sites.dr])
        for i in range(30):
            await client.publish("lag.queue", f"unshipped {i}".encode())
        commit = (await sites.primary.status(leader)).commit_index  # type: ignore[union-attr]
        beat = await _primary_heartbeat(sites.primary.address(leader), commit + 1)
        assert beat.stored_messages == 20 + n + 30 and beat.applied_index >= commit
        lead = await sites.standby.leader()
        async with open_channel(sites.standby.address(lead), CHANNEL_OPTIONS, tls=as_dr()) as channel:
            answer = await rgrpc.ReplicationServiceStub(channel).ShipEntries(rpb.ShipEntriesRequest(
                primary_commit_index=beat.commit_index, primary_stored_messages=beat.stored_messages), timeout=10)
        assert answer.stored_messages == 20 + n and answer.applied_index == answer.last_index
        member = await sites.standby.status(lead)
        assert member is not None and member.messages_behind_primary == 30, member
        assert member.primary_commit_index == beat.commit_index
        cli = await _dr_cli("status", "--endpoints", ",".join(sites.standby.addresses()))
        assert cli.returncode == 0, cli.stderr
        assert ", 30 messages (primary commit index" in cli.stdout, cli.stdout
        as_json = await _dr_cli("status", "--json", "--endpoints", sites.standby.address(lead))
        assert int(json.loads(as_json.stdout)[0]["messages_behind_primary"]) == 30
    sites.start_dr()
    await wait_for(lambda: caught_up(20 + n + 30), timeout=60)

    async def member_caught_up() -> bool:
        member = await sites.standby.status(await sites.standby.leader())
        return member is not None and member.messages_behind_primary == 0 and member.last_index >= commit
    await wait_for(member_caught_up, timeout=30)
    cli = await _dr_cli("status", "--endpoints", ",".join(sites.standby.addresses()))
    assert "behind the primary: 0 entries, 0.0 s, 0 messages" in cli.stdout, cli.stdout
