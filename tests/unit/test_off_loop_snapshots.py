"""Snapshots of a state in memory off the event loop, over a real replica on a real database.

Compaction in the background (persistence/compaction.py): a compaction does not build the
snapshot on the event loop (the loop returns from the apply that triggered it with nothing
stored yet, and goes on applying entries), the snapshot it stores is the state at the index it
began at (not the state the loop moved on to meanwhile), a restart resumes from it, an install
meanwhile cancels it (the child reaped, none of its parts left), and a child that dies makes the
member compact in line.

A follower's install (`Replica.install_stepwise`): the event loop runs while it builds the new
state and stores the parts, the member then holds the leader's state, only that restore point,
and a restart resumes from it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from test_diskstate import observe

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.compaction import COMPACTION_FILE
from strongroom.persistence.replica import Replica
from strongroom.persistence.snapshot_store import P_SNAPSHOT
from strongroom.persistence.snapshots import restore_parts, snapshot_chunks
from strongroom.persistence.state import durable_key
from strongroom.persistence.storage import DiskStorage
from strongroom.realm.model import parse_realm

EVERY = 100

CLUSTER = parse_realm(f"clusters:\n  - name: c1\n    compact_after_entries: {EVERY}\n"
                      "    members:\n      - name: m1\nstores:\n  - name: s\n    cluster: c1\n").cluster("c1")
assert CLUSTER is not None


async def _stored() -> None:
    pass


def _ops(i: int) -> list[rpb.Operation]:
    """Entry i publishes a message of 2 KiB; every third entry also acks an earlier one."""
    ops = [rpb.Operation(publish=rpb.PublishOp(store="s", destination="q.queue", queue=True, message=cpb.Message(
        body=bytes([i % 251]) * 2048, producer_id="p1", sequence=i), published_at=float(i)))]
    if i % 3 == 0:
        ops.append(rpb.Operation(ack=rpb.AckOp(store="s", durable_key=durable_key("q.queue", ""),
                                               message_seqs=[i - 2])))
    return ops


def _apply(replica: Replica, first: int, last: int) -> None:
    for i in range(first, last + 1):
        replica.log.append_local(rpb.LogEntry(index=i, epoch=3, ops=_ops(i)))
        replica.commit_index = i
        replica.apply_committed()


def _state_at(path: Path, index: int) -> dict[str, object]:
    """What a member that applied entries 1..`index` holds (run without an event loop: its
    compactions are in line)."""
    reference = Replica(lambda: CLUSTER, "m1", path, _stored)
    try:
        _apply(reference, 1, index)
        return observe(reference.state)
    finally:
        reference.close()


def _leader_snapshot(path: Path, entries: int) -> tuple[int, int, list[bytes], dict[str, object]]:
    """A leader's snapshot after entries 1..`entries` (index, epoch, parts) and its state."""
    leader = Replica(lambda: CLUSTER, "m2", path, _stored)
    try:
        _apply(leader, 1, entries)
        return (*leader.snapshot(), observe(leader.state))
    finally:
        leader.close()


def _member(path: Path) -> tuple[Replica, DiskStorage]:
    replica = Replica(lambda: CLUSTER, "m1", path, _stored)
    assert isinstance(replica.storage, DiskStorage)
    return replica, replica.storage


def _restarted(path: Path) -> tuple[int, dict[str, object]]:
    """A member restarted on `path`, its log applied: (its snapshot index, its state)."""
    again = Replica(lambda: CLUSTER, "m1", path, _stored)
    try:
        again.commit_index = again.log.last_index
        again.apply_committed()
        return again.log.snapshot_index, observe(again.state)
    finally:
        again.close()


async def _until(check: object, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _snapshot_keys(storage: DiskStorage) -> list[bytes]:
    return [k for k, _ in storage.db.family("meta").scan(P_SNAPSHOT, P_SNAPSHOT + b"\xff")]


async def test_the_snapshot_is_built_off_the_loop_at_the_index_it_began_at(tmp_path: Path) -> None:
    expected = await asyncio.to_thread(_state_at, tmp_path / "reference", EVERY)
    replica, storage = _member(tmp_path / "m1")
    _apply(replica, 1, EVERY)
    # The apply that reached the threshold returned before any snapshot was stored: built in
    # line, it would be stored (and the log compacted) by now.
    assert storage.snapshot_parts(EVERY) is None and replica.log.snapshot_index == 0
    # The loop goes on applying while the child serialises the state as it was at EVERY.
    _apply(replica, EVERY + 1, EVERY + 40)
    await _until(lambda: replica.log.snapshot_index == EVERY)
    stored = storage.snapshot_parts(EVERY)
    assert stored is not None
    assert observe(restore_parts(stored)) == expected
    assert observe(replica.state) != expected and replica.state.applied_index == EVERY + 40
    assert replica.log.first_index == EVERY + 1 and replica.log.entry(EVERY + 1).index == EVERY + 1
    assert not (tmp_path / "m1" / COMPACTION_FILE).exists()
    live = observe(replica.state)
    replica.close()
    assert _restarted(tmp_path / "m1") == (EVERY, live)


async def test_an_install_cancels_a_compaction_and_leaves_none_of_its_parts(tmp_path: Path) -> None:
    index, epoch, parts, leader_state = await asyncio.to_thread(_leader_snapshot, tmp_path / "m2", 3 * EVERY + 10)

    replica, storage = _member(tmp_path / "m1")
    _apply(replica, 1, EVERY)
    running = replica._compaction
    assert running is not None and running.pid is not None
    child = running.pid
    replica.install(index, epoch, parts)
    # Reaped (no zombie left), nothing of its snapshot at EVERY stored.
    try:
        os.waitpid(child, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG: it does not wait
        raise AssertionError(f"child {child} was not reaped")
    except ChildProcessError:
        pass
    await asyncio.sleep(0.2)
    assert replica.log.snapshot_index == index and storage.snapshot_parts(EVERY) is None
    assert all(k.startswith(P_SNAPSHOT + index.to_bytes(8, "big")) for k in _snapshot_keys(storage))
    assert observe(replica.state) == leader_state
    replica.close()


async def test_a_child_that_dies_makes_the_member_compact_in_line(tmp_path: Path) -> None:
    expected = await asyncio.to_thread(_state_at, tmp_path / "reference", EVERY + 1)
    replica, storage = _member(tmp_path / "m1")
    _apply(replica, 1, EVERY)
    running = replica._compaction
    assert running is not None and running.pid is not None
    os.kill(running.pid, signal.SIGKILL)
    await _until(lambda: replica._compaction is None)
    assert replica.log.snapshot_index == 0 and storage.snapshot_parts(EVERY) is None
    # The next compaction (the next apply: the log is still longer than the threshold) is in
    # line: stored when that apply returns.
    _apply(replica, EVERY + 1, EVERY + 1)
    assert replica._compaction is None and replica.log.snapshot_index == EVERY + 1
    stored = storage.snapshot_parts(EVERY + 1)
    assert stored is not None and observe(restore_parts(stored)) == expected
    replica.close()


async def test_an_install_leaves_the_event_loop_free_and_holds_the_leaders_state(tmp_path: Path) -> None:
    index, epoch, parts, leader_state = await asyncio.to_thread(_leader_snapshot, tmp_path / "m2", 2 * EVERY + 30)
    replica, storage = _member(tmp_path / "m1")
    _apply(replica, 1, 10)
    incoming = replica.incoming_snapshot()
    for chunk in [c async for c in snapshot_chunks(parts, epoch, "m2", index, epoch)]:
        incoming.add(chunk)
    incoming.complete()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    running = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    await replica.install_stepwise(index, epoch, incoming)
    during = ticks - before
    running.cancel()
    incoming.discard()
    # Installed in one call on the loop, the ticker would not have run meanwhile.
    assert during > 0
    assert observe(replica.state) == leader_state and replica.log.snapshot_index == index
    assert storage.restore_points() == [(index, epoch)]
    assert all(k.startswith(P_SNAPSHOT + index.to_bytes(8, "big")) for k in _snapshot_keys(storage))
    replica.close()
    assert _restarted(tmp_path / "m1") == (index, leader_state)


async def test_a_cancelled_install_returns_only_once_its_worker_thread_is_done(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A term cancelled while its install builds the state in a worker thread: the thread cannot
    be stopped, so the cancellation waits for it (the lock stays held; no second build beside it,
    nor the incoming file discarded under it); the state is the member's as before."""
    import threading

    from strongroom.persistence import replica as replica_module

    index, epoch, parts, _ = await asyncio.to_thread(_leader_snapshot, tmp_path / "m2", EVERY + 10)
    replica, _storage = _member(tmp_path / "m1")
    _apply(replica, 1, 10)
    mine = observe(replica.state)
    incoming = replica.incoming_snapshot()
    for chunk in [c async for c in snapshot_chunks(parts, epoch, "m2", index, epoch)]:
        incoming.add(chunk)
    incoming.complete()
    real, done = replica_module.restore_parts, threading.Event()

    def slow_restore(data: object) -> object:
        time.sleep(0.5)  # a large state's build
        try:
            return real(data)
        finally:
            done.set()

    monkeypatch.setattr(replica_module, "restore_parts", slow_restore)
    install = asyncio.create_task(replica.install_stepwise(index, epoch, incoming))
    await asyncio.sleep(0.1)
    install.cancel()
    with pytest.raises(asyncio.CancelledError):
        await install
    assert done.is_set(), "the cancelled install returned while its thread still built a state"
    incoming.discard()
    assert observe(replica.state) == mine and replica.log.snapshot_index != index
    replica.close()
