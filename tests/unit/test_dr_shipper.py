"""The DR service's shipping, its pure parts: the read-ahead that coalesces the primary's stream
batches into ShipEntries requests (bounded, a snapshot alone, heartbeats only when nothing waits,
the reader's failure after what it read), the lag in messages, and the reader's first member
(the shipping itself runs against real sites in tests/integration/test_dr_standby.py)."""

from __future__ import annotations

import asyncio

import pytest

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.dr.reader import CommittedReader
from strongroom.dr.shipper import ReadAhead
from strongroom.errors import DataCorruption
from strongroom.persistence.committed import CommittedBatch, Lag


def batch(first: int, count: int, size: int = 10, commit: int = 0, stored: int = 0) -> CommittedBatch:
    """`count` entries from `first`, each `size` bytes."""
    raws = [rpb.LogEntry(index=i, epoch=1).SerializeToString().ljust(size, b"\0") for i in range(first, first + count)]
    return CommittedBatch(first, raws, commit or first + count - 1, prev_epoch=1, applied_index=commit,
                          stored_messages=stored)


def heartbeat(at: int) -> CommittedBatch:
    return CommittedBatch(at, [], at - 1)


async def test_consecutive_batches_travel_as_one_request_with_the_newest_figures() -> None:
    ahead = ReadAhead()
    for i in range(1, 201):  # a primary that commits one entry at a time streams one per message
        await ahead.put(batch(i, 1, commit=i, stored=i * 2))
    taken = await ahead.take()
    assert taken.first_index == 1 and len(taken.entries) == 200 and taken.prev_epoch == 1
    assert [rpb.LogEntry.FromString(raw.rstrip(b"\0")).index for raw in taken.entries] == list(range(1, 201))
    assert (taken.commit_index, taken.applied_index, taken.stored_messages) == (200, 200, 400)
    assert ahead.entries == 0


async def test_a_request_stays_within_its_bounds_and_a_snapshot_travels_alone() -> None:
    ahead = ReadAhead(ship_bytes=100, ship_entries=6)
    for first in (1, 4, 7):
        await ahead.put(batch(first, 3, size=10))  # 30 bytes each
    assert len((await ahead.take()).entries) == 6  # entries bound: two batches
    assert len((await ahead.take()).entries) == 3
    ahead = ReadAhead(ship_bytes=100, ship_entries=1000)
    for first in range(1, 16, 3):
        await ahead.put(batch(first, 3, size=20))  # 60 bytes each
    assert [len((await ahead.take()).entries) for _ in range(5)] == [3] * 5  # bytes bound: one at a time
    ahead = ReadAhead()
    snap = CommittedBatch(11, [batch(11, 1).entries[0]], 11, b"state", 10, 1)
    await ahead.put(batch(1, 10))
    await ahead.put(snap)
    await ahead.put(batch(12, 5))
    assert [(t.first_index, len(t.entries), t.snapshot_index) for t in
            [await ahead.take() for _ in range(3)]] == [(1, 10, 0), (11, 1, 10), (12, 5, 0)]


async def test_a_heartbeat_is_a_request_only_when_nothing_else_waits() -> None:
    ahead = ReadAhead()
    await ahead.put(heartbeat(5))
    await ahead.put(heartbeat(5))
    assert (await ahead.take()).entries == []  # the two make one heartbeat
    await ahead.put(batch(5, 2))
    await ahead.put(heartbeat(7))
    assert len((await ahead.take()).entries) == 2  # the entries carry the primary's figures
    waiting = asyncio.create_task(ahead.take())
    await asyncio.sleep(0.05)
    assert not waiting.done(), "a heartbeat already carried by entries went out again"
    waiting.cancel()


async def test_the_reader_waits_while_the_read_ahead_is_full() -> None:
    ahead = ReadAhead(max_bytes=10_000, max_entries=8, ship_entries=4)
    await ahead.put(batch(1, 4))
    await ahead.put(batch(5, 4))
    blocked = asyncio.create_task(ahead.put(batch(9, 1)))
    await asyncio.sleep(0.05)
    assert not blocked.done(), "read further than the read-ahead's bound"
    assert len((await ahead.take()).entries) == 4
    await asyncio.wait_for(blocked, 1)
    assert ahead.entries == 5


async def test_what_stopped_the_reader_comes_after_what_it_read() -> None:
    ahead = ReadAhead()
    await ahead.put(batch(1, 3))
    await ahead.fail(DataCorruption("not one cluster"))
    assert len((await ahead.take()).entries) == 3
    with pytest.raises(DataCorruption):
        await ahead.take()


def test_the_lag_in_messages_is_the_primarys_count_against_the_standbys() -> None:
    lag = Lag()
    lag.note(100, held=90, source_messages=250, held_messages=230)
    assert (lag.entries, lag.messages) == (10, 20)
    lag.note(95, source_messages=240)  # a member read later that applied less: what was heard stays
    assert (lag.source_commit, lag.source_messages, lag.messages) == (100, 250, 20)
    lag.note(held=100, held_messages=250)
    assert (lag.entries, lag.messages) == (0, 0)
    lag.note(held=100, held_messages=260)  # the standby applied past the primary's last report
    assert lag.messages == 0


def test_the_reader_starts_at_a_member_picked_at_random() -> None:
    addresses = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    firsts = {CommittedReader(addresses, 1).address for _ in range(60)}
    assert firsts == set(addresses), "every reader starts at the same member"
    assert CommittedReader(addresses, 1, start=2).address == addresses[2]
