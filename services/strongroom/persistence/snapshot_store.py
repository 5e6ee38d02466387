"""How `DiskStorage` keeps the snapshot of a restore point: its parts (`snapshots.py`) in the
metadata family, written in batches and read back one at a time.

Layout: the key `snapshot@` + index holds the point's head, `HEAD` + generation + part count,
and the parts sit under that key + generation + part number. The head is written last, in the
synced batch that makes the point a restore point: parts written before a member stopped are
never read (another generation, or an index that is no point) and go at the next snapshot
(`drop_strays`). An empty head is a point of the indexes on disk (the state is a checkpoint);
a head that is not `HEAD`-prefixed is the serialised snapshot itself, as versions before parts
wrote it (a protobuf message never starts with a 0 byte).
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from strongroom.errors import DataCorruption

if TYPE_CHECKING:
    from strongroom.persistence.storage import DiskStorage

P_SNAPSHOT = b"snapshot@"
HEAD = b"\x00"
_U64 = struct.Struct(">Q")
_PARTS = struct.Struct(">II")
PARTS_PER_BATCH_BYTES = 64 * 1024 * 1024
"""Parts are written in unsynced batches of about this much, then the head in a synced one."""


def snapshot_key(index: int) -> bytes:
    """The key of the head of the snapshot at `index`."""
    return P_SNAPSHOT + _U64.pack(index)


def _part_key(index: int, generation: int, n: int) -> bytes:
    return snapshot_key(index) + _PARTS.pack(generation, n)


def _head(raw: bytes) -> tuple[int, int] | None:
    """(generation, part count) of a head, None for a head that is no parts head."""
    return _PARTS.unpack_from(raw, len(HEAD)) if raw.startswith(HEAD) else None


def part_keys(index: int, head: bytes) -> list[bytes]:
    """The keys of the parts a head names."""
    named = _head(head)
    return [_part_key(index, named[0], n) for n in range(named[1])] if named else []


def generation_range(index: int, head: bytes) -> tuple[bytes, bytes]:
    """The key range of the parts of `head` (an empty range for a head without parts)."""
    named = _head(head)
    if named is None:
        return snapshot_key(index) + b"\xff", snapshot_key(index) + b"\xff"
    return _part_key(index, named[0], 0), _part_key(index, named[0], 2**32 - 1) + b"\xff"


class StoredParts(Sequence[bytes]):
    """A snapshot's parts in a storage's metadata, read one at a time as they are iterated
    (through the storage, not a family of the database: a database reopened after a failed
    write is read, and a closed one is not kept open)."""

    def __init__(self, storage: DiskStorage, index: int, generation: int, count: int) -> None:
        self.storage, self.index, self.generation, self.count = storage, index, generation, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, n: int) -> bytes:  # type: ignore[override]
        if not 0 <= n < self.count:
            raise IndexError(n)
        raw = self.storage.meta_record(_part_key(self.index, self.generation, n))
        if raw is None:
            raise DataCorruption(f"part {n} of the snapshot at index {self.index} is missing")
        return raw

    def __iter__(self) -> Iterator[bytes]:
        for n in range(self.count):
            yield self[n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)


def parts_of(storage: DiskStorage, index: int, head: bytes) -> Sequence[bytes]:
    """The parts of the snapshot at `index` whose head is `head`."""
    if not head:
        return []
    named = _head(head)
    if named is None:
        return [head]  # one serialised snapshot, as versions before parts stored it
    return StoredParts(storage, index, *named)


class PartWriter:
    """The parts of the snapshot at `index`, written under a new generation in unsynced batches
    of about `batch_bytes` as they are added; `finish` gives the head that makes them the
    point's snapshot (written by the caller, in its synced batch)."""

    def __init__(self, storage: DiskStorage, index: int, batch_bytes: int = PARTS_PER_BATCH_BYTES) -> None:
        self.storage = storage
        self.index = index
        self.generation = secrets.randbits(32)
        self._batch_bytes = batch_bytes
        self._wb = storage.batch()
        self._size = 0
        self.count = 0
        self.reported: list[bytes] = []
        """The parts, kept when a report is written (it names every record)."""

    def add(self, part: bytes) -> bool:
        """Add the next part: True when this wrote a batch."""
        storage = self.storage
        self._wb.put(_part_key(self.index, self.generation, self.count), part, storage.meta_handle)
        if storage.report is not None:
            self.reported.append(part)
        self.count += 1
        self._size += len(part)
        if self._size < self._batch_bytes:
            return False
        storage.write_meta(self._wb, False)
        self._wb, self._size = storage.batch(), 0
        return True

    def finish(self) -> tuple[bytes, list[bytes]]:
        """Write what is left: (the head, the parts when a report is written)."""
        if self.count == 0:
            return b"", []
        self.storage.write_meta(self._wb, False)
        return HEAD + _PARTS.pack(self.generation, self.count), self.reported

    def discard(self) -> None:
        """Delete the parts written so far (the snapshot will not become a point)."""
        wb = self.storage.batch()
        wb.delete_range(*generation_range(self.index, HEAD + _PARTS.pack(self.generation, 0)), self.storage.meta_handle)
        self.storage.write_meta(wb, False)


def write_parts(storage: DiskStorage, index: int, parts: Iterable[bytes]) -> tuple[bytes, list[bytes]]:
    """Write the parts of the snapshot at `index` under a new generation, in unsynced batches:
    (the head that makes them the point's snapshot, the parts when a report is written)."""
    if isinstance(parts, (bytes, bytearray)):
        raise TypeError("a snapshot is given as its parts, not as one bytes object")
    writer = PartWriter(storage, index)
    for part in parts:
        writer.add(part)
    return writer.finish()


def drop_strays(storage: DiskStorage, index: int, live: list[tuple[int, int]]) -> None:
    """Parts of snapshots that never became a point (a member stopped while writing one):
    those at `index` when it is no point yet, and any between the newest point and it."""
    points = {i for i, _ in live}
    if index in points:
        return
    newest = max(points, default=-1)
    start = newest + 1 if newest < index else index
    wb = storage.batch()
    wb.delete_range(snapshot_key(start), snapshot_key(index + 1), storage.meta_handle)
    storage.write_meta(wb, False)
