"""Membership changes while a cluster serves: grow 3 -> 5 and shrink 5 -> 3 under confirmed
publishing, a removed member that no longer counts, and a leader killed in the middle of a change.

Real etcd, real member processes, a real client. A change is a realm version with another
member list (stored in etcd as the realm service does, or through `strongroom cluster` on a
deployment `strongroom up` started); the leader carries it out one member at a time and its
status names the voters (`persistence/reconfig.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harness import (
    Cluster,
    drain_all,
    local_strongroom,
    put_realm,
    put_realm_sync,
    realm_yaml,
    wait_for,
)

from strongroom.client import Client
from strongroom.errors import StrongroomError
from strongroom.etcd import EtcdClient
from strongroom.keys import voters_key
from strongroom.local.etcdproc import start_etcd
from strongroom.local.launcher import (
    current_realm,
    live_pids,
    load_state,
    start_realm_service,
    wait_realm_service,
)
from strongroom.local.process import stop_processes

pytestmark = pytest.mark.slow

TOPIC = "payments"
DURABLE = "audit"


def realm_of(names: list[str]) -> str:
    """The test realm with exactly these members."""
    text = realm_yaml(members=5)
    lines = [f"      - name: m{i}\n" for i in range(1, 6)]
    at = text.index(lines[0])
    return text[:at] + "".join(f"      - name: {n}\n" for n in names) + text[at + sum(map(len, lines)):]


async def voters_are(cluster: Cluster, names: list[str], timeout: float = 120.0) -> str:
    """The member that leads once its status names `names` as the voters with no change under
    way (a leader of the members running)."""
    found: list[str] = []

    async def done() -> bool:
        for name in cluster.procs:
            if cluster.procs[name].poll() is not None:
                continue
            st = await cluster.status(name)
            if st is not None and st.role == "leader" and list(st.voters) == names and not st.membership_change:
                found[:] = [name]
                return True
        return False
    try:
        await wait_for(done, timeout=timeout)
    except TimeoutError:
        states = {n: await cluster.status(n) for n in cluster.procs if cluster.procs[n].poll() is None}
        raise AssertionError(f"no leader with the voters {names} in {timeout} s: {states}\n{cluster.logs()}") from None
    return found[0]


class Producer:
    """Confirmed publishes of 0, 1, 2 ... to the topic until stopped; what was confirmed."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.confirmed: list[int] = []
        self.sent = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        pub = self.client.publisher(TOPIC, window=16)
        try:
            while not self._stop.is_set():
                i = self.sent
                fut = await pub.send(str(i).encode())
                fut.add_done_callback(lambda f, i=i: self.confirmed.append(i) if not f.exception() else None)
                self.sent += 1
                await asyncio.sleep(0.002)
            await pub.flush()
        finally:
            await pub.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Producer]:
        self._task = asyncio.create_task(self._run())
        try:
            yield self
        finally:
            self._stop.set()
            await self._task

    async def until(self, more: int) -> None:
        """Until `more` further publishes are confirmed."""
        goal = len(self.confirmed) + more
        await wait_for(lambda: asyncio.sleep(0, len(self.confirmed) >= goal), timeout=60)


@contextlib.asynccontextmanager
async def cluster_of(tmp_path: Path, started: list[str]) -> AsyncIterator[tuple[str, Cluster]]:
    """etcd and a cluster of up to five members (m1 to m5, free ports), the realm naming and the
    processes running `started`, once it has a leader: (etcd endpoint, cluster)."""
    etcd = start_etcd(tmp_path / "etcd")
    cluster = Cluster(etcd.endpoint, tmp_path, members=5)
    try:
        put_realm_sync(etcd.endpoint, realm_of(started), 1)
        for name in started:
            cluster.start(name)
        await cluster.leader()
        yield etcd.endpoint, cluster
    finally:
        for name, proc in cluster.procs.items():
            if proc.poll() is None:
                cluster.kill(name, signal.SIGCONT)
        cluster.stop_all()
        etcd.stop()


@contextlib.asynccontextmanager
async def publishing(cluster: Cluster) -> AsyncIterator[Producer]:
    """A producer confirming publishes to the topic while the block runs; once it ends (without
    an error), every publish must have ended confirmed and the topic's durable must hold each
    exactly once, in order."""
    async with Client(cluster.addresses(), timeout=30) as client:
        await (await client.subscribe(TOPIC, DURABLE)).close()
        producer = Producer(client)
        async with producer.running():
            yield producer
        assert sorted(producer.confirmed) == list(range(producer.sent)), "every publish must end confirmed"
        got = [int(m.body) for m in await drain_all(client, TOPIC, DURABLE)]
        assert got == list(range(producer.sent)), "lost, duplicated or reordered"


async def test_a_cluster_grows_from_three_to_five_and_shrinks_to_three_while_confirming(tmp_path: Path) -> None:
    async with cluster_of(tmp_path, ["m1", "m2", "m3"]) as (etcd, cluster):
        async with publishing(cluster) as producer:
            await producer.until(200)
            await put_realm(etcd, realm_of(["m1", "m2", "m3", "m4", "m5"]), 2)
            cluster.start("m4")
            cluster.start("m5")
            leader = await voters_are(cluster, ["m1", "m2", "m3", "m4", "m5"])
            st = await cluster.status(leader)
            assert st is not None and all(m.voter for m in st.members), st
            await producer.until(200)
            # Shrink, removing the leader itself and one more of the first three.
            removed = [leader] + [n for n in ("m1", "m2", "m3") if n != leader][:1]
            kept = [n for n in ("m1", "m2", "m3", "m4", "m5") if n not in removed]
            await put_realm(etcd, realm_of(kept), 3)
            assert await voters_are(cluster, kept) in kept
            for name in removed:
                cluster.kill(name, signal.SIGTERM)
            await producer.until(200)
        # The new members hold everything: the same applied state as the leader.
        top = await cluster.status(await cluster.leader())

        async def applied() -> bool:
            sts = [await cluster.status(n) for n in ("m4", "m5")]
            return top is not None and all(s is not None and s.applied_index >= top.commit_index for s in sts)
        await wait_for(applied, timeout=30)


async def test_without_a_voters_record_the_members_with_state_count_beside_a_realm_that_grew(tmp_path: Path) -> None:
    """etcd holds no voters record (a cluster of a version before it, or a record lost with
    etcd's data) and the realm already names two new members (an upgrade that also grew the
    cluster). A member that is behind and the two new, empty ones are three of the realm's five,
    but only one of the three members that hold state: they must not elect a leader that lacks
    what was confirmed. Once a member holding it is back, a leader is elected, nothing is lost,
    and it writes the record with the realm's five."""
    async with cluster_of(tmp_path, ["m1", "m2", "m3"]) as (etcd, cluster):
        first = await voters_are(cluster, ["m1", "m2", "m3"])
        behind = next(n for n in ("m1", "m2", "m3") if n != first)
        async with Client(cluster.addresses(), timeout=30) as client:
            await (await client.subscribe(TOPIC, DURABLE)).close()
            await client.publish(TOPIC, b"before")
            # Two acknowledgments confirm "before": wait until `behind` holds it as well, so
            # it is one of the three members with state (on a loaded machine it may not be yet).
            top = await cluster.status(first)
            assert top is not None and top.role == "leader", top

            async def behind_holds_it() -> bool:
                st = await cluster.status(behind)
                return st is not None and st.last_index >= top.commit_index
            await wait_for(behind_holds_it, timeout=30)
            cluster.kill(behind, signal.SIGKILL)
            for i in range(20):  # confirmed by the two members left, not by `behind`
                assert (await client.publish(TOPIC, str(i).encode())).confirmed
        for name in ("m1", "m2", "m3"):
            if cluster.procs[name].poll() is None:
                cluster.kill(name, signal.SIGKILL)
        client_etcd = EtcdClient(etcd)
        try:
            assert await client_etcd.delete(voters_key("default")) == 1
        finally:
            await client_etcd.close()
        await put_realm(etcd, realm_of(["m1", "m2", "m3", "m4", "m5"]), 2)
        for name in (behind, "m4", "m5"):
            cluster.start(name)
        for _ in range(16):  # 4 lease TTLs: time for several elections
            for name in (behind, "m4", "m5"):
                st = await cluster.status(name)
                assert st is None or st.role != "leader", f"{name} leads without the confirmed messages: {st}"
            await asyncio.sleep(0.5)
        # The first of them elected wrote down the three with state before sending any entry.
        client_etcd = EtcdClient(etcd)
        try:
            async def holders_written() -> bool:
                kv = await client_etcd.get(voters_key("default"))
                return kv is not None and json.loads(kv.value).get("also") == ["m1", "m2", "m3"]
            await wait_for(holders_written, timeout=30)
        finally:
            await client_etcd.close()
        cluster.start(first)
        await voters_are(cluster, ["m1", "m2", "m3", "m4", "m5"])
        async with Client(cluster.addresses(), timeout=30) as client:
            got = [m.body for m in await drain_all(client, TOPIC, DURABLE)]
        assert got == [b"before", *(str(i).encode() for i in range(20))], "lost, duplicated or reordered"


async def test_a_removed_member_no_longer_counts_toward_a_majority(tmp_path: Path) -> None:
    async with cluster_of(tmp_path, ["m1", "m2", "m3", "m4", "m5"]) as (etcd, cluster):
        await voters_are(cluster, ["m1", "m2", "m3", "m4", "m5"])
        # m4 and m5 leave the realm but their processes go on (no one stopped them).
        await put_realm(etcd, realm_of(["m1", "m2", "m3"]), 2)
        leader = await voters_are(cluster, ["m1", "m2", "m3"])
        assert leader in ("m1", "m2", "m3")
        for name in ("m4", "m5"):
            st = await cluster.status(name)
            assert st is not None and st.role == "follower" and list(st.voters) == ["m1", "m2", "m3"], st
        others = [n for n in ("m1", "m2", "m3") if n != leader]
        async with Client([cluster.address(leader)], timeout=4) as client:
            await client.publish(TOPIC, b"before")
            # The leader and the two removed members are three of the five there were: no
            # majority of the voters, so nothing commits.
            for name in others:
                cluster.kill(name, signal.SIGSTOP)
            with pytest.raises((StrongroomError, TimeoutError)):
                await client.publish(TOPIC, b"without a majority")
        for name in others:
            cluster.kill(name, signal.SIGCONT)
        # A removed member never leads: with the leader gone, one of the two voters left does.
        cluster.kill(leader, signal.SIGKILL)
        new = await cluster.leader(exclude=leader, timeout=60)
        assert new in others, new
        async with Client(cluster.addresses(), timeout=30) as client:
            await client.publish(TOPIC, b"after")


async def test_a_leader_killed_in_the_middle_of_a_change_leaves_it_to_the_next_leader(tmp_path: Path) -> None:
    async with cluster_of(tmp_path, ["m1", "m2", "m3"]) as (etcd, cluster), publishing(cluster) as producer:
        await producer.until(100)
        await put_realm(etcd, realm_of(["m1", "m2", "m3", "m4", "m5"]), 2)
        cluster.start("m4")  # m5 is not started yet: the change stops half way, at 4 voters

        async def half_way() -> bool:
            st = await cluster.status(await cluster.leader())
            return (st is not None and list(st.voters) == ["m1", "m2", "m3", "m4"]
                    and st.membership_change.startswith("adding m5"))
        await wait_for(half_way, timeout=120)
        old = await cluster.leader()
        cluster.kill(old, signal.SIGKILL)
        await cluster.leader(exclude=old, timeout=60)
        await producer.until(100)
        cluster.start("m5")
        await voters_are(cluster, ["m1", "m2", "m3", "m4", "m5"])
        cluster.start(old)
        await producer.until(100)


def strongroom(*args: str) -> subprocess.CompletedProcess[str]:
    return local_strongroom(*args, timeout=300.0)


async def test_strongroom_cluster_add_and_remove_member_on_a_local_deployment(tmp_path: Path) -> None:
    data = tmp_path / "local"
    up = await asyncio.to_thread(strongroom, "up", "--detach", "--data-dir", str(data))
    state: dict[str, Any] | None = load_state(data)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        grow = await asyncio.to_thread(strongroom, "cluster", "add-member", "default", "m4", "m5",
                                       "--data-dir", str(data), "--json")
        assert grow.returncode == 0, grow.stdout + grow.stderr
        report = json.loads(grow.stdout)
        assert report["voters"] == ["m1", "m2", "m3", "m4", "m5"] and report["added"] == ["m4", "m5"], report
        state = load_state(data)
        assert state is not None and sorted(state["clusters"]["default"]["members"]) == ["m1", "m2", "m3", "m4", "m5"]
        # An even member count is refused by the realm, with its reason, and changes nothing.
        odd = await asyncio.to_thread(strongroom, "cluster", "remove-member", "default", "m5", "--data-dir", str(data))
        assert odd.returncode == 1 and "odd" in odd.stderr, odd.stdout + odd.stderr
        again = await asyncio.to_thread(strongroom, "cluster", "add-member", "default", "m4", "m6",
                                        "--data-dir", str(data))
        assert again.returncode == 1 and "already a member" in again.stderr, again.stdout + again.stderr
        pid_m1 = state["clusters"]["default"]["members"]["m1"]["pid"]
        shrink = await asyncio.to_thread(strongroom, "cluster", "remove-member", "default", "m1", "m2",
                                         "--data-dir", str(data), "--json")
        assert shrink.returncode == 0, shrink.stdout + shrink.stderr
        assert json.loads(shrink.stdout)["voters"] == ["m3", "m4", "m5"]
        state = load_state(data)
        assert state is not None and sorted(state["clusters"]["default"]["members"]) == ["m3", "m4", "m5"]
        assert pid_m1 not in [pid for _, pid in live_pids(state)]
        status = await asyncio.to_thread(strongroom, "status", "--json", "--data-dir", str(data))
        assert status.returncode == 0, status.stderr
        publish = await asyncio.to_thread(strongroom, "publish", "orders.queue", "--count", "5", "--data-dir",
                                          str(data), "--json")
        assert publish.returncode == 0, publish.stdout + publish.stderr
    finally:
        await asyncio.to_thread(strongroom, "down", "--data-dir", str(data))
        for st in (state, load_state(data)):
            for _, pid in live_pids(st or {}):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if state is not None:
            for member in state["clusters"]["default"]["members"].values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(member["pid"]), signal.SIGKILL)


def realm_at(cluster: Cluster, names: list[str]) -> str:
    """The test realm with these members at their addresses, as the Helm chart writes it."""
    text = realm_of(names)
    for name in names:
        text = text.replace(f"      - name: {name}\n", f"      - name: {name}\n        address: {cluster.address(name)}\n")
    return text


def sync_members(realm_address: str, file: Path, wait: str) -> dict[str, Any]:
    """`strongroom cluster sync-members` as the chart's hook Jobs run it; its --json report."""
    done = local_strongroom("cluster", "sync-members", str(file), "--realm-address", realm_address,
                            "--wait", wait, "--timeout", "180", "--json", timeout=240.0)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


async def test_the_charts_upgrade_steps_grow_and_shrink_a_cluster_while_it_confirms(tmp_path: Path) -> None:
    """What `helm upgrade` with a new member count does (deploy/helm: the pre-upgrade members
    Job, the StatefulSet's scaling, the post-upgrade realm-apply Job), with processes for pods:
    the member lists go in first; added members start; the voters become the new members;
    removed members stop only once they no longer count."""
    async with cluster_of(tmp_path, ["m1", "m2", "m3"]) as (etcd, cluster):
        put_realm_sync(etcd, realm_at(cluster, ["m1", "m2", "m3"]), 2)
        service = start_realm_service(etcd, tmp_path / "realm")
        try:
            await wait_realm_service(service, timeout=60)
            file = tmp_path / "realm.yaml"
            async with publishing(cluster) as producer:
                await producer.until(100)
                # Grow: the pods of m4 and m5 do not exist when the pre-upgrade hook runs.
                file.write_text(realm_at(cluster, ["m1", "m2", "m3", "m4", "m5"]))
                pre = await asyncio.to_thread(sync_members, service.address, file, "removed")
                assert [(c["added"], c["removed"], c["voters"]) for c in pre["clusters"]] == [
                    (["m4", "m5"], [], [])], pre
                stored = await current_realm(service.address)
                assert stored is not None and int(stored.version) == pre["realm_version"] > 2
                assert [n for n in ("m4", "m5") if f"name: {n}" in stored.yaml] == ["m4", "m5"]
                cluster.start("m4")
                cluster.start("m5")
                post = await asyncio.to_thread(sync_members, service.address, file, "all")
                assert post["realm_version"] == pre["realm_version"], "nothing more to change"
                assert post["clusters"][0]["voters"] == ["m1", "m2", "m3", "m4", "m5"], post
                await producer.until(100)
                # Shrink: the hook returns once m4 and m5 no longer count, and only then do
                # their pods go.
                file.write_text(realm_at(cluster, ["m1", "m2", "m3"]))
                pre = await asyncio.to_thread(sync_members, service.address, file, "removed")
                assert pre["clusters"][0]["removed"] == ["m4", "m5"], pre
                leader = await cluster.leader()
                st = await cluster.status(leader)
                assert st is not None and list(st.voters) == ["m1", "m2", "m3"] and leader in ("m1", "m2", "m3"), st
                cluster.kill("m4", signal.SIGTERM)
                cluster.kill("m5", signal.SIGTERM)
                await producer.until(100)
                post = await asyncio.to_thread(sync_members, service.address, file, "all")
                assert post["clusters"][0]["voters"] == ["m1", "m2", "m3"], post
            # A file the realm refuses (an even member count) changes nothing.
            before = await current_realm(service.address)
            file.write_text(realm_at(cluster, ["m1", "m2"]))
            refused = await asyncio.to_thread(local_strongroom, "cluster", "sync-members", str(file),
                                              "--realm-address", service.address, "--wait", "none")
            assert refused.returncode == 1 and "odd" in refused.stderr, refused.stdout + refused.stderr
            after = await current_realm(service.address)
            assert before is not None and after is not None and after.version == before.version
        finally:
            stop_processes([service.process] if service.process else [service.pid], grace=10)
