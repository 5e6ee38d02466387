"""Where a snapshot for a peer comes from: the member's latest restore point, read a part at a
time, off the event loop where the state is on disk.

A follower behind the leader's compacted prefix, or a recovering leader (FetchSnapshot), needs
a state at some index the log continues from: the latest restore point is one (the log is
kept from the oldest), and it does not change while it is read, so nothing of the live state
is serialised for it.

- **Indexes on disk**: the restore point is a checkpoint of the database. It is pinned (not
  pruned while read), copied beside it (RocksDB hard-links its files) and opened as a database
  of its own in a worker thread, whose state machine yields the parts one by one through a
  bounded queue: at most `QUEUED_PARTS` parts are held while the stream sends them.
- **State in memory, on disk**: the restore point's stored parts, read one at a time.
- **Memory storage**, or no restore point yet: the live state's parts, taken at once.
"""

from __future__ import annotations

import asyncio
import queue
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from strongroom.persistence import checkpoints
from strongroom.persistence.diskstate import DiskStateMachine
from strongroom.persistence.drivers import Batch, Driver, Family, open_driver
from strongroom.persistence.snapshots import state_parts
from strongroom.persistence.storage import DiskStorage

if TYPE_CHECKING:
    from strongroom.persistence.replica import Replica

QUEUED_PARTS = 4
_END = object()
_NOTHING_YET = object()
WAIT_SLICE = 0.5
"""Seconds a worker thread of the event loop waits for the next part at most: a reader that
stops while a part is being built (a member stopping while it sends a snapshot) leaves no
thread of the loop's pool waiting for a part that will not come."""


class _CheckpointCopy:
    """What a `DiskStateMachine` reads of its storage, over a copy of a checkpoint (read only)."""

    def __init__(self, db: Driver) -> None:
        self._db = db

    def state_cf(self, name: str) -> Family:
        return self._db.family(f"state_{name}")

    def state_handle(self, name: str) -> object:
        return self._db.handle(f"state_{name}")

    def batch(self) -> Batch:
        return self._db.batch()

    def write_state(self, wb: Batch) -> None:
        raise RuntimeError("a checkpoint's state is read for a snapshot, never written")


def _read_checkpoint(storage: DiskStorage, index: int, out: queue.Queue[object], stop: threading.Event) -> None:
    """The parts of the checkpoint at `index`, put on `out` (then `_END`, or the exception)."""
    work = tempfile.mkdtemp(prefix="snapshot-", dir=storage.path)
    try:
        with checkpoints.pinned(storage.path, index) as source:
            storage.driver_class.copy(source, Path(work) / "db")
        families = ("log", "meta", *(f"state_{name}" for name in storage.state_families))
        db = open_driver(storage.driver_name, Path(work), families)
        try:
            state = DiskStateMachine.open(_CheckpointCopy(db))  # type: ignore[arg-type]
            for part in state_parts(state):
                if not _hand_over(out, part, stop):
                    return
        finally:
            db.close()
        _hand_over(out, _END, stop)
    except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
        _hand_over(out, exc, stop)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _hand_over(out: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    """Put `item` on `out` once there is room; False when the reader stopped first."""
    while not stop.is_set():
        try:
            out.put(item, timeout=WAIT_SLICE)
            return True
        except queue.Full:
            continue
    return False


async def checkpoint_parts(storage: DiskStorage, index: int) -> AsyncIterator[bytes]:
    """The parts of the state in the checkpoint at `index`, built in a worker thread."""
    out: queue.Queue[object] = queue.Queue(maxsize=QUEUED_PARTS)
    stop = threading.Event()
    worker = threading.Thread(target=_read_checkpoint, args=(storage, index, out, stop),
                              name=f"snapshot-{index}", daemon=True)
    worker.start()
    try:
        while True:
            item = await asyncio.to_thread(_take, out)
            if item is _NOTHING_YET:
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()


def _take(out: queue.Queue[object]) -> object:
    """The next item on `out`, or `_NOTHING_YET` after `WAIT_SLICE` seconds."""
    try:
        return out.get(timeout=WAIT_SLICE)
    except queue.Empty:
        return _NOTHING_YET


class PeerSnapshot(NamedTuple):
    """A state for a peer: its index and that entry's epoch, its parts, about how many bytes."""

    index: int
    epoch: int
    parts: AsyncIterator[bytes] | Iterable[bytes]
    size: int


def peer_snapshot(replica: Replica) -> PeerSnapshot:
    """A state for a peer: the latest restore point where there is one to read, else the live
    state (its parts taken now)."""
    storage, lg = replica.storage, replica.log
    if isinstance(storage, DiskStorage) and lg.snapshot_index > 0:
        if replica.indexes_on_disk:
            if checkpoints.directory(storage.path, lg.snapshot_index).is_dir():
                return PeerSnapshot(lg.snapshot_index, lg.snapshot_epoch, checkpoint_parts(storage, lg.snapshot_index),
                                    storage.db.size_on_disk())
        else:
            stored = storage.snapshot_parts(lg.snapshot_index)
            if stored:
                return PeerSnapshot(lg.snapshot_index, lg.snapshot_epoch, stored, storage.db.size_on_disk())
    index, epoch, parts = replica.snapshot()
    return PeerSnapshot(index, epoch, parts, sum(len(p) for p in parts))
