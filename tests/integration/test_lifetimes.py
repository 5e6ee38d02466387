"""Lifetimes on the pseudo-clock, on a real 3-member cluster: a message's time-to-live does not
run while the cluster is down or leaderless (it survives a whole-cluster stop longer than
itself and a leader change, then expires after that much uptime), while a rule with
`ttl_clock: wall` keeps an absolute deadline."""

from __future__ import annotations

import asyncio
import time

import pytest
from harness import Cluster, wait_for

from strongroom.client import Client

TTL = 10.0
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
"""


async def _pending(cluster: Cluster, member: str, queue: str) -> int:
    """Messages pending on a queue, as `member` (the leader) reports them."""
    st = await cluster.status(member)
    assert st is not None, f"{member} did not answer"
    return next(d.pending_messages for s in st.stores for d in s.durables if d.destination == queue and not d.name)


async def _registered(cluster: Cluster) -> str:
    """The leader, once it has heard every member register (and so knows that each reads log
    format 5: a member it has not heard from counts as an older version, and time-to-lives then
    stay on the wall clock)."""
    leader = await cluster.leader()

    async def heard() -> bool:
        st = await cluster.status(leader)
        return st is not None and all(m.replication for m in st.members if m.name != leader)

    await wait_for(heard, timeout=20)
    return leader


@pytest.mark.slow
async def test_a_time_to_live_on_the_pseudo_clock_survives_a_stop_and_a_leader_change(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(extra_destinations=DESTINATIONS)
    leader = await _registered(cluster)
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
