"""Snapshots in parts, in-process: bounded parts, the same state from them (in memory, on disk,
from a stored restore point), their chunks on the wire and in the incoming file, and what
storage does with parts of a snapshot it never finished writing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence import checkpoints, snapshots
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.snapshot_source import checkpoint_parts
from strongroom.persistence.snapshot_store import P_SNAPSHOT, write_parts
from strongroom.persistence.snapshots import (
    IncomingSnapshot,
    restore_bytes,
    restore_parts,
    snapshot_bytes,
    snapshot_chunks,
    state_parts,
)
from strongroom.persistence.state import StateMachine, durable_key
from strongroom.persistence.storage import DiskStorage


def _state(messages: int = 300, body: int = 100) -> StateMachine:
    """Two durables on a topic (one with half acknowledged), a queue, a big map, two producers."""
    sm = StateMachine()
    create = [rpb.Operation(create_durable=rpb.CreateDurableOp(store="s", destination="t", durable=name))
              for name in ("a", "b")]
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=create))
    index = 1
    for i in range(messages):
        index += 1
        dest, queue = ("t", False) if i % 3 else ("q", True)
        sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(publish=rpb.PublishOp(
            store="s", destination=dest, queue=queue,
            message=cpb.Message(body=bytes([i % 251]) * body, producer_id=f"p{i % 2}", sequence=i + 1)))]))
    index += 1
    acked = [seq for seq in range(1, messages + 1) if seq % 2 and (seq - 1) % 3]
    sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(ack=rpb.AckOp(
        store="s", durable_key=durable_key("t", "a"), message_seqs=acked))]))
    for k in range(200):
        index += 1
        sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(map=rpb.MapOp(
            store="s", map="m", key=f"key{k:04d}", put=b"v" * 40))]))
    return sm


def _parsed(parts: list[bytes]) -> list[rpb.StateSnapshot]:
    return [rpb.StateSnapshot.FromString(p) for p in parts]


def test_parts_are_bounded_and_give_back_the_same_state() -> None:
    sm = _state()
    parts = list(state_parts(sm, part_bytes=4096, pending_per_part=50))
    assert len(parts) > 10
    # Each part closes once it passes the bound: at most one record past it.
    assert max(len(p) for p in parts) < 4096 + 1024
    parsed = _parsed(parts)
    assert parsed[0].applied_index == sm.applied_index and not parsed[0].messages
    assert all(not p.uows and not p.applied_index for p in parsed[1:])
    # A long pending list and the map go on across parts.
    continued = [d for p in parsed for d in p.durables if d.continued]
    assert continued and all(d.key and not d.name for d in continued)
    assert sum(1 for p in parsed for m in p.maps if m.map == "m") > 1
    whole = snapshot_bytes(sm)
    assert snapshot_bytes(restore_parts(parts)) == whole
    # Joined, the parts are one StateSnapshot as well.
    assert snapshot_bytes(restore_bytes(b"".join(parts))) == whole


def test_holders_and_pending_bytes_travel_in_the_parts() -> None:
    sm = _state(messages=30)
    parts = _parsed(list(state_parts(sm)))
    refs = {m.seq: m.refs for p in parts for m in p.messages}
    assert refs == {seq: stored.refs for seq, stored in sm.messages.items()}
    sizes = {d.key: d.pending_bytes for p in parts for d in p.durables if not d.continued}
    assert sizes == {key: d.pending_bytes for key, d in sm.durables.items()}


async def test_chunks_through_the_incoming_file_are_the_parts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(snapshots, "CHUNK_BYTES", 1000)
    sm = _state()
    parts = list(state_parts(sm, part_bytes=8192))
    chunks = [c async for c in snapshot_chunks(parts, 7, "m1", sm.applied_index, 1)]
    assert len(chunks) > len(parts)
    assert (chunks[0].epoch, chunks[0].leader, chunks[0].last_index) == (7, "m1", sm.applied_index)
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert sum(c.part_end for c in chunks) == len(parts)
    incoming = IncomingSnapshot(tmp_path / "in")
    for chunk in chunks:
        incoming.add(chunk)
    incoming.complete()
    assert len(incoming) == len(parts) and list(incoming) == parts and list(incoming) == parts  # read twice
    assert incoming.size == sum(len(p) for p in parts)
    incoming.discard()
    assert not (tmp_path / "in").exists()


def test_chunks_of_a_sender_before_parts_are_one_part(tmp_path: Path) -> None:
    data = snapshot_bytes(_state())
    incoming = IncomingSnapshot(tmp_path / "in")
    for off in range(0, len(data), 5000):  # as that version sent it: no part_end
        incoming.add(rpb.SnapshotChunk(data=data[off:off + 5000], done=off + 5000 >= len(data)))
    incoming.complete()
    assert len(incoming) == 1 and list(incoming) == [data]


def test_an_incomplete_incoming_file_is_refused(tmp_path: Path) -> None:
    incoming = IncomingSnapshot(tmp_path / "in")
    incoming.add(rpb.SnapshotChunk(data=b"x" * 100, part_end=True))
    incoming.complete()
    with open(tmp_path / "in", "r+b") as f:
        f.truncate(50)
    with pytest.raises(Exception, match="ends in the middle"):
        list(incoming)


def test_a_restore_point_is_stored_as_parts_and_read_back_one_at_a_time(tmp_path: Path, driver: str) -> None:
    sm = _state()
    parts = list(state_parts(sm, part_bytes=4096))
    storage = DiskStorage(tmp_path, sync=False, driver=driver)
    storage.save_snapshot(10, 1, parts)
    with pytest.raises(TypeError):
        storage.save_snapshot(20, 1, b"one bytes object")  # type: ignore[arg-type]
    storage.close()
    storage = DiskStorage(tmp_path, sync=False, driver=driver)
    loaded = storage.load()
    assert loaded.snapshot_index == 10 and loaded.snapshot is not None
    assert len(loaded.snapshot) == len(parts) and list(loaded.snapshot) == parts
    assert snapshot_bytes(restore_parts(loaded.snapshot)) == snapshot_bytes(sm)
    storage.close()


def test_parts_of_a_snapshot_never_finished_are_dropped_by_the_next(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path, sync=False, driver=driver)
    parts = list(state_parts(_state(messages=40), part_bytes=2048))
    storage.save_snapshot(10, 1, parts)
    # A member stopped while writing the snapshot at 20: parts without their head.
    write_parts(storage, 20, parts)
    assert storage.restore_points()[-1] == (10, 1)

    def stored_keys() -> list[bytes]:
        return [k for k, _ in storage._meta.scan(P_SNAPSHOT, P_SNAPSHOT + b"\xff" * 8)]

    strays = [k for k in stored_keys() if k.startswith(P_SNAPSHOT + (20).to_bytes(8, "big"))]
    assert len(strays) == len(parts)
    storage.save_snapshot(30, 1, parts)
    assert not [k for k in stored_keys() if k.startswith(P_SNAPSHOT + (20).to_bytes(8, "big"))]
    assert [p for p, _ in storage.restore_points()] == [10, 30]
    # Replaced by a leader's snapshot at the same index as a point: only the new parts stay.
    storage.replace_with_snapshot(30, 2, parts[:3])
    assert storage.restore_points() == [(30, 2)]
    assert list(storage.load().snapshot or []) == parts[:3]
    assert len(stored_keys()) == 1 + 3
    storage.close()


def _publish_on(sm: StateMachine, index: int, n: int) -> None:
    sm.apply_entry(rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(publish=rpb.PublishOp(
        store="s", destination="q", queue=True, message=cpb.Message(body=bytes(200), producer_id="p",
                                                                     sequence=index * 100 + i)))
        for i in range(n)]))


async def test_a_peers_snapshot_of_the_indexes_on_disk_is_read_from_the_restore_point(tmp_path: Path,
                                                                                      driver: str) -> None:
    """Built in a worker thread from a copy of the checkpoint: the state at the restore point,
    whatever the live state did since; the copy is gone afterwards, also when the reader stops
    early."""
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        state = DiskStateMachine.open(storage)
        for index in range(1, 41):
            _publish_on(state, index, 50)
        at_point = snapshot_bytes(state)
        storage.save_snapshot(40, 1, [])  # the checkpoint is the restore point
        for index in range(41, 61):  # the live state moves on
            _publish_on(state, index, 50)
        parts = [p async for p in checkpoint_parts(storage, 40)]
        assert len(parts) > 1
        assert snapshot_bytes(restore_parts(parts)) == at_point != snapshot_bytes(state)
        stream = checkpoint_parts(storage, 40)
        assert await anext(stream)
        await stream.aclose()  # the reader stops after one part
        for _ in range(50):
            if not list(tmp_path.glob("snapshot-*")):
                break
            await asyncio.sleep(0.1)
        assert not list(tmp_path.glob("snapshot-*"))
        assert checkpoints.directory(tmp_path, 40).is_dir()  # the restore point itself is untouched
    finally:
        storage.close()


async def test_a_reader_that_stops_while_a_part_is_built_leaves_the_loops_threads_free(
        tmp_path: Path, driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member stopping while it sends a snapshot cancels the read while it waits for a part: no
    thread of the event loop's pool may stay waiting for it (with a pool of one thread, the
    member's next `to_thread` would never run, and its stop would wait for it for good)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from strongroom.persistence import snapshot_source

    real_parts = snapshot_source.state_parts

    def slow_parts(state: object) -> object:
        time.sleep(0.5)  # a large state's first part: the reader is cancelled before it comes
        yield from real_parts(state)

    monkeypatch.setattr(snapshot_source, "state_parts", slow_parts)
    storage = DiskStorage(tmp_path, sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)
    try:
        state = DiskStateMachine.open(storage)
        for index in range(1, 41):
            _publish_on(state, index, 50)
        storage.save_snapshot(40, 1, [])
        for _ in range(3):
            stream = checkpoint_parts(storage, 40)
            reading = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.1)  # waiting for the first part
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 5) == "free"
    finally:
        loop.set_default_executor(ThreadPoolExecutor())
        pool.shutdown(wait=False, cancel_futures=True)
        storage.close()
