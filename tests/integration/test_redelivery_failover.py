"""A poison message's redelivery limit holds across a leader SIGKILL, on a real 3-member cluster:
the leader writes the delivery counts of durables with a redelivery limit into the log
(`DeliveryCountsOp`), so the next leader counts on from them and dead-letters the message after
its limit of deliveries, plus at most the deliveries of the last fraction of a second before the
kill (README, "Redelivery")."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest
from harness import Cluster, registered_leader

from strongroom.client import Client

LIMIT = 4
DESTINATIONS = f"""\
  - name: "poison.*"
    kind: queue
    store: default
    redelivery_limit: {LIMIT}
    dead_letter: poison-dead.queue
"""


@pytest.mark.slow
async def test_a_poison_message_is_dead_lettered_at_its_limit_across_a_leader_kill(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = make_cluster(extra_destinations=DESTINATIONS)
    leader = await registered_leader(cluster)
    seen: list[int] = []
    async with Client(cluster.addresses(), timeout=30) as client:
        published = await client.publish("poison.queue", b"poison")
        sub = await client.subscribe("poison.queue")
        for delivery in range(3):
            msg = await sub.next(timeout=10)
            assert msg.body == b"poison"
            seen.append(msg.delivery_count)
            if delivery < 2:
                await sub.nak(msg)  # delivered again at once
        # The third delivery stays in flight; the counts' round (every 0.2 s) is committed.
        await asyncio.sleep(1.0)
        cluster.kill(leader, signal.SIGKILL)
        await cluster.leader(exclude=leader)
        try:
            await sub.close()
        except Exception:  # noqa: BLE001 - its leader is gone
            pass
        sub = await client.subscribe("poison.queue")
        while True:
            try:
                msg = await sub.next(timeout=8)
            except TimeoutError:
                break  # dead-lettered: not delivered again
            assert msg.body == b"poison"
            seen.append(msg.delivery_count)
            await sub.nak(msg)
        await sub.close()
        dead = await client.subscribe("poison-dead.queue")
        moved = await dead.next(timeout=10)
        assert moved.body == b"poison"
        assert moved.fields["sr.dead_letter.seq"] == published.message_seq
        deliveries = moved.fields["sr.dead_letter.deliveries"]
        await dead.ack(moved)
        await dead.close()
    # The new leader counted on from the log: the third delivery is told as the third (a leader
    # that counted from scratch would say 1, and deliver the message LIMIT more times).
    assert seen == [1, 2, 3, 4], seen
    assert deliveries == LIMIT


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
