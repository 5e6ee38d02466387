"""Durable storage of one member: the log, the promised epoch, the snapshots and restore points.

Longer than 600 lines: most of it is one class, `DiskStorage`, each of whose changes is one
write batch over the same records (log, metadata, restore points), kept together so the order
of those writes can be read in one place; the layout of snapshot parts is `snapshot_store.py`.

`MemoryStorage` keeps everything in this process (storage mode `memory`); `DiskStorage` keeps
it in a database of the cluster's storage driver (`drivers/`: RocksDB by default, or SQLite) with
one family for the log and one for metadata. Every call that changes state takes one write
batch and at most one fsync (mode `disk-sync`).

Restore points (docs/dr.md, "Roll back"): besides the snapshot the log starts from, a
`DiskStorage` keeps the one before it (RESTORE_POINTS in all), and the log from the oldest,
so that the state can be rebuilt at any index from the oldest restore point on
(`roll_back`): a demoted DR site's members cut their lost tail that way. A restore point is the
serialised snapshot (state in memory) or a checkpoint of the whole database
(`checkpoints.py`; indexes on disk); the point at index 0 is the empty state.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import DataCorruption
from strongroom.persistence import checkpoints
from strongroom.persistence.damage import marked_damage, quarantine
from strongroom.persistence.drivers import (
    DEFAULT_DRIVER,
    DEFAULT_MEMORY,
    Batch,
    Driver,
    DriverMemory,
    Family,
    StoreDamaged,
    driver_class,
    open_driver,
)
from strongroom.persistence.pstore_report import ReportWriter
from strongroom.persistence.snapshot_store import (
    drop_strays,
    generation_range,
    part_keys,
    parts_of,
    snapshot_key,
    write_parts,
)

__all__ = ["Storage", "MemoryStorage", "DiskStorage", "LoadedState", "open_storage", "RESTORE_POINTS", "STATE_INSTALLING"]

STATE_INSTALLING = b"installing"  # in the indexes' `sm` family while a snapshot installs into them

_U64 = struct.Struct(">Q")
_POINT = struct.Struct(">QQ")

RESTORE_POINTS = 2
"""Restore points kept: the snapshot the log starts from (the latest compaction) and the one
before it, with the log from it. A roll back reaches back to the older one: at least
`compact_after_entries` entries before the latest snapshot (docs/dr.md, "Roll back")."""

META_PROMISED = b"promised_epoch"
META_PROMISED_TO = b"promised_to"
"""The member the promised epoch was promised to (empty: not known, e.g. a floor promised at start)."""
META_COMMIT = b"commit_index"
META_SYNCED = b"synced"
META_STORED = b"stored"
META_SNAPSHOT = b"snapshot"
"""The snapshot as versions before restore points stored it (read, and moved at the next
compaction)."""
META_SNAPSHOT_INDEX = b"snapshot_index"
META_SNAPSHOT_EPOCH = b"snapshot_epoch"
META_PROBE = b"probe"
"""Written and deleted by `probe` (never read)."""
PROBE_BYTES = 64 * 1024
"""A probe writes this much: more than a page, so a full disk cannot take it in the slack of a
page the write-ahead log already holds."""
SCRUB_DIR = "scrub"
"""In the data directory, `scrub.N`: what a scrub reads while it runs (a RocksDB checkpoint),
removed after."""
META_POINTS = b"restore_points"
"""(index, epoch) of every restore point kept, oldest first; the log is kept from the oldest."""
_ALL = (_U64.pack(0), _U64.pack(2**64 - 1))


@dataclass
class LoadedState:
    """What a member finds on its disk at start."""

    promised_epoch: int = 0
    promised_to: str = ""
    commit_index: int = 0
    synced: bool = False
    stored: bool = False
    snapshot: Sequence[bytes] | None = None  # its parts ([]: the indexes on disk hold the state)
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

    def set_promised(self, epoch: int, leader: str = "") -> None:
        """Persist the highest promised epoch, and the member it was promised to, before
        answering the promise."""

    def set_meta(self, commit_index: int | None = None, synced: bool | None = None,
                 stored: bool | None = None) -> None:
        """Persist the commit index hint, the synced flag and the stored-before flag."""

    def save_snapshot(self, index: int, epoch: int, data: Iterable[bytes]) -> None:
        """Store the snapshot at `index`, its parts (with indexes on disk the state in this
        storage is at `index`; `data` is then empty): the newest restore point. Restore points older than the
        RESTORE_POINTS newest go, with the log up to the oldest one kept."""

    def replace_with_snapshot(self, index: int, epoch: int, data: Iterable[bytes]) -> None:
        """Drop the whole log and every restore point and keep only this snapshot, its parts
        (catch-up from a leader)."""

    def restore_point(self, index: int) -> tuple[int, int] | None:
        """(index, epoch) of the newest restore point at or below `index` (None: none; the state
        cannot be rebuilt there)."""
        return None

    def roll_back(self, index: int, point: tuple[int, int]) -> None:
        """Make the log `point`'s snapshot and the entries after it up to `index` (a restart
        finds this, or the log as it was: never a mix); restore points above `index` go."""
        raise NotImplementedError("this storage keeps no restore point")

    def discard(self) -> None:
        """Drop the log, every snapshot and restore point and the indexes on disk in one write
        (the promised epoch stays): the member holds nothing any more."""

    def probe(self) -> None:
        """Write (and fsync) PROBE_BYTES and delete them again: raises what a log write would
        raise now (disk full, an I/O error, files gone). `storehealth.py` asks it."""

    def scrub(self, stop: threading.Event) -> None:
        """Read the whole store back from its files (scrub.py): StoreDamaged at the first damage;
        a storage without files has nothing to read."""

    def close(self) -> None:
        """Release files."""


class MemoryStorage(Storage):
    """Storage mode `memory`: state lives only in the process and in the peers."""


class DiskStorage(Storage):
    """Storage in a database of a storage driver; `sync=True` makes every write durable before
    it returns (disk-sync)."""

    durable = True

    def __init__(self, path: Path, sync: bool, state_families: tuple[str, ...] = (),
                 driver: str = DEFAULT_DRIVER, memory: DriverMemory = DEFAULT_MEMORY) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.sync = sync
        self.driver_name = driver
        self.memory = memory  # the database's in-memory bounds (realm `persistent_store`)
        self.driver_class = driver_class(driver)
        # Families of the state machine's indexes on disk (empty: not in this mode).
        self.state_families = state_families
        self.report: ReportWriter | None = None
        """The PSTORE report of the records this storage creates and deletes (the realm's
        `persistent_store.report`; docs/store-operations.md, "The store report"), or None."""
        self.damage = ""
        """Why the store found at start was moved aside (damage.py); empty when it was sound."""
        # A roll back a crash interrupted: finished if it was complete, else undone.
        checkpoints.recover(path)
        # Held while the scrub takes what it reads from the open database (`scrub`), and by
        # whatever closes it.
        self._scrub_lock = threading.Lock()
        self._scrubs = itertools.count(1)
        for left in path.glob(f"{SCRUB_DIR}.*"):  # a scrub's copy, left by a stop
            shutil.rmtree(left, ignore_errors=True)
        found = marked_damage(path) or None  # damage the scrub found while the member last ran
        if found is None:
            try:
                self._open()
                self._db.verify()
            except StoreDamaged as exc:
                found = str(exc)
        if found is None and "sm" in self._state_cfs and self._state_cfs["sm"].get(STATE_INSTALLING) is not None:
            found = "a snapshot install into the indexes on disk was interrupted: they are incomplete"
        if found is not None:  # out of the handler: its traceback holds the damaged database open
            if hasattr(self, "_db"):
                self._close_db()
            self.damage = quarantine(path, found)
            self._open()
        if state_families:
            # Checkpoints of restore points dropped (or never recorded) before a crash.
            checkpoints.prune(path, {i for i, _ in self.restore_points()})

    def _open(self) -> None:
        families = ("log", "meta", *(f"state_{name}" for name in self.state_families))
        self._db: Driver = open_driver(self.driver_name, self.path, families, strict=self.sync, memory=self.memory)
        db = self._db
        self._log = db.family("log")
        self._meta = db.family("meta")
        self._log_h = db.handle("log")
        self._meta_h = db.handle("meta")
        self._state_cfs = {name: db.family(f"state_{name}") for name in self.state_families}
        self._state_hs = {name: db.handle(f"state_{name}") for name in self.state_families}
        self._closing: threading.Thread | None = None
        self._broken = False

    @property
    def db(self) -> Driver:
        """The open database (its driver)."""
        return self._db

    def state_cf(self, name: str) -> Family:
        """A family of the indexes on disk, for reads."""
        self._ensure_open()
        return self._state_cfs[name]

    def state_handle(self, name: str) -> object:
        """A family of the indexes on disk, for batch writes."""
        self._ensure_open()
        return self._state_hs[name]

    def batch(self) -> Batch:
        """A new write batch of this storage's driver."""
        return self._db.batch()

    def write_state(self, wb: Batch) -> None:
        """Write a state-machine batch without fsync: the log entry it comes from is already
        stored, and the driver's journal keeps write order, so a later synced write (the next
        round's, or a compaction's) makes it durable, and a crash before that only replays the
        entry."""
        self._ensure_open()
        self._commit(wb, False)

    def _commit(self, wb: Batch, sync: bool) -> None:
        """Write a batch. After a failed write (disk full, I/O error) RocksDB refuses every
        later write until reopened: it is closed (`_detach`) and opened again at the next
        call, so writes work again once the cause is gone; the original error is raised (the
        batch was not applied)."""
        try:
            self._db.write(wb, sync)
        except Exception:
            self._detach()
            raise

    def _detach(self) -> None:
        """Close the database in a worker thread: after a failed write RocksDB's close waits
        about a second for its own error recovery (it releases the GIL), which on the loop
        thread would stall the member past its lease. Until it is closed every call raises
        StorageReopening."""
        self._broken = True
        db = getattr(self, "_db", None)
        for name in ("_log", "_meta", "_log_h", "_meta_h", "_state_cfs", "_state_hs", "_db"):
            if hasattr(self, name):
                delattr(self, name)
        if db is not None:
            self._closing = threading.Thread(target=_close_quietly, args=(db, self._scrub_lock), name="storage-close",
                                             daemon=True)
            self._closing.start()

    def _ensure_open(self) -> None:
        if self._broken:
            closing = self._closing
            if closing is not None and closing.is_alive():
                raise StorageReopening(f"the storage at {self.path} is being reopened after a failed write")
            self._closing = None
            self._close_db()
            self._open()

    def load(self) -> LoadedState:
        st = LoadedState()
        meta = self._meta
        raw = meta.get(META_PROMISED)
        st.promised_epoch = _U64.unpack(raw)[0] if raw else 0
        st.promised_to = (meta.get(META_PROMISED_TO) or b"").decode()
        raw = meta.get(META_COMMIT)
        st.commit_index = _U64.unpack(raw)[0] if raw else 0
        st.synced = meta.get(META_SYNCED) == b"1"
        st.stored = meta.get(META_STORED) == b"1"
        st.snapshot_index, st.snapshot_epoch = self._snapshot_mark()
        st.snapshot = self.snapshot_parts(st.snapshot_index)
        expected = st.snapshot_index + 1
        for key, value in self._log.scan(_U64.pack(expected)):
            index = _U64.unpack(key)[0]
            entry = rpb.LogEntry.FromString(value)
            if index != expected or entry.index != index:
                raise DataCorruption(f"log gap or mismatch at index {index}, expected {expected}")
            st.entries.append(entry)
            expected += 1
        return st

    def append(self, entries: list[rpb.LogEntry], truncate_after: int | None = None,
               commit_index: int | None = None, raws: list[bytes] | None = None) -> None:
        self._ensure_open()
        wb = self._db.batch()
        gone = []
        if truncate_after is not None:
            gone = self._reported_log(truncate_after + 1)
            wb.delete_range(_U64.pack(truncate_after + 1), _U64.pack(2**64 - 1), self._log_h)
        for i, entry in enumerate(entries):
            wb.put(_U64.pack(entry.index), raws[i] if raws else entry.SerializeToString(), self._log_h)
        if commit_index is not None:
            wb.put(META_COMMIT, _U64.pack(commit_index), self._meta_h)
        self._commit(wb, self.sync)
        if self.report is not None:
            self._report_log(gone, entries, raws)

    def _reported_log(self, start: int, end: int = 2**64 - 1) -> list[tuple[bytes, bytes]]:
        """The log records from `start` to `end` (exclusive) about to be deleted, while a report
        is written (else none: nothing is read)."""
        if self.report is None:
            return []
        return list(self._log.scan(_U64.pack(start), _U64.pack(end)))

    def _report_log(self, gone: list[tuple[bytes, bytes]], entries: list[rpb.LogEntry] = (),  # type: ignore[assignment]
                    raws: list[bytes] | None = None) -> None:
        report = self.report
        assert report is not None
        for key, value in gone:
            report.deleted("log", key, value)
        for i, entry in enumerate(entries):
            report.created("log", _U64.pack(entry.index), raws[i] if raws else entry.SerializeToString())

    def _report_points(self, had: list[tuple[int, int]], kept: list[tuple[int, int]],
                       created: tuple[int, bytes, Sequence[bytes]] | None = None) -> None:
        """Report the restore points' snapshot records dropped and the one created (its head
        and its parts)."""
        report = self.report
        if report is None:
            return
        for index, _ in had:
            if all(index != i for i, _ in kept):
                report.deleted("meta", snapshot_key(index), b"")
        if created is not None:
            index, head, parts = created
            report.created("meta", snapshot_key(index), head)
            for key, part in zip(part_keys(index, head), parts):
                report.created("meta", key, part)

    def read_entry(self, index: int) -> bytes:
        self._ensure_open()
        raw = self._log.get(_U64.pack(index))
        if raw is None:
            raise DataCorruption(f"log entry {index} is missing from storage")
        return raw

    def set_promised(self, epoch: int, leader: str = "") -> None:
        self._ensure_open()
        wb = self._db.batch()
        wb.put(META_PROMISED, _U64.pack(epoch), self._meta_h)
        wb.put(META_PROMISED_TO, leader.encode(), self._meta_h)
        self._commit(wb, self.sync)

    def set_meta(self, commit_index: int | None = None, synced: bool | None = None,
                 stored: bool | None = None) -> None:
        self._ensure_open()
        wb = self._db.batch()
        if stored is not None:
            wb.put(META_STORED, b"1" if stored else b"0", self._meta_h)
        if commit_index is not None:
            wb.put(META_COMMIT, _U64.pack(commit_index), self._meta_h)
        if synced is not None:
            wb.put(META_SYNCED, b"1" if synced else b"0", self._meta_h)
        self._commit(wb, self.sync)

    def scrub(self, stop: threading.Event) -> None:
        """Read the whole store back from its files as they are on disk now (scrub.py), in a
        worker thread: StoreDamaged at the first damage; returns early once `stop` is set. A
        storage closed or being reopened meanwhile is left for the next round."""
        work = self.path / f"{SCRUB_DIR}.{next(self._scrubs)}"
        try:
            with self._scrub_lock:
                db = getattr(self, "_db", None)
                if db is None or self._broken:
                    return
                source = db.scrub_source(work)
            self.driver_class.scrub_read(source, stop)
        except StoreDamaged as exc:
            # The copy's files are the store's own (hard links): name them where they live.
            raise StoreDamaged(str(exc).replace(str(work), str(self.path / "db"))) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def probe(self) -> None:
        self._ensure_open()
        # Two synced writes, not one batch: in one SQLite transaction the value's pages are freed
        # before the commit, so a full disk could pass the probe.
        wb = self._db.batch()
        wb.put(META_PROBE, bytes(PROBE_BYTES), self._meta_h)
        self._commit(wb, True)
        wb = self._db.batch()
        wb.delete(META_PROBE, self._meta_h)
        self._commit(wb, True)

    # --- snapshots and restore points ------------------------------------------------------------

    def _snapshot_mark(self) -> tuple[int, int]:
        """(index, epoch) of the snapshot the log starts from."""
        raw = self._meta.get(META_SNAPSHOT_INDEX)
        index = _U64.unpack(raw)[0] if raw else 0
        raw = self._meta.get(META_SNAPSHOT_EPOCH)
        return index, _U64.unpack(raw)[0] if raw else 0

    def snapshot_parts(self, index: int) -> Sequence[bytes] | None:
        """The parts of the snapshot at `index` (None: none there)."""
        raw = self._meta.get(snapshot_key(index))
        if raw is None and index == self._snapshot_mark()[0]:
            raw = self._meta.get(META_SNAPSHOT)  # stored by a version before restore points
        return parts_of(self, index, bytes(raw)) if raw is not None else None

    @property
    def meta_handle(self) -> object:
        """The metadata family, for batch writes (`write_meta`)."""
        self._ensure_open()
        return self._meta_h

    def write_meta(self, wb: Batch, sync: bool) -> None:
        self._ensure_open()
        self._commit(wb, sync)

    def meta_record(self, key: bytes) -> bytes | None:
        self._ensure_open()
        raw = self._meta.get(key)
        return bytes(raw) if raw is not None else None

    def restore_points(self) -> list[tuple[int, int]]:
        """(index, epoch) of the restore points kept, oldest first."""
        self._ensure_open()
        raw = self._meta.get(META_POINTS)
        if raw is not None:
            return [_POINT.unpack_from(raw, at) for at in range(0, len(raw), _POINT.size)]
        # Nothing recorded (a new member, or data of a version before restore points): the
        # snapshot the log starts from; with indexes on disk only the empty state (index 0),
        # since no checkpoint of the state was taken.
        index, epoch = self._snapshot_mark()
        return [(index, epoch)] if index == 0 or not self.state_families else []

    def restore_point(self, index: int) -> tuple[int, int] | None:
        for point in reversed(self.restore_points()):
            if point[0] > index:
                continue
            if point[0] == 0:
                return point
            if self.state_families:
                if checkpoints.directory(self.path, point[0]).is_dir():
                    return point
            elif self.snapshot_parts(point[0]) is not None:
                return point
        return None

    def _keep_points(self, wb: Batch, kept: list[tuple[int, int]]) -> None:
        """Record `kept` as the restore points and drop the snapshots of the others."""
        had = self.restore_points()
        legacy = self._meta.get(META_SNAPSHOT)
        if legacy is not None:
            # The one snapshot of a version before restore points: moved under its index.
            index = self._snapshot_mark()[0]
            if any(i == index for i, _ in kept):
                wb.put(snapshot_key(index), legacy, self._meta_h)
            wb.delete(META_SNAPSHOT, self._meta_h)
        kept_at = {i for i, _ in kept}
        for point in had:
            if point[0] not in kept_at:
                wb.delete_range(snapshot_key(point[0]), snapshot_key(point[0] + 1), self._meta_h)
        wb.put(META_POINTS, b"".join(_POINT.pack(*p) for p in kept), self._meta_h)

    def save_snapshot(self, index: int, epoch: int, data: Iterable[bytes]) -> None:
        self.drop_strays(index)
        head, parts = write_parts(self, index, data)
        self.record_snapshot(index, epoch, head, parts)

    def drop_strays(self, index: int) -> None:
        """Before a snapshot at `index` is written: parts a stopped write left (`drop_strays`)."""
        self._ensure_open()
        drop_strays(self, index, self.restore_points())

    def record_snapshot(self, index: int, epoch: int, head: bytes, parts: list[bytes]) -> None:
        """Make the snapshot at `index`, whose parts are written (`head` names them; `parts`:
        the parts when a report is written), the newest restore point, in one synced write,
        and drop the log's entries below the oldest point kept."""
        self._ensure_open()
        live = self.restore_points()
        older = [p for p in live if p[0] < index]
        kept = older[-(RESTORE_POINTS - 1):] if RESTORE_POINTS > 1 else []
        kept.append((index, epoch))
        if self.state_families:
            # The state is at `index` now: its checkpoint is the restore point.
            checkpoints.create(self._db, self.path, index)
        had = self.restore_points() if self.report is not None else []
        gone = self._reported_log(0, kept[0][0] + 1)
        wb = self._db.batch()
        self._keep_points(wb, kept)
        wb.put(snapshot_key(index), head, self._meta_h)
        wb.put(META_SNAPSHOT_INDEX, _U64.pack(index), self._meta_h)
        wb.put(META_SNAPSHOT_EPOCH, _U64.pack(epoch), self._meta_h)
        # The log is kept from the oldest restore point on.
        wb.delete_range(_U64.pack(0), _U64.pack(kept[0][0] + 1), self._log_h)
        # A snapshot replaces log entries: it must be on disk before they are gone.
        self._commit(wb, True)
        if self.report is not None:
            self._report_log(gone)
            self._report_points(had, kept, (index, head, parts))
        if self.state_families:
            checkpoints.prune(self.path, {i for i, _ in kept})

    def replace_with_snapshot(self, index: int, epoch: int, data: Iterable[bytes]) -> None:
        self._ensure_open()
        if self.state_families and index:
            checkpoints.create(self._db, self.path, index)
        self.drop_strays(index)
        head, parts = write_parts(self, index, data)
        self.record_replacement(index, epoch, head, parts)

    def record_replacement(self, index: int, epoch: int, head: bytes, parts: list[bytes]) -> None:
        """Make the snapshot at `index`, whose parts are written (`head` names them), the only
        restore point and drop the whole log, in one synced write (`replace_with_snapshot`)."""
        self._ensure_open()
        live = self.restore_points()
        old = self._meta.get(snapshot_key(index)) if any(i == index for i, _ in live) else None
        had = live if self.report is not None else []
        gone = self._reported_log(0)
        wb = self._db.batch()
        self._keep_points(wb, [(index, epoch)])
        if old:
            # A point at the same index before: its parts go, the new generation's stay.
            wb.delete_range(*generation_range(index, bytes(old)), self._meta_h)
        wb.put(snapshot_key(index), head, self._meta_h)
        wb.put(META_SNAPSHOT_INDEX, _U64.pack(index), self._meta_h)
        wb.put(META_SNAPSHOT_EPOCH, _U64.pack(epoch), self._meta_h)
        wb.delete_range(*_ALL, self._log_h)
        self._commit(wb, True)
        if self.report is not None:
            self._report_log(gone)
            self._report_points(had, [(index, epoch)], (index, head, parts))
        if self.state_families:
            checkpoints.prune(self.path, {index})

    def roll_back(self, index: int, point: tuple[int, int]) -> None:
        self._ensure_open()
        kept = [p for p in self.restore_points() if p[0] <= index]
        if point not in kept:
            raise DataCorruption(f"no restore point at index {point[0]} to roll back to index {index}")
        if self.state_families:
            self._roll_back_on_disk(index, point, kept)
            return
        # The state is rebuilt in memory from the snapshot: one write makes the log start at
        # it and end at `index`.
        had = self.restore_points() if self.report is not None else []
        gone = self._reported_log(index + 1)
        wb = self._db.batch()
        self._keep_points(wb, kept)
        wb.put(META_SNAPSHOT_INDEX, _U64.pack(point[0]), self._meta_h)
        wb.put(META_SNAPSHOT_EPOCH, _U64.pack(point[1]), self._meta_h)
        wb.put(META_COMMIT, _U64.pack(index), self._meta_h)
        wb.delete_range(_U64.pack(index + 1), _U64.pack(2**64 - 1), self._log_h)
        self._commit(wb, True)
        if self.report is not None:
            self._report_log(gone)
            self._report_points(had, kept)

    def _roll_back_on_disk(self, index: int, point: tuple[int, int], kept: list[tuple[int, int]]) -> None:
        """Indexes on disk: the state lives in this database, changed in place. The rolled-back
        database is built beside it from the checkpoint at `point` (the state there), with this
        log's entries from the oldest kept restore point to `index` and this member's promises,
        then swapped in (`checkpoints.swap_in`); the entries after `point` are applied when the
        state is opened (as after a restart)."""
        work = self.path / checkpoints.ROLLBACK
        if work.exists():
            shutil.rmtree(work)
        work.mkdir()
        if point[0]:
            self.driver_class.copy(checkpoints.directory(self.path, point[0]), work / "db")
        target = DiskStorage(work, sync=False, state_families=self.state_families, driver=self.driver_name,
                             memory=self.memory)
        try:
            meta, log_h = target._meta_h, target._log_h
            wb = target.batch()
            # The checkpoint's own log and metadata are of the time it was taken.
            wb.delete_range(*_ALL, log_h)
            wb.delete_range(b"", b"\xff" * 16, meta)
            for key in (META_PROMISED, META_SYNCED, META_STORED):
                value = self._meta.get(key)
                if value is not None:
                    wb.put(key, value, meta)
            wb.put(META_COMMIT, _U64.pack(index), meta)
            wb.put(META_SNAPSHOT_INDEX, _U64.pack(point[0]), meta)
            wb.put(META_SNAPSHOT_EPOCH, _U64.pack(point[1]), meta)
            wb.put(META_POINTS, b"".join(_POINT.pack(*p) for p in kept), meta)
            for at, _ in kept:
                wb.put(snapshot_key(at), b"", meta)
            expected = kept[0][0] + 1
            for key, value in self._log.scan(_U64.pack(expected)):
                if expected > index or _U64.unpack(key)[0] != expected:
                    break
                wb.put(key, value, log_h)
                expected += 1
                if expected % 1024 == 0:
                    target._commit(wb, False)
                    wb = target.batch()
            if expected != index + 1:
                raise DataCorruption(f"the log lacks entry {expected}, between the restore point at index "
                                     f"{kept[0][0]} and index {index}")
            # Synced: the WAL holds every write before it.
            target._commit(wb, True)
        finally:
            target.close()
        checkpoints.fsync_tree(work / "db")
        self._close_db()
        checkpoints.swap_in(self.path)
        self._open()
        checkpoints.prune(self.path, {i for i, _ in kept})

    def discard(self) -> None:
        self._ensure_open()
        had = self.restore_points() if self.report is not None else []
        gone = self._reported_log(0)
        wb = self._db.batch()
        self._keep_points(wb, [])
        wb.delete(META_POINTS, self._meta_h)
        wb.put(META_SNAPSHOT_INDEX, _U64.pack(0), self._meta_h)
        wb.put(META_SNAPSHOT_EPOCH, _U64.pack(0), self._meta_h)
        wb.put(META_COMMIT, _U64.pack(0), self._meta_h)
        wb.delete_range(*_ALL, self._log_h)
        for handle in self._state_hs.values():
            wb.delete_range(b"", b"\xff" * 64, handle)
        self._commit(wb, True)
        if self.report is not None:
            self._report_log(gone)
            self._report_points(had, [])
        if self.state_families:
            checkpoints.prune(self.path, set())

    def close(self) -> None:
        if self._closing is not None:
            self._closing.join(10.0)
        self._close_db()
        if self.report is not None:
            self.report.close()

    def _close_db(self) -> None:
        # Family views hold the database open; drop them before closing it.
        for name in ("_log", "_meta", "_log_h", "_meta_h", "_state_cfs", "_state_hs"):
            if hasattr(self, name):
                delattr(self, name)
        db = getattr(self, "_db", None)
        if db is not None:
            with self._scrub_lock:
                db.close()
                del self._db


class StorageReopening(OSError):
    """The storage is closed after a failed write and not open again yet (`DiskStorage._detach`)."""


def _close_quietly(db: Driver, scrubbing: threading.Lock) -> None:
    try:
        with scrubbing:
            db.close()
    except Exception:  # noqa: BLE001 - closing a failed database
        pass


def open_storage(mode: str, path: Path, state_families: tuple[str, ...] = (),
                 driver: str = DEFAULT_DRIVER, memory: DriverMemory = DEFAULT_MEMORY) -> Storage:
    """Storage for a storage mode (memory, disk-sync, disk-async) in a database of `driver` held
    in memory within `memory`; with `state_families`, also the families of the indexes on disk."""
    if mode == "memory":
        return MemoryStorage()
    if mode not in ("disk-sync", "disk-async"):
        raise ValueError(f"unknown storage mode {mode!r}")
    return DiskStorage(path, sync=mode == "disk-sync", state_families=state_families, driver=driver, memory=memory)
