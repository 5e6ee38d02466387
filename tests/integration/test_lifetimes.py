"""Lifetimes on the pseudo-clock, on a real 3-member cluster: a message's time-to-live does not
run while the cluster is down or leaderless (it survives a whole-cluster stop longer than
itself and a leader change, then expires after that much uptime), while a rule with
`ttl_clock: wall` keeps an absolute deadline; a durable unused for its rule's
`durable_expiry_seconds` is deleted, releasing its messages, while one with a subscriber
attached and a static one stay, as `strongroom durable list` shows."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import pytest
from harness import Cluster, registered_leader, wait_for

from strongroom.client import Client

TTL = 10.0
EXPIRY = 3.0
DESTINATIONS = f"""\
  - name: "pttl.*"
    kind: queue
    store: default
    ttl_seconds: {TTL}
  - name: "wttl.*"
    kind: queue
    store: default
    ttl_seconds: {TTL}
    ttl_clock: wall
  - name: "brief.*"
    store: exp
    durable_expiry_seconds: {EXPIRY}
"""
STORES = """\
  - name: exp
    cluster: default
    durables:
      - name: fixed
        destination: brief.fixed
"""


async def _pending(cluster: Cluster, member: str, queue: str) -> int:
    """Messages pending on a queue, as `member` (the leader) reports them."""
    st = await cluster.status(member)
    assert st is not None, f"{member} did not answer"
    return next(d.pending_messages for s in st.stores for d in s.durables if d.destination == queue and not d.name)


@pytest.mark.slow
async def test_a_time_to_live_on_the_pseudo_clock_survives_a_stop_and_a_leader_change(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(extra_stores=STORES, extra_destinations=DESTINATIONS)
    leader = await registered_leader(cluster)
    async with Client(cluster.addresses(), timeout=30) as client:
        await client.publish("wttl.q", b"wall clock")
        await client.publish("pttl.q", b"pseudo-clock")
        # Serving time the test sees, in three spans (each a little less than the leader served).
        served = [time.monotonic()]
        # A tick writes the clock into the log (every second while a time-to-live runs on it).
        await asyncio.sleep(1.5)
        assert await _pending(cluster, leader, "pttl.q") == 1
        assert await _pending(cluster, leader, "wttl.q") == 1
        served[0] = time.monotonic() - served[0]
        cluster.stop_all()
        # Down twice as long as the time-to-live.
        await asyncio.sleep(2 * TTL)
        cluster.start_all()
        leader = await cluster.leader()
        up = time.monotonic()
        # The pseudo-clock resumed where the log left it: the message is still there.
        assert await _pending(cluster, leader, "pttl.q") == 1

        # The wall-clock deadline passed while the cluster was down: it goes at once.
        async def wall_gone() -> bool:
            return await _pending(cluster, leader, "wttl.q") == 0

        await wait_for(wall_gone, timeout=5)
        # A leader change part of the way: the clock stands still while there is no leader.
        await asyncio.sleep(2.0)
        served.append(time.monotonic() - up)
        cluster.kill(leader)
        leader = await cluster.leader(exclude=leader)
        up = time.monotonic()
        assert await _pending(cluster, leader, "pttl.q") == 1

        async def pseudo_gone() -> bool:
            return await _pending(cluster, leader, "pttl.q") == 0

        await wait_for(pseudo_gone, timeout=30)
        served.append(time.monotonic() - up)
        # It expired after its time-to-live of serving time, not before: the spans the test
        # sees start once it found each leader (up to about 1 s after the leader began to serve),
        # and not much later: the clock loses at most about a tick at a stop and at a kill.
        assert TTL - 2.0 <= sum(served) <= TTL + 4.0, served


async def strongroom(cluster: Cluster, *argv: str) -> tuple[int, str, str]:
    """The `strongroom` command as a user runs it, `-s` naming the members: exit status, out, err."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "strongroom.cli.main", *argv, "-s", ",".join(cluster.addresses()),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def listed(cluster: Cluster) -> dict[str, Any]:
    """`strongroom durable list --store exp --json`, rows by durable name."""
    code, out, err = await strongroom(cluster, "durable", "list", "--store", "exp", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["clock"] > 0
    return {row["name"]: row for row in document["durables"]}


@pytest.mark.slow
async def test_a_durable_unused_for_its_expiry_is_deleted_and_one_in_use_is_not(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(extra_stores=STORES, extra_destinations=DESTINATIONS)
    leader = await registered_leader(cluster)
    async with Client(cluster.addresses(), timeout=30) as client:

        async def names() -> set[str]:
            return {d.name for d in (await client.list_durables(store="exp")).durables}

        idle = await client.subscribe("brief.idle", "idle")
        busy = await client.subscribe("brief.busy", "busy")
        await client.publish("brief.idle", b"1")
        await client.publish("brief.idle", b"2")
        await client.publish("brief.busy", b"3")
        await client.publish("brief.fixed", b"4")
        rows = await listed(cluster)
        assert set(rows) == {"idle", "busy", "fixed"}
        assert (rows["idle"]["kind"], rows["idle"]["pending_messages"], rows["idle"]["subscribers"],
                rows["idle"]["attached"], rows["idle"]["expiry_seconds"]) == ("standard", 2, 1, True, EXPIRY)
        # In use: it does not expire while a subscriber is attached.
        assert rows["idle"]["expires_in_seconds"] is None and rows["idle"]["last_used"] > 0
        # A static durable of the realm never expires.
        assert (rows["fixed"]["static"], rows["fixed"]["expiry_seconds"], rows["fixed"]["expires_in_seconds"],
                rows["fixed"]["pending_messages"]) == (True, 0, None, 1)

        closed = time.monotonic()
        await idle.close()

        async def idle_gone() -> bool:
            return "idle" not in await names()

        await wait_for(idle_gone, timeout=20)
        after = time.monotonic() - closed
        # Unused for its expiry of pseudo-clock (here: serving) time, then gone, soon after.
        assert EXPIRY - 0.1 <= after <= EXPIRY + 4.0, after
        # It released what only it held: the store keeps busy's and fixed's messages.
        status = await cluster.status(leader)
        assert status is not None
        assert next(s.messages for s in status.stores if s.name == "exp") == 2
        # The one with a subscriber attached stays, longer than the expiry after its creation.
        rows = await listed(cluster)
        assert set(rows) == {"busy", "fixed"}
        assert (rows["busy"]["subscribers"], rows["busy"]["attached"], rows["busy"]["expires_in_seconds"],
                rows["busy"]["pending_messages"]) == (1, True, None, 1)
        code, out, _ = await strongroom(cluster, "durable", "list", "--store", "exp")
        assert code == 0 and "busy" in out and "in use" in out, out

        # Its subscriber gone, it expires in turn.
        closed = time.monotonic()
        await busy.close()

        async def busy_gone() -> bool:
            return "busy" not in await names()

        await wait_for(busy_gone, timeout=20)
        assert time.monotonic() - closed >= EXPIRY - 0.1
        assert await names() == {"fixed"}
    code, _, err = await strongroom(cluster, "durable", "list", "--store", "nope")
    assert code == 1 and "UNKNOWN_STORE" in err and "no store 'nope' in cluster default" in err, err
