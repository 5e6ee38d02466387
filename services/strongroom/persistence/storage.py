"""Durable storage of one member: the log, the promised epoch and the latest snapshot.

`MemoryStorage` keeps everything in this process (storage mode `memory`); `RocksStorage` keeps
it in RocksDB (rocksdict) with one column family for the log and one for metadata. Every call
that changes state takes one WriteBatch and at most one fsync (mode `disk-sync`).
"""

from __future__ import annotations

import gc
import struct
from dataclasses import dataclass, field
from pathlib import Path

import rocksdict

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import DataCorruption

__all__ = ["Storage", "MemoryStorage", "RocksStorage", "LoadedState", "open_storage"]

_U64 = struct.Struct(">Q")

META_PROMISED = b"promised_epoch"
META_COMMIT = b"commit_index"
META_SYNCED = b"synced"
META_STORED = b"stored"
META_SNAPSHOT = b"snapshot"
META_SNAPSHOT_INDEX = b"snapshot_index"
META_SNAPSHOT_EPOCH = b"snapshot_epoch"


@dataclass
class LoadedState:
    """What a member finds on its disk at start."""

    promised_epoch: int = 0
    commit_index: int = 0
    synced: bool = False
    stored: bool = False
    snapshot: bytes | None = None
    snapshot_index: int = 0
    snapshot_epoch: int = 0
    entries: list[rpb.LogEntry] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing at all was stored (a new member, or one whose disk was wiped)."""
        return self.snapshot is None and not self.entries and self.promised_epoch == 0


class Storage:
    """Interface of a member's storage; the memory variant persists nothing."""

    durable: bool = False

    def load(self) -> LoadedState:
        """Everything stored, for recovery at start."""
        return LoadedState()

    def append(self, entries: list[rpb.LogEntry], truncate_after: int | None = None,
               commit_index: int | None = None, raws: list[bytes] | None = None) -> None:
        """Store entries (`raws`: their serialised form, if the caller has it), after dropping
        every entry above `truncate_after`, in one batch (fsynced in disk-sync)."""

    def read_entry(self, index: int) -> bytes:
        """A stored log entry, serialised (only durable storage keeps any)."""
        raise DataCorruption(f"log entry {index} is not in memory and this storage keeps none")

    def set_promised(self, epoch: int) -> None:
        """Persist the highest promised epoch before answering the promise."""

    def set_meta(self, commit_index: int | None = None, synced: bool | None = None,
                 stored: bool | None = None) -> None:
        """Persist the commit index hint, the synced flag and the stored-before flag."""

    def save_snapshot(self, index: int, epoch: int, data: bytes, drop_log_through: int) -> None:
        """Store a snapshot and drop log entries up to `drop_log_through`."""

    def replace_with_snapshot(self, index: int, epoch: int, data: bytes) -> None:
        """Drop the whole log and keep only the snapshot (catch-up from a leader)."""

    def snapshot_data(self) -> bytes | None:
        """The stored snapshot the log starts from (None: this storage keeps none)."""
        return None

    def close(self) -> None:
        """Release files."""


class MemoryStorage(Storage):
    """Storage mode `memory`: state lives only in the process and in the peers."""


class RocksStorage(Storage):
    """RocksDB storage; `sync=True` fsyncs the WAL in the same write (disk-sync)."""

    durable = True

    def __init__(self, path: Path, sync: bool, state_families: tuple[str, ...] = ()) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Column families of the state machine's indexes on disk (empty: not in this mode).
        self.state_families = state_families
        self._open()
        self._wo = rocksdict.WriteOptions()
        self._wo.sync = sync
        self._nosync = rocksdict.WriteOptions()
        self._nosync.sync = False

    def _open(self) -> None:
        path = self.path
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        cf_opts = rocksdict.Options(raw_mode=True)
        families = {"log": cf_opts, "meta": cf_opts}
        families.update({f"state_{name}": cf_opts for name in self.state_families})
        self._db = rocksdict.Rdict(str(path / "db"), options=opts, column_families=families)
        self._log = self._db.get_column_family("log")
        self._meta = self._db.get_column_family("meta")
        self._log_h = self._db.get_column_family_handle("log")
        self._meta_h = self._db.get_column_family_handle("meta")
        self._state_cfs = {name: self._db.get_column_family(f"state_{name}") for name in self.state_families}
        self._state_hs = {name: self._db.get_column_family_handle(f"state_{name}") for name in self.state_families}
        self._broken = False

    def state_cf(self, name: str) -> rocksdict.Rdict:
        """A column family of the indexes on disk, for reads."""
        return self._state_cfs[name]

    def state_handle(self, name: str) -> rocksdict.ColumnFamily:
        """A column family of the indexes on disk, for batch writes."""
        return self._state_hs[name]

    def write_state(self, wb: rocksdict.WriteBatch) -> None:
        """Write a state-machine batch without fsync: the log entry it comes from is already
        stored, and the WAL keeps write order, so a later synced write (the next round's, or a
        compaction's) makes it durable, and a crash before that only replays the entry."""
        self._ensure_open()
        self._commit(wb, self._nosync)

    def _commit(self, wb: rocksdict.WriteBatch, opts: rocksdict.WriteOptions) -> None:
        """Write a batch. After a failed write (disk full, I/O error) RocksDB refuses every
        later write until reopened: reopen it, so writes work again once the cause is gone,
        and raise the original error (the batch was not applied)."""
        try:
            self._db.write(wb, opts)
        except Exception:
            self._reopen()
            raise

    def _reopen(self) -> None:
        self._broken = True
        try:
            self._close_db()
            self._open()
        except Exception:  # noqa: BLE001 - still failing: the next write tries again
            pass

    def _ensure_open(self) -> None:
        if self._broken:
            self._close_db()
            self._open()

    def load(self) -> LoadedState:
        st = LoadedState()
        meta = self._meta
        raw = meta.get(META_PROMISED)
        st.promised_epoch = _U64.unpack(raw)[0] if raw else 0
        raw = meta.get(META_COMMIT)
        st.commit_index = _U64.unpack(raw)[0] if raw else 0
        st.synced = meta.get(META_SYNCED) == b"1"
        st.stored = meta.get(META_STORED) == b"1"
        st.snapshot = meta.get(META_SNAPSHOT)
        raw = meta.get(META_SNAPSHOT_INDEX)
        st.snapshot_index = _U64.unpack(raw)[0] if raw else 0
        raw = meta.get(META_SNAPSHOT_EPOCH)
        st.snapshot_epoch = _U64.unpack(raw)[0] if raw else 0
        it = self._log.iter()
        it.seek(_U64.pack(st.snapshot_index + 1))
        expected = st.snapshot_index + 1
        while it.valid():
            index = _U64.unpack(it.key())[0]
            entry = rpb.LogEntry.FromString(it.value())
            if index != expected or entry.index != index:
                raise DataCorruption(f"log gap or mismatch at index {index}, expected {expected}")
            st.entries.append(entry)
            expected += 1
            it.next()
        return st

    def append(self, entries: list[rpb.LogEntry], truncate_after: int | None = None,
               commit_index: int | None = None, raws: list[bytes] | None = None) -> None:
        self._ensure_open()
        wb = rocksdict.WriteBatch(raw_mode=True)
        if truncate_after is not None:
            wb.delete_range(_U64.pack(truncate_after + 1), _U64.pack(2**64 - 1), self._log_h)
        for i, entry in enumerate(entries):
            wb.put(_U64.pack(entry.index), raws[i] if raws else entry.SerializeToString(), self._log_h)
        if commit_index is not None:
            wb.put(META_COMMIT, _U64.pack(commit_index), self._meta_h)
        self._commit(wb, self._wo)

    def read_entry(self, index: int) -> bytes:
        self._ensure_open()
        raw = self._log.get(_U64.pack(index))
        if raw is None:
            raise DataCorruption(f"log entry {index} is missing from storage")
        return raw

    def set_promised(self, epoch: int) -> None:
        self._ensure_open()
        wb = rocksdict.WriteBatch(raw_mode=True)
        wb.put(META_PROMISED, _U64.pack(epoch), self._meta_h)
        self._commit(wb, self._wo)

    def set_meta(self, commit_index: int | None = None, synced: bool | None = None,
                 stored: bool | None = None) -> None:
        self._ensure_open()
        wb = rocksdict.WriteBatch(raw_mode=True)
        if stored is not None:
            wb.put(META_STORED, b"1" if stored else b"0", self._meta_h)
        if commit_index is not None:
            wb.put(META_COMMIT, _U64.pack(commit_index), self._meta_h)
        if synced is not None:
            wb.put(META_SYNCED, b"1" if synced else b"0", self._meta_h)
        self._commit(wb, self._wo)

    def save_snapshot(self, index: int, epoch: int, data: bytes, drop_log_through: int) -> None:
        self._ensure_open()
        wb = rocksdict.WriteBatch(raw_mode=True)
        wb.put(META_SNAPSHOT, data, self._meta_h)
        wb.put(META_SNAPSHOT_INDEX, _U64.pack(index), self._meta_h)
        wb.put(META_SNAPSHOT_EPOCH, _U64.pack(epoch), self._meta_h)
        wb.delete_range(_U64.pack(0), _U64.pack(drop_log_through + 1), self._log_h)
        # A snapshot replaces log entries: it must be on disk before they are gone.
        wo = rocksdict.WriteOptions()
        wo.sync = True
        self._commit(wb, wo)

    def replace_with_snapshot(self, index: int, epoch: int, data: bytes) -> None:
        self.save_snapshot(index, epoch, data, 2**64 - 2)

    def snapshot_data(self) -> bytes | None:
        self._ensure_open()
        raw = self._meta.get(META_SNAPSHOT)
        return bytes(raw) if raw is not None else None

    def close(self) -> None:
        self._close_db()

    def _close_db(self) -> None:
        # Column-family views hold the database open; drop them before closing it.
        for name in ("_log", "_meta", "_log_h", "_meta_h", "_state_cfs", "_state_hs"):
            if hasattr(self, name):
                delattr(self, name)
        db = getattr(self, "_db", None)
        if db is not None:
            try:
                db.close()
            except Exception:  # noqa: BLE001 - closing a failed database
                pass
            del self._db
        gc.collect()


def open_storage(mode: str, path: Path, state_families: tuple[str, ...] = ()) -> Storage:
    """Storage for a cluster's storage mode: memory, disk-sync or disk-async; with
    `state_families`, also the column families of the indexes on disk."""
    if mode == "memory":
        return MemoryStorage()
    if mode == "disk-sync":
        return RocksStorage(path, sync=True, state_families=state_families)
    if mode == "disk-async":
        return RocksStorage(path, sync=False, state_families=state_families)
    raise ValueError(f"unknown storage mode {mode!r}")
