"""Store operations (EntireX's DISCONNECT-PSTORE / CONNECT-PSTORE) on a real 3-member cluster:
real etcd, real member processes over gRPC, real RocksDB, the `strongroom` command as a user runs
it. A disconnect under mixed persistent and non-persistent load (the non-persistent work goes on,
persistent commands are refused at once, nothing is stored meanwhile; connected, producers get
NO_NEW_UOW while consumers drain; allowed again, everything works and nothing confirmed is lost);
the operator's transitions and the refused ones (nothing changed), the state in every member's
status and surviving a SIGKILL of the leader (the new leader enforces it)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from harness import (
    SHARED_DESTINATIONS,
    SHARED_STORES,
    Cluster,
    MixedLoad,
    realm_yaml,
    refused_at_once,
    running_cluster,
    strongroom,
    wait_for,
)

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.api.v1 import uow_pb2, uow_pb2_grpc
from strongroom.client import Client, Received, RetryPolicy
from strongroom.errors import NoNewUow, PersistenceUnavailable, StoreStateError
from strongroom.channels import open_channel

DESTINATIONS = SHARED_DESTINATIONS + """  - name: news.topic
    kind: topic
    store: default
    units_of_work:
      durable: true
  - name: ttl.queue
    kind: queue
    store: default
    ttl_seconds: 4
"""

AVAILABLE, UNAVAILABLE, NO_NEW = ("PERSISTENT_STORE_STATE_AVAILABLE", "PERSISTENT_STORE_STATE_UNAVAILABLE",
                                  "PERSISTENT_STORE_STATE_NO_NEW_UOW")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("pstore"), realm_yaml(
            extra_stores=SHARED_STORES, extra_destinations=DESTINATIONS)) as c:
        yield c


@pytest.fixture
async def servers(cluster: Cluster) -> str:
    """The -s value, once the cluster has a leader."""
    await cluster.leader()
    return ",".join(cluster.addresses())



def store(servers: str, *argv: str, ok: bool = True) -> Any:
    done = strongroom(servers, "store", *argv, "--cluster", "default", "--json")
    assert (done.returncode == 0) is ok, (done.stdout, done.stderr)
    return json.loads(done.stdout)


async def states(cluster: Cluster) -> set[str]:
    """The persistent store's state as every member's status says it ("down": a member that does
    not answer)."""
    seen = set()
    for name in cluster.names:
        st = await cluster.status(name)
        seen.add(apb.PersistentStoreState.Name(st.persistent_store.state) if st is not None else "down")
    return seen


async def test_the_operators_transitions_and_the_refused_ones(cluster: Cluster, servers: str) -> None:
    assert store(servers, "status")["state"] == AVAILABLE
    # Wrong transitions: refused with PSTORE_STATE, precisely, and nothing changes.
    for action, says in (("connect", "only a disconnected store is connected"),
                         ("allow-new", "it takes new units of work already")):
        refused = store(servers, action, ok=False)
        assert refused["error"] == "PSTORE_STATE" and says in refused["message"], refused
        assert store(servers, "status")["state"] == AVAILABLE

    done = store(servers, "disconnect", "--reason", "disk swap")
    assert (done["state"], done["cause"], done["enforced"]) == (UNAVAILABLE, "PERSISTENT_STORE_CAUSE_OPERATOR", True)
    assert done["reason"] == "disconnected by an operator: disk swap" and done["since"] > 0
    since = done["since"]
    for action, says in (("disconnect", "disconnected already"), ("allow-new", "connect it first")):
        refused = store(servers, action, ok=False)
        assert refused["error"] == "PSTORE_STATE" and says in refused["message"], refused
        again = store(servers, "status")
        assert (again["state"], again["since"]) == (UNAVAILABLE, since)
    await wait_for(lambda: _all(cluster, {UNAVAILABLE}), timeout=10)
    text = strongroom(servers, "status")
    assert "persistent store: UNAVAILABLE since " in text.stdout and "(disconnected by an operator: disk swap)" \
        in text.stdout and "strongroom store connect --cluster default" in text.stdout, text.stdout

    assert store(servers, "connect")["state"] == NO_NEW
    refused = store(servers, "connect", ok=False)
    assert "strongroom store allow-new --cluster default" in refused["message"]
    plain = strongroom(servers, "store", "status", "--cluster", "default")
    assert plain.returncode == 0 and "persistent store: NO NEW UNITS OF WORK since " in plain.stdout, plain.stdout
    assert store(servers, "allow-new")["state"] == AVAILABLE
    await wait_for(lambda: _all(cluster, {AVAILABLE}), timeout=10)
    # Without --json a refusal is `error: REASON: message` and exit status 1.
    done_plain = strongroom(servers, "store", "allow-new", "--cluster", "default")
    assert done_plain.returncode == 1 and done_plain.stderr.startswith("error: PSTORE_STATE: "), done_plain.stderr
    other = strongroom(servers, "store", "disconnect", "--cluster", "elsewhere", "--json")
    assert other.returncode == 1 and json.loads(other.stdout)["error"] == "UNKNOWN_CLUSTER"
    assert store(servers, "status")["state"] == AVAILABLE


async def _all(cluster: Cluster, wanted: set[str]) -> bool:
    return await states(cluster) == wanted


async def test_the_state_survives_a_sigkill_of_the_leader(cluster: Cluster, servers: str) -> None:
    async with Client(cluster.addresses(), timeout=20) as client:
        await client.change_persistent_store("disconnect", "default", "failover test")
        old = await cluster.leader()
        cluster.kill(old, signal.SIGKILL)
        try:
            new = await cluster.leader(exclude=old)
            st = await cluster.status(new)
            assert st is not None and st.persistent_store.state == apb.PERSISTENT_STORE_STATE_UNAVAILABLE
            assert st.persistent_store.enforced and st.persistent_store.reason.endswith("failover test")
            # The new leader enforces it from its first call: persistent refused at once, the rest served.
            async with open_channel(cluster.address(new), []) as channel:
                stub = mgrpc.MessagingServiceStub(channel)
                assert await refused_at_once(lambda: stub.Publish(mpb.PublishRequest(
                    destination="failover.queue", message=cpb.Message(body=b"x")), timeout=10)) == (
                    grpc.StatusCode.UNAVAILABLE, "PSTORE_UNAVAILABLE")
                answer = await stub.Publish(mpb.PublishRequest(destination="volatile.failover",
                                                               message=cpb.Message(body=b"x")), timeout=10)
                assert answer.confirmed
            with pytest.raises(StoreStateError):
                await client.change_persistent_store("disconnect", "default")
            await client.change_persistent_store("connect", "default")
            await client.change_persistent_store("allow-new", "default")
        finally:
            cluster.start(old)
        await wait_for(lambda: _all(cluster, {AVAILABLE}), timeout=30)


async def last_indexes(cluster: Cluster) -> dict[str, int]:
    out = {}
    for name in cluster.names:
        st = await cluster.status(name)
        assert st is not None, name
        out[name] = st.last_index
    return out


@pytest.mark.slow
async def test_a_disconnect_under_mixed_load(cluster: Cluster, servers: str) -> None:  # noqa: PLR0915
    leader = await cluster.leader()
    addresses = cluster.addresses()
    channel = open_channel(cluster.address(leader), [])
    messaging, uows = mgrpc.MessagingServiceStub(channel), uow_pb2_grpc.UowServiceStub(channel)
    async with Client(addresses, timeout=20) as admin, Client(addresses, timeout=20) as volatile, \
            Client(addresses, retry=RetryPolicy(timeout=0.5)) as producer:
        # Before: persistent messages, persistent units of work, a durable subscription to a
        # durable topic and a publication it has to receive.
        confirmed = [(await producer.publish("mixed.queue", f"before {i}".encode())).message_seq for i in range(20)]
        sent_uows = []
        for i in range(5):
            uow = producer.unit_of_work("mixed-uow.queue")
            uow.add(f"uow {i}".encode())
            sent_uows.append((await uow.commit()).uow_id)
        await producer.subscribe_publications("news.topic", "reader")
        publication = producer.unit_of_work("news.topic")
        publication.add(b"news")
        await publication.commit()

        # Non-persistent load: a non-replicated store's topic and units of work that are
        # neither persistent nor of persistent status, sent and received all along.
        load = MixedLoad(volatile, producer, "mixed.queue", confirmed)
        np_got, np_errors, p_outcomes = load.np_got, load.np_errors, load.p_outcomes

        await load.start()
        try:
            await asyncio.sleep(1.0)
            assert any(o == "stored" for _, o in p_outcomes) and np_got
            done = await admin.change_persistent_store("disconnect", "default", "mixed load")
            assert done.state == apb.PERSISTENT_STORE_STATE_UNAVAILABLE and done.enforced
            disconnected = time.monotonic()

            # Every command that needs persistence is refused at once, PSTORE_UNAVAILABLE.
            unavailable = (grpc.StatusCode.UNAVAILABLE, "PSTORE_UNAVAILABLE")
            assert await refused_at_once(lambda: messaging.Publish(mpb.PublishRequest(
                destination="mixed.queue", message=cpb.Message(body=b"x")), timeout=10)) == unavailable
            assert await refused_at_once(lambda: uows.Send(uow_pb2.UowSendRequest(
                destination="mixed-uow.queue", open=True, messages=[cpb.Message(body=b"x")],
                action=uow_pb2.UOW_ACTION_COMMIT), timeout=10)) == unavailable
            assert await refused_at_once(lambda: uows.Receive(uow_pb2.UowReceiveRequest(
                destination="mixed-uow.queue", receiver="w", wait_seconds=5), timeout=10)) == unavailable
            # A queue whose units of work are persistent: refused at once even with none waiting.
            assert await refused_at_once(lambda: uows.Receive(uow_pb2.UowReceiveRequest(
                destination="empty.queue", receiver="w", wait_seconds=5), timeout=10)) == unavailable
            assert await refused_at_once(lambda: uows.Status(uow_pb2.UowStatusRequest(uow_id=sent_uows[0]),
                                                             timeout=10)) == unavailable
            assert await refused_at_once(lambda: mgrpc.MapServiceStub(channel).Get(mpb.MapGetRequest(
                store="default", map="m", key="k"), timeout=10)) == unavailable
            with pytest.raises(PersistenceUnavailable):
                sub = await producer.subscribe("mixed.queue")
                await sub.next(timeout=5)

            # Nothing is stored while the store is unavailable (not even a clock tick) ...
            await asyncio.sleep(0.5)
            before = await last_indexes(cluster)
            window = time.monotonic()
            await asyncio.sleep(3.0)
            assert await last_indexes(cluster) == before
            # ... while the non-persistent work went on all along.
            assert np_errors == [] and sum(1 for t in np_got if t > window) >= 10, (np_errors, len(np_got))
            refused = [o for t, o in p_outcomes if t > disconnected + 0.2]
            assert refused and set(refused) == {"PSTORE_UNAVAILABLE"}, set(refused)
            assert (await volatile.publish("volatile.load", b"still")).stored

            # Connected: consumers drain, producers are refused with NO_NEW_UOW.
            done = await admin.change_persistent_store("connect", "default")
            assert done.state == apb.PERSISTENT_STORE_STATE_NO_NEW_UOW
            connected = time.monotonic()
            code, reason = await refused_at_once(lambda: messaging.Publish(mpb.PublishRequest(
                destination="mixed.queue", message=cpb.Message(body=b"x")), timeout=10))
            assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_NEW_UOW")
            with pytest.raises(NoNewUow, match="strongroom store allow-new --cluster default"):
                fresh = producer.unit_of_work("mixed-uow.queue")
                fresh.add(b"new")
                await fresh.commit()
            with pytest.raises(NoNewUow):
                await producer.subscribe_publications("news.topic", "newcomer")
            _, again = await producer.subscribe_publications("news.topic", "reader")
            assert not again
            news = await producer.receive_uow("news.topic", "reader", wait=5)
            assert news is not None and news.messages[0].body == b"news"
            await news.commit()
            received: list[Received] = []
            drain = await admin.subscribe("mixed.queue")
            while len(received) < len(confirmed):
                msg = await drain.next(timeout=10)
                received.append(msg)
                await drain.ack(msg)
            got_uows = []
            for _ in sent_uows:
                got = await admin.receive_uow("mixed-uow.queue", "drainer", wait=5)
                assert got is not None
                await got.commit()
                got_uows.append(got.uow_id)
            assert sorted(got_uows) == sorted(sent_uows)
            # The producer's attempts since the connect (past its retry policy's 0.5 s): NO_NEW_UOW.
            await wait_for(lambda: _outcomes_after(p_outcomes, connected + 0.6, 3), timeout=10)
            assert {o for t, o in p_outcomes if t > connected + 0.6} == {"NO_NEW_UOW"}

            # Allowed again: everything works.
            done = await admin.change_persistent_store("allow-new", "default")
            assert done.state == apb.PERSISTENT_STORE_STATE_AVAILABLE
            await wait_for(lambda: _stored_again(p_outcomes), timeout=10)
        finally:
            await load.stop()
            await channel.close()
        # Nothing confirmed was lost: every message a publisher was told was stored arrives.
        while len({m.seq for m in received}) < len(set(confirmed)):
            msg = await drain.next(timeout=10)
            received.append(msg)
            await drain.ack(msg)
        assert set(confirmed) <= {m.seq for m in received}
        assert np_errors == []


async def _stored_again(outcomes: list[tuple[float, str]]) -> bool:
    return bool(outcomes) and outcomes[-1][1] == "stored"


async def _outcomes_after(outcomes: list[tuple[float, str]], since: float, count: int) -> bool:
    return sum(1 for t, _ in outcomes if t > since) >= count


async def _pending(cluster: Cluster, member: str, queue: str) -> int:
    st = await cluster.status(member)
    assert st is not None, member
    return next((d.pending_messages for s in st.stores for d in s.durables if d.destination == queue and not d.name),
                0)


@pytest.mark.slow
async def test_no_lifetime_runs_while_the_store_is_unavailable(cluster: Cluster, servers: str) -> None:
    leader = await cluster.leader()
    async with Client(cluster.addresses(), timeout=20) as client:
        uow = client.unit_of_work("life.queue", lifetime=4.0)
        uow.add(b"short-lived")
        await uow.commit()
        created = (await client.uow_status(uow.uow_id)).created_at
        await client.publish("ttl.queue", b"time-to-live 4 s on the pseudo-clock")
        await asyncio.sleep(1.0)
        await client.change_persistent_store("disconnect", "default", "lifetimes")
        clocks = {name: st.uow_clock for name in cluster.names if (st := await cluster.status(name)) is not None}
        # Unavailable for longer than both lifetimes: the pseudo-clock stands still at every member.
        await asyncio.sleep(5.0)
        assert {name: st.uow_clock for name in cluster.names if (st := await cluster.status(name)) is not None} \
            == clocks
        await client.change_persistent_store("connect", "default")
        connected = time.monotonic()
        status = await client.uow_status(uow.uow_id)
        assert status.status == "ACCEPTED" and status.clock - created < 4.0, status
        assert await _pending(cluster, leader, "ttl.queue") == 1
        # Once the store is connected the clock runs on: both expire after the rest of their lifetime.

        async def timed_out() -> bool:
            return (await client.uow_status(uow.uow_id)).status == "TIMEOUT"

        await wait_for(timed_out, timeout=20)
        assert time.monotonic() - connected >= 4.0 - (status.clock - created) - 1.0

        async def expired() -> bool:
            return await _pending(cluster, leader, "ttl.queue") == 0

        await wait_for(expired, timeout=20)
        await client.change_persistent_store("allow-new", "default")


CAPACITY = "    persistent_store:\n      capacity_messages: 20\n"


@pytest.mark.slow
async def test_over_its_capacity_the_store_takes_no_new_units_of_work_by_itself(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(cluster_extra=CAPACITY, extra_stores=SHARED_STORES,
                                    extra_destinations=SHARED_DESTINATIONS)
    leader = await cluster.leader()
    async with Client(cluster.addresses(), timeout=20) as client:
        # A non-replicated store's messages are not in the persistent store: they do not count.
        sub = await client.subscribe("volatile.t", "v")
        for i in range(30):
            await client.publish("volatile.t", f"v{i}".encode())
        stored = 0
        refusal: NoNewUow | None = None
        for i in range(200):
            try:
                await client.publish("cap.queue", f"m{i}".encode())
                stored += 1
            except NoNewUow as err:
                refusal = err
                break
            await asyncio.sleep(0.02)
        assert refusal is not None and 20 < stored < 60, stored
        assert "capacity exceeded" in refusal.message and refusal.metadata["cause"] == "capacity"
        ps = await client.persistent_store()
        assert (ps.state, ps.cause) == (apb.PERSISTENT_STORE_STATE_NO_NEW_UOW, apb.PERSISTENT_STORE_CAUSE_CAPACITY)
        assert ps.reason.startswith("capacity exceeded: ") and ps.reason.endswith("over the capacity of 20"), ps
        assert ps.over_capacity == f"{stored} messages held, over the capacity of 20"
        assert ps.messages == stored and ps.capacity_messages == 20 and ps.changed_by == leader
        assert "over its capacity" in cluster.log_path(leader).read_text()
        # Still over its capacity: allowing new units of work is refused, nothing changes.
        with pytest.raises(StoreStateError, match="still over its capacity"):
            await client.change_persistent_store("allow-new", "default")
        assert (await client.persistent_store()).state == apb.PERSISTENT_STORE_STATE_NO_NEW_UOW
        # Consumers drain it below its capacity; then an operator lifts the state.
        drain = await client.subscribe("cap.queue")
        for _ in range(stored - 10):
            msg = await drain.next(timeout=10)
            await drain.ack(msg)

        async def within() -> bool:
            return not (await client.persistent_store()).over_capacity

        await wait_for(within, timeout=10)
        assert (await client.change_persistent_store("allow-new", "default")).state == \
            apb.PERSISTENT_STORE_STATE_AVAILABLE
        assert (await client.publish("cap.queue", b"again")).stored
        assert (await sub.next(timeout=5)).body == b"v0"
