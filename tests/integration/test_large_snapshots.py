"""A state many times larger than the largest gRPC message travels and rests as a snapshot's
parts: a follower with an empty disk takes it, the whole cluster restarts from it, and a
recovering leader can read it (FetchSnapshot).

The members here take gRPC messages of at most 4 MiB (`STRONGROOM_MAX_MESSAGE_BYTES`) and close
a snapshot part at 256 KiB (`STRONGROOM_SNAPSHOT_PART_BYTES`), with a state of about 20 MB:
sent or stored in one message, as before parts, it would be refused by gRPC. The same bound
is what keeps a state of more than 2 GiB (protobuf's limit for one message) parseable: no step
here parses more than one part at a time, whatever the state's size.
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest

from harness import Cluster, drain_all, tls_as, wait_for
from strongroom.client import Client
from strongroom.persistence.snapshots import IncomingSnapshot, restore_parts
from strongroom.persistence.transport import PeerClient
from strongroom.security import tls
from strongroom.security.identity import Kind

MESSAGES = 2500
BODY = 8 * 1024
MAX_MESSAGE = 4 * 1024 * 1024


@pytest.fixture
def small_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Members started from here on take messages of at most 4 MiB and write 256 KiB parts."""
    monkeypatch.setenv("STRONGROOM_MAX_MESSAGE_BYTES", str(MAX_MESSAGE))
    monkeypatch.setenv("STRONGROOM_SNAPSHOT_PART_BYTES", str(256 * 1024))


def _body(i: int) -> bytes:
    return f"{i:08d}".encode() + bytes(BODY - 8)


async def _pending(cluster: Cluster, name: str) -> int | None:
    st = await cluster.status(name)
    if st is None:
        return None
    queues = [d for s in st.stores for d in s.durables if d.destination == "parts.queue"]
    return queues[0].pending_messages if queues else 0


@pytest.mark.slow
@pytest.mark.parametrize("indexes_on_disk", [False, True], ids=["memory-state", "indexes-on-disk"])
async def test_a_state_larger_than_a_message_catches_up_restarts_and_is_fetched(  # type: ignore[no-untyped-def]
        make_cluster, small_messages: None, tmp_path: Path, indexes_on_disk: bool) -> None:
    cluster: Cluster = make_cluster(compact_after_entries=100, indexes_on_disk=indexes_on_disk)
    leader = await cluster.leader()
    client = Client(cluster.addresses(), timeout=30)
    pub = client.publisher("parts.queue", window=32)
    await asyncio.gather(*[await pub.send(_body(i)) for i in range(MESSAGES)])
    await pub.close()

    # A follower with an empty disk takes the leader's state in parts.
    wiped = next(n for n in cluster.names if n != leader)
    cluster.kill(wiped, signal.SIGKILL)
    for i in range(250):  # entries enough for the leader to compact what the wiped one lacks
        await client.publish("parts.side", b"%d" % i)

    async def compacted() -> bool:
        st = await cluster.status(leader)
        return bool(st and st.snapshot_index >= 100)

    await wait_for(compacted)
    cluster.start(wiped, wipe=True)

    async def caught_up() -> bool:
        st = await cluster.status(wiped)
        return bool(st and st.synced) and await _pending(cluster, wiped) == MESSAGES

    await wait_for(caught_up, timeout=90)
    installed = re.findall(r"installed snapshot at index \d+ from \S+ \((\d+) parts, (\d+) bytes\)",
                           cluster.log_path(wiped).read_text())
    assert installed, "the wiped follower caught up without a snapshot"
    parts, size = map(int, installed[-1])
    assert size > 4 * MAX_MESSAGE and parts > size // MAX_MESSAGE, installed

    # A recovering leader's read of a member's state: the same parts, over FetchSnapshot.
    st = await cluster.status(leader)
    assert st is not None
    peers = PeerClient()
    incoming = IncomingSnapshot(tmp_path / "fetched")
    ours = tls.current()
    tls.use(tls_as(Kind.MEMBER, wiped))  # the replication service answers members only
    try:
        first = await peers.fetch_snapshot(cluster.address(leader), st.epoch, incoming)
        assert len(incoming) > 1 and incoming.size > 4 * MAX_MESSAGE
        state = restore_parts(incoming)
        assert state.applied_index == first.last_index > 0
        assert len(state.messages) == MESSAGES
        assert sorted(m.message.body[:8] for m in state.messages.values()) == [_body(i)[:8] for i in range(MESSAGES)]
    finally:
        tls.use(ours)
        incoming.discard()
        await peers.close()

    # Every member restarts from its stored parts (or its indexes), and nothing is lost or doubled.
    for name in cluster.names:
        cluster.kill(name, signal.SIGKILL)
    cluster.start_all()
    await cluster.leader()
    got = [m.body for m in await drain_all(client, "parts.queue")]
    assert [b[:8] for b in got] == [_body(i)[:8] for i in range(MESSAGES)]
    await client.close()


@pytest.mark.slow
@pytest.mark.parametrize("indexes_on_disk", [False, True], ids=["memory-state", "indexes-on-disk"])
async def test_a_recovering_leader_behind_a_compacted_member_takes_its_state_in_parts(  # type: ignore[no-untyped-def]
        make_cluster, small_messages: None, indexes_on_disk: bool) -> None:
    """A member that missed what the others compacted is elected after both stopped; the one of
    them that comes back holds the state as parts: the new leader reads them over FetchSnapshot,
    installs them and serves every message once."""
    cluster: Cluster = make_cluster(compact_after_entries=100, indexes_on_disk=indexes_on_disk)
    leader = await cluster.leader()
    behind, ahead = [n for n in cluster.names if n != leader]
    client = Client(cluster.addresses(), timeout=30)
    await client.publish("parts.side", b"before")

    async def holds_it() -> bool:
        st = await cluster.status(behind)
        return bool(st and st.applied_index >= 2 and st.synced)

    await wait_for(holds_it)
    cluster.kill(behind, signal.SIGKILL)
    pub = client.publisher("parts.queue", window=32)
    await asyncio.gather(*[await pub.send(_body(i)) for i in range(MESSAGES)])
    await pub.close()
    for i in range(250):
        await client.publish("parts.side", b"%d" % i)

    async def compacted() -> bool:
        st = await cluster.status(ahead)
        return bool(st and st.snapshot_index >= 100)

    await wait_for(compacted, timeout=60)
    await client.close()
    cluster.kill(leader, signal.SIGKILL)
    cluster.kill(ahead, signal.SIGKILL)

    # Alone, `behind` takes the leader key and waits for a majority's promises.
    cluster.start(behind)

    async def recovering() -> bool:
        st = await cluster.status(behind)
        return bool(st and st.role == "recovering")

    await wait_for(recovering, timeout=30)
    cluster.start(ahead)
    assert await cluster.leader(timeout=60) == behind
    adopted = re.findall(r"installed the state of (\S+) at index (\d+) \((\d+) parts, (\d+) bytes\)",
                         cluster.log_path(behind).read_text())
    assert adopted and adopted[-1][0] == ahead, "the recovering leader adopted no state in parts"
    assert int(adopted[-1][3]) > 4 * MAX_MESSAGE
    async with Client(cluster.addresses(), timeout=30) as again:
        got = [m.body for m in await drain_all(again, "parts.queue")]
        assert [b[:8] for b in got] == [_body(i)[:8] for i in range(MESSAGES)]
        assert (await again.publish("parts.queue", b"after")).confirmed
