"""The RocksDB driver (rocksdict): column families, the native WriteBatch, RocksDB checkpoints.

The default driver. Families are column families of one database (`default` is RocksDB's own);
a batch is rocksdict's `WriteBatch` itself and a handle its `ColumnFamily`, so a caller's batch
calls go straight to RocksDB; a synced write syncs the WAL in the same call. A checkpoint is
RocksDB's (memtables flushed, SST files hard-linked: cheap).
"""

from __future__ import annotations

import gc
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import rocksdict

from strongroom.persistence.drivers.base import (
    DEFAULT_MEMORY,
    SCRUB_PACE,
    SCRUB_PAUSE,
    Batch,
    Driver,
    DriverMemory,
    Record,
    StoreDamaged,
)

__all__ = ["RocksDriver"]


class _RocksFamily:
    """A column family for reads: `get` is rocksdict's own (no extra call on the hot path)."""

    __slots__ = ("get", "_cf")

    def __init__(self, cf: rocksdict.Rdict) -> None:
        self._cf = cf
        self.get = cf.get

    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        it = self._cf.iter()
        it.seek(start)
        while it.valid():
            key = it.key()
            if end is not None and key >= end:
                return
            yield key, it.value()
            it.next()
        # An iterator also stops at a block whose checksum does not match: only its status
        # tells that from the end (without this a damaged file reads as a shorter one).
        _check(it)


def _check(it: rocksdict.RdictIter) -> None:
    """StoreDamaged if the iterator stopped at damage rather than at the end."""
    try:
        it.status()
    except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception with RocksDB's status
        raise _damaged(exc) from None


def _damaged(exc: BaseException) -> BaseException:
    """RocksDB's Corruption status as StoreDamaged; anything else as it is."""
    text = str(exc)
    return StoreDamaged(text.strip()) if "Corruption" in text or "corrupt" in text else exc


class RocksDriver(Driver):
    """A RocksDB database (rocksdict, raw mode)."""

    name = "rocksdb"

    def __init__(self, path: Path, families: Sequence[str], volatile: bool = False, strict: bool = False,
                 memory: DriverMemory = DEFAULT_MEMORY) -> None:
        super().__init__(path, families, volatile, strict, memory)
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.set_paranoid_checks(True)
        # The WAL's default recovery stops at the first damaged record and opens what came
        # before: a flipped bit would silently drop every synced write after it. Strict (every
        # write that matters synced): any damage fails the open. Otherwise a torn last record
        # (an unsynced tail a crash cut) is tolerated, damage before it is not.
        opts.set_wal_recovery_mode(rocksdict.DBRecoveryMode.absolute_consistency() if strict
                                   else rocksdict.DBRecoveryMode.tolerate_corrupted_tail_records())
        cf_opts = rocksdict.Options(raw_mode=True)
        # Memory bounded as the realm says. By default every family had memtables of 64 MiB
        # (two while one flushes) and a block cache of its own: a member's resident memory
        # climbed by the megabytes it wrote until each family's first flush (a soak's members
        # grew 16 MiB a minute with a flat backlog). One budget for the memtables of every
        # family (RocksDB flushes the largest when they reach it), each at most a quarter of
        # it, and one block cache shared by every family.
        self._cache = rocksdict.Cache(memory.read_cache_bytes)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(self._cache)
        per_family = max(1 << 20, memory.write_buffer_bytes // 4)
        for o in (opts, cf_opts):
            o.set_block_based_table_factory(table)
            o.set_write_buffer_size(per_family)
        opts.set_db_write_buffer_size(memory.write_buffer_bytes)
        # The WAL is kept until every family's memtable in it is flushed: a family written
        # rarely would hold it (and the replay at start) long after the others flushed.
        opts.set_max_total_wal_size(4 * memory.write_buffer_bytes)
        named = [f for f in self.families if f != "default"]
        try:
            self._db: rocksdict.Rdict | None = rocksdict.Rdict(
                str(path), options=opts, column_families={f: cf_opts for f in named} if named else None)
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception with RocksDB's status
            raise _damaged(exc) from None
        db = self._db
        self._families = {f: _RocksFamily(db.get_column_family(f)) for f in named}
        self._families["default"] = _RocksFamily(db)
        self._handles: dict[str, object] = {f: db.get_column_family_handle(f) for f in named}
        self._handles["default"] = None  # a WriteBatch's own default family
        self._nosync = rocksdict.WriteOptions()
        self._nosync.sync = False
        if volatile:
            self._nosync.disable_wal = True
        self._synced = rocksdict.WriteOptions()
        self._synced.sync = True

    def family(self, name: str) -> _RocksFamily:
        return self._families[name]

    def memory_in_use(self) -> dict[str, int]:
        assert self._db is not None, "the database is closed"
        # The views opened with the database: a view made for the call flushes its family's
        # memtable when it is dropped.
        memtables = sum(int(family._cf.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
                        for family in self._families.values())
        return {"write_buffers": memtables, "read_cache": int(self._cache.get_usage())}

    def handle(self, name: str) -> object:
        return self._handles[name]

    def batch(self) -> Batch:
        return rocksdict.WriteBatch(raw_mode=True)  # type: ignore[no-any-return]

    def write(self, batch: Batch, sync: bool) -> None:
        assert self._db is not None, "the database is closed"
        self._db.write(batch, self._synced if sync else self._nosync)

    def checkpoint(self, target: Path) -> None:
        checkpoint = rocksdict.Checkpoint(self._db)
        try:
            checkpoint.create_checkpoint(str(target))
        finally:
            del checkpoint

    def scrub_source(self, work: Path) -> Path:
        """A checkpoint (its table files hard links). A database that stopped on damage a
        compaction or flush read (RocksDB's background error) refuses it with Corruption:
        StoreDamaged too."""
        try:
            return super().scrub_source(work)
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception with RocksDB's status
            raise _damaged(exc) from None

    @classmethod
    def copy(cls, source: Path, target: Path) -> None:
        # SST files (never modified once written) are hard-linked, the others (manifest,
        # options, WAL, CURRENT, which an open rewrites) are copied.
        target.mkdir(parents=True)
        for path in source.iterdir():
            if path.suffix == ".sst":
                os.link(path, target / path.name)
            else:
                shutil.copy2(path, target / path.name)

    def close(self) -> None:
        # Column-family views hold the database open; drop them before closing it.
        self._families = {}
        self._handles = {}
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception:  # noqa: BLE001 - closing a failed database
                pass
            del db
        gc.collect()

    @classmethod
    def stored_families(cls, path: Path) -> list[str]:
        return list(rocksdict.Rdict.list_cf(str(path), rocksdict.Options(raw_mode=True)))

    @classmethod
    def _read_only(cls, path: Path) -> tuple[rocksdict.Rdict, list[str]]:
        """The database in `path` opened read-only, and its families."""
        try:
            families = cls.stored_families(path)
            db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True),
                                 column_families={f: rocksdict.Options(raw_mode=True)
                                                  for f in families if f != "default"},
                                 access_type=rocksdict.AccessType.read_only())
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception with RocksDB's status
            raise _damaged(exc) from None
        return db, families

    @classmethod
    def read_stored(cls, path: Path) -> Iterator[Record]:
        db, families = cls._read_only(path)
        try:
            for name in families:
                cf = db if name == "default" else db.get_column_family(name)
                it = cf.iter()
                it.seek_to_first()
                while it.valid():
                    yield name, it.key(), it.value()
                    it.next()
                _check(it)
                del it, cf
        finally:
            db.close()
            del db
            gc.collect()

    @classmethod
    def scrub_read(cls, path: Path, stop: threading.Event) -> None:
        """An iterator of a read-only open over every family: each block it steps into is read
        from the file and its checksum checked; the records are not copied out. Paced (see
        `SCRUB_PACE`), and without a collection at the end: in a member, a full collection of its
        heap would stall the event loop."""
        db, families = cls._read_only(path)
        try:
            for name in families:
                cf = db if name == "default" else db.get_column_family(name)
                it = cf.iter()
                it.seek_to_first()
                n = 0
                while it.valid():
                    it.next()
                    n += 1
                    if n % SCRUB_PACE == 0:
                        if stop.is_set():
                            return
                        time.sleep(SCRUB_PAUSE)
                _check(it)
                del it, cf
        finally:
            db.close()
            del db


def is_rocksdb(path: Path) -> bool:
    """Whether `path` holds a RocksDB database."""
    return (path / "CURRENT").is_file()
