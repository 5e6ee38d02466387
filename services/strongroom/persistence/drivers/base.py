"""The storage driver interface: what a member's storage needs from an ordered key-value store.

A driver opens one database in a directory with a fixed set of named *families* (RocksDB column
families, SQLite tables), each an ordered map of byte keys to byte values, keys ordered as bytes
(big-endian integers therefore iterate in numeric order). Callers read a family (`get`, `scan`),
change several families atomically in one `Batch` written with or without sync, and take
checkpoints of the whole database for restore points.

The batch is the hot path: a driver hands out its own batch type (for RocksDB the native
`WriteBatch`, so the callers' `put`/`delete`/`delete_range` calls cost exactly what they did) and
an opaque handle per family that the batch calls take.

For migration (unload and load, docs/store-operations.md) every driver lists its raw records
(`records`) and writes raw records into an empty database (`load`), unchanged.
"""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

__all__ = ["DEFAULT_MEMORY", "SCRUB_PACE", "SCRUB_PAUSE", "Batch", "Driver", "DriverMemory", "Family", "Record",
           "StoreDamaged", "directory_size"]

MIB = 2**20


@dataclass(frozen=True)
class DriverMemory:
    """What one database may hold in memory besides its files' pages in the kernel's cache
    (realm `persistent_store.write_buffer_mb` and `read_cache_mb`)."""

    write_buffer_bytes: int = 32 * MIB
    """Writes held in memory before they are written to the database's files, over all its
    families (RocksDB memtables; past it the largest is flushed). SQLite has none: each commit
    goes to its write-ahead log."""
    read_cache_bytes: int = 32 * MIB
    """Blocks read from the files kept for the next read, one cache for every family (RocksDB's
    block cache, SQLite's page cache)."""


DEFAULT_MEMORY = DriverMemory()


SCRUB_PACE = 128
SCRUB_PAUSE = 0.0002
"""A scrub's read sleeps SCRUB_PAUSE seconds every SCRUB_PACE records: it runs in a thread of the
member's process, and read flat out it would hold the interpreter lock in long slices (on a
store of 200,000 entries the member's event loop waited 0.8 / 6.8 ms p50 / p99 while it ran,
against 0.1 / 0.2 ms idle; paced, 0.1 / 0.5 ms, the scrub taking 0.8-0.95 s instead of 0.55 s).
What pacing cannot shorten: RocksDB's checkpoint flushes the write buffer holding the lock,
once per scrub (27 ms there, with 14 MiB in the buffer)."""


class StoreDamaged(Exception):
    """The database's files are damaged (a checksum that does not match, a file cut short, a
    manifest that does not parse): the driver's words, naming the file where it can. A member
    never serves from such a store (`DiskStorage` moves it aside and rebuilds from its peers)."""

Record = tuple[str, bytes, bytes]
"""(family, key, value): one raw record, as unload reads it and load writes it."""


class Family(Protocol):
    """One family of a database, for reads."""

    def get(self, key: bytes) -> bytes | None:
        """The value stored under `key`, or None."""

    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs from `start` (inclusive) to `end` (exclusive; None: to the end), in
        key order. The caller may stop early; writes made while it runs may or may not show."""


class Batch(Protocol):
    """Changes to several families, applied atomically by `Driver.write`. `family` is a handle
    from `Driver.handle`."""

    def put(self, key: bytes, value: bytes, family: object) -> None:
        """Store `value` under `key`."""

    def delete(self, key: bytes, family: object) -> None:
        """Remove `key`."""

    def delete_range(self, start: bytes, end: bytes, family: object) -> None:
        """Remove every key from `start` (inclusive) to `end` (exclusive)."""


class Driver(ABC):
    """One open database of a storage driver."""

    name: ClassVar[str]
    """The name the realm selects the driver by (`persistent_store.driver`)."""

    def __init__(self, path: Path, families: Sequence[str], volatile: bool = False, strict: bool = False,
                 memory: DriverMemory = DEFAULT_MEMORY) -> None:
        """Open (creating if missing) the database in directory `path` with these families.
        `volatile`: a cache thrown away at every start (swap): no crash safety needed, writes
        as cheap as the driver makes them. `strict`: every write that matters is synced, so any
        damage to the journal is damage (RocksDB: the WAL must replay whole), never a crash's
        unsynced tail. `memory`: the bounds of what it holds in memory. StoreDamaged when the
        files are damaged."""
        self.path = path
        self.families = tuple(families)
        self.volatile = volatile
        self.strict = strict
        self.memory = memory

    def memory_in_use(self) -> dict[str, int]:
        """Bytes the database holds in memory now, by kind ("write_buffers", "read_cache"); a
        driver that cannot tell reports nothing."""
        return {}

    def verify(self) -> None:
        """Read every record of every family, checking what the driver can check (RocksDB: the
        block checksums): StoreDamaged at the first damage found."""
        for name in self.families:
            for _ in self.family(name).scan():
                pass

    @abstractmethod
    def family(self, name: str) -> Family:
        """A family, for reads."""

    @abstractmethod
    def handle(self, name: str) -> object:
        """A family's handle, for the calls of a batch."""

    @abstractmethod
    def batch(self) -> Batch:
        """A new, empty batch."""

    @abstractmethod
    def write(self, batch: Batch, sync: bool) -> None:
        """Apply a batch atomically; `sync`: durable (fsynced) before this returns, together with
        every write before it. Raises on failure, with nothing of the batch applied."""

    @abstractmethod
    def checkpoint(self, target: Path) -> None:
        """A consistent copy of the whole database as it is now, in the new directory `target`,
        for `copy` to open later (the caller fsyncs it)."""

    def scrub_source(self, work: Path) -> Path:
        """What a scrub (persistence/scrub.py) reads: the database's files as they are now, kept
        from changing while it reads, in the new directory `work` (by default a checkpoint:
        RocksDB hard-links its table files, so their bytes on disk are what is read). Returns the
        directory to pass to `scrub_read`."""
        self.checkpoint(work)
        return work

    @classmethod
    def scrub_read(cls, path: Path, stop: threading.Event) -> None:
        """Read every record of the database in `path` back from its files, by a reader of its
        own (the open database's caches would answer for blocks read before), checking what the
        driver can check: StoreDamaged at the first damage. Returns early once `stop` is set."""
        for n, _ in enumerate(cls.read_stored(path), 1):
            if n % SCRUB_PACE == 0:
                if stop.is_set():
                    return
                time.sleep(SCRUB_PAUSE)

    @classmethod
    @abstractmethod
    def copy(cls, source: Path, target: Path) -> None:
        """A database to open in `target` from the checkpoint in `source`, leaving the checkpoint
        as it is."""

    @abstractmethod
    def close(self) -> None:
        """Release the database's files (idempotent)."""

    @classmethod
    @abstractmethod
    def stored_families(cls, path: Path) -> list[str]:
        """The families the database in `path` holds, read without changing it (unload)."""

    @classmethod
    @abstractmethod
    def read_stored(cls, path: Path) -> Iterator[Record]:
        """Every raw record of the database in `path`, family by family (in `stored_families`
        order), in key order, read from a read-only open: nothing of the database changes, and
        a member may not have it open meanwhile (unload)."""

    def size_on_disk(self) -> int:
        """Bytes of the database's files."""
        return directory_size(self.path)

    def records(self) -> Iterator[Record]:
        """Every raw record of every family, family by family, in key order (unload)."""
        for name in self.families:
            for key, value in self.family(name).scan():
                yield name, key, value

    def load(self, records: Iterable[Record], batch_size: int = 10000) -> int:
        """Write raw records (from `records`, of any driver) into this database, which must be
        empty, in synced batches; the count written (load)."""
        for name in self.families:
            if next(iter(self.family(name).scan()), None) is not None:
                raise ValueError(f"the {self.name} database in {self.path} is not empty (family {name!r}): "
                                 "records are loaded into an empty store only")
        count = 0
        batch = self.batch()
        for name, key, value in records:
            batch.put(key, value, self.handle(name))
            count += 1
            if count % batch_size == 0:
                self.write(batch, sync=False)
                batch = self.batch()
        self.write(batch, sync=True)
        return count


def directory_size(path: Path) -> int:
    """Bytes of every file under `path` (0 if it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:  # removed meanwhile
                pass
    return total
