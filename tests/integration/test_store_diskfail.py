"""Members whose own storage fails (docs/store-operations.md, "A member whose storage fails") on
a real 3-member cluster: real etcd, real member processes over gRPC, real RocksDB, each member's
data dir on its own small tmpfs that the test fills up the way the chaos suite's `disk-full`
faults do (`strongroom.chaos.faults.fill_disk`). Under mixed persistent and non-persistent load:

- one follower's disk full: the others still form a majority, the store stays available and the
  leader's status names the follower that cannot store;
- then the leader's disk full too: fewer than a majority can store, the leader stays (no
  election), the store is unavailable at once (cause disk, both members and why in
  `strongroom store status` and `strongroom status`), persistent commands are refused at once
  with PSTORE_UNAVAILABLE while the non-persistent work goes on without an error;
- the disks freed: the store takes no new units of work by itself, an operator allows them,
  persistent publishing resumes;
- then a majority's disks (both followers) full with the leader's fine: unavailable at once,
  freed, resumed;
- nothing a publisher was told was stored is lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness import (
    SHARED_DESTINATIONS,
    SHARED_STORES,
    Cluster,
    MixedLoad,
    put_realm,
    realm_yaml,
    refused_at_once,
    strongroom,
    wait_for,
)

from strongroom.api.v1 import admin_pb2 as apb
from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import messaging_pb2_grpc as mgrpc
from strongroom.chaos.cluster import mount_tmpfs, unmount
from strongroom.chaos.faults import fill_disk, free_disk
from strongroom.client import Client, Received, RetryPolicy
from strongroom.local.etcdproc import start_etcd
from strongroom.channels import open_channel

pytestmark = pytest.mark.slow

UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, "PSTORE_UNAVAILABLE")


def store_status(servers: str) -> Any:
    done = strongroom(servers, "store", "status", "--cluster", "default", "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def state_is(cluster: Cluster, leader: str, state: str) -> Any:
    """A predicate for `wait_for`: the leader's status shows the store in `state` (asked over
    gRPC: the CLI would hold the test's event loop, and its load, while it runs)."""
    async def check() -> bool:
        st = await cluster.status(leader)
        return st is not None and apb.PersistentStoreState.Name(st.persistent_store.state) == \
            f"PERSISTENT_STORE_STATE_{state}"
    return check


async def says_cannot_store(cluster: Cluster, leader: str, member: str) -> bool:
    st = await cluster.status(leader)
    return st is not None and any(m.name == member and m.cannot_store for m in st.members)


async def says_can_store(cluster: Cluster, member: str) -> bool:
    st = await cluster.status(member)
    return st is not None and any(m.name == member and not m.cannot_store for m in st.members)


async def test_disks_full_under_mixed_load(tmp_path: Path) -> None:  # noqa: PLR0915
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    etcd = start_etcd(tmp_path / "etcd")
    cluster = Cluster(etcd.endpoint, tmp_path)
    mounted: list[Path] = []
    loop = asyncio.get_running_loop()
    try:
        await put_realm(etcd.endpoint, realm_yaml(lease_ttl=2, extra_stores=SHARED_STORES,
                                                  extra_destinations=SHARED_DESTINATIONS), 1)
        for name in cluster.names:
            reason = mount_tmpfs(cluster.data_dir(name), 64)
            if reason is not None:
                pytest.skip(f"mount -t tmpfs is not permitted here: {reason}")
            mounted.append(cluster.data_dir(name))
        cluster.start_all()
        leader = await cluster.leader()
        f1, f2 = [n for n in cluster.names if n != leader]
        servers = ",".join(cluster.addresses())
        channel = open_channel(cluster.address(leader), [])
        messaging = mgrpc.MessagingServiceStub(channel)
        addresses = cluster.addresses()
        async with Client(addresses, timeout=20) as admin, Client(addresses, timeout=20) as volatile, \
                Client(addresses, retry=RetryPolicy(timeout=0.5)) as producer:
            confirmed = [(await producer.publish("disk.queue", f"before {i}".encode())).message_seq
                         for i in range(10)]
            load = MixedLoad(volatile, producer, "disk.queue", confirmed, pad=b"p" * 2048)
            np_got, np_errors, p_outcomes = load.np_got, load.np_errors, load.p_outcomes

            async def stored_since(since: float) -> bool:
                return load.stored_since(since)

            async def allow_new() -> None:
                await wait_for(state_is(cluster, leader, "NO_NEW_UOW"), timeout=20)

                async def every_member_stores() -> bool:  # a majority flips the state; the rest follow
                    return not store_status(servers).get("cannot_store")
                await wait_for(every_member_stores, timeout=20)
                ps = store_status(servers)
                assert ps["cause"] == "PERSISTENT_STORE_CAUSE_DISK" and not ps.get("cannot_store"), ps
                done = strongroom(servers, "store", "allow-new", "--cluster", "default", "--json")
                assert done.returncode == 0, done.stdout
                allowed = time.monotonic()
                await wait_for(lambda: stored_since(allowed), timeout=15)

            await load.start()
            try:
                await asyncio.sleep(1.0)
                assert await stored_since(0) and np_got

                # One follower's disk full: the others are a majority, the store stays available.
                await loop.run_in_executor(None, fill_disk, cluster.data_dir(f1))
                await wait_for(lambda: says_cannot_store(cluster, leader, f1), timeout=10)
                mark = time.monotonic()
                await wait_for(lambda: stored_since(mark), timeout=10)
                assert await state_is(cluster, leader, "AVAILABLE")()

                # The leader's disk full too: one member of three can store. Unavailable at once.
                await loop.run_in_executor(None, fill_disk, cluster.data_dir(leader))
                filled = time.monotonic()
                await wait_for(state_is(cluster, leader, "UNAVAILABLE"), timeout=10)
                became = time.monotonic() - filled
                assert await refused_at_once(lambda: messaging.Publish(mpb.PublishRequest(
                    destination="disk.queue", message=cpb.Message(body=b"x")), timeout=10)) == UNAVAILABLE
                ps = store_status(servers)
                assert ps["cause"] == "PERSISTENT_STORE_CAUSE_DISK" and ps["changed_by"] == leader, ps
                assert {m["member"] for m in ps["cannot_store"]} == {leader, f1}, ps
                assert all("cannot write its storage" in m["cannot_store"] and m["since"] > 0
                           for m in ps["cannot_store"]), ps
                text = strongroom(servers, "status").stdout
                assert f"{leader}: CANNOT STORE since " in text and f"{f1}: CANNOT STORE since " in text, text
                assert "persistent store: UNAVAILABLE since " in text, text
                window = time.monotonic()
                await asyncio.sleep(3.0)
                # The leader stayed (no election); persistent refused, non-persistent went on.
                assert await cluster.leader() == leader
                assert np_errors == [] and sum(1 for t in np_got if t > window) >= 10, (np_errors, len(np_got))
                refused = {o for t, o in p_outcomes if t > filled + became + 0.6}
                assert refused == {"PSTORE_UNAVAILABLE"}, refused

                # Space back: no new units of work by itself, then allowed: persistent work resumes.
                # (The leader's first: a leader that cannot store while the others can hands over.)
                free_disk(cluster.data_dir(leader))
                await wait_for(lambda: says_can_store(cluster, leader), timeout=10)
                free_disk(cluster.data_dir(f1))
                await allow_new()

                # A majority's disks (both followers) full, the leader's fine: unavailable at once.
                await loop.run_in_executor(None, fill_disk, cluster.data_dir(f1))
                await loop.run_in_executor(None, fill_disk, cluster.data_dir(f2))
                filled = time.monotonic()
                await wait_for(state_is(cluster, leader, "UNAVAILABLE"), timeout=10)
                assert await refused_at_once(lambda: messaging.Publish(mpb.PublishRequest(
                    destination="disk.queue", message=cpb.Message(body=b"x")), timeout=10)) == UNAVAILABLE
                assert {m["member"] for m in store_status(servers)["cannot_store"]} == {f1, f2}
                window = time.monotonic()
                await asyncio.sleep(2.0)
                assert np_errors == [] and sum(1 for t in np_got if t > window) >= 5, (np_errors, len(np_got))
                free_disk(cluster.data_dir(f1))
                free_disk(cluster.data_dir(f2))
                await allow_new()
                assert await cluster.leader() == leader
            finally:
                await load.stop()
                await channel.close()
            # Nothing confirmed was lost: every message a publisher was told was stored arrives.
            received: list[Received] = []
            drain = await admin.subscribe("disk.queue")
            while not set(confirmed) <= {m.seq for m in received}:
                try:
                    msg = await drain.next(timeout=10)
                except TimeoutError:
                    break
                received.append(msg)
                await drain.ack(msg)
            assert set(confirmed) <= {m.seq for m in received}, sorted(set(confirmed) - {m.seq for m in received})
            assert np_errors == []
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for name in cluster.names:
            cluster.kill(name, signal.SIGKILL)
        for path in mounted:
            unmount(path)
        etcd.stop()
