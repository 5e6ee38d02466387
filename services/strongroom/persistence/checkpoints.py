"""Checkpoints of a member's database and the swap that restores one (docs/dr.md, "Roll
back").

A member with indexes on disk keeps its state machine in its database, mutated in place; to
rebuild the state at an older index it keeps a checkpoint of the whole database at each of its
last restore points (`DiskStorage`, RESTORE_POINTS): `data_dir/checkpoints/<index>`, made by
the storage driver (`Driver.checkpoint`): RocksDB flushes its memtables and hard-links its SST
files (cheap, and the files are shared with the live database until RocksDB's own compaction
rewrites them); SQLite copies its database with its online backup.

A roll back builds the rolled-back database beside the live one, in `data_dir/rollback/db` (a
copy of a checkpoint, then the log and metadata written into it), marks it complete
(`data_dir/rollback/READY`), and only then swaps it in by renaming directories. A member killed
at any point restarts (`recover`) into one database or the other, never a mix: without the mark
the half-built copy is removed (the old database stays); with it the swap is finished.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from strongroom.persistence.drivers import Driver

__all__ = ["create", "recover", "swap_in", "prune", "pinned", "directory", "fsync_dir", "fsync_tree",
           "CHECKPOINTS", "ROLLBACK", "READY"]

CHECKPOINTS = "checkpoints"
ROLLBACK = "rollback"
READY = "READY"
_LIVE = "db"
_OLD = "db.old"


def directory(data_dir: Path, index: int) -> Path:
    """Where the checkpoint of the restore point at `index` lives."""
    return data_dir / CHECKPOINTS / f"{index:020d}"


def create(db: Driver, data_dir: Path, index: int) -> Path:
    """A checkpoint of `db` as it is now, for the restore point at `index` (a leftover of an
    earlier attempt at the same index, never listed, is replaced)."""
    target = directory(data_dir, index)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    db.checkpoint(target)
    # The restore point is recorded (synced) right after: its files must be on disk first.
    fsync_tree(target)
    fsync_dir(target.parent)
    return target


def swap_in(data_dir: Path) -> None:
    """The rolled-back database (`data_dir/rollback/db`, complete) becomes the live one. The
    caller closed the live database; each step is one rename, and `recover` finishes the swap
    after a crash at any of them."""
    work = data_dir / ROLLBACK
    (work / READY).touch()
    fsync_dir(work)
    _finish(data_dir)


def recover(data_dir: Path) -> None:
    """At start, before the database is opened: finish a swap that was marked complete, or
    drop a rolled-back database that was not (the live one is then as it was)."""
    work = data_dir / ROLLBACK
    if (work / READY).exists():
        _finish(data_dir)
    elif work.exists():
        shutil.rmtree(work)
    old = data_dir / _OLD
    if old.exists():
        shutil.rmtree(old)


def _finish(data_dir: Path) -> None:
    work = data_dir / ROLLBACK
    live, old, new = data_dir / _LIVE, data_dir / _OLD, work / _LIVE
    if new.exists():
        if live.exists():
            if old.exists():
                shutil.rmtree(old)
            os.rename(live, old)
            fsync_dir(data_dir)
        os.rename(new, live)
        fsync_dir(data_dir)
    shutil.rmtree(work)
    if old.exists():
        shutil.rmtree(old)


def prune(data_dir: Path, keep: set[int]) -> None:
    """Remove the checkpoints of restore points no longer kept (and leftovers of a crash); one
    being read (`pinned`) stays until the next prune after it is released."""
    root = data_dir / CHECKPOINTS
    if not root.is_dir():
        return
    for path in root.iterdir():
        if not (path.name.isdigit() and int(path.name) in keep) and not _pins.get(path):
            shutil.rmtree(path, ignore_errors=True)


_pins: dict[Path, int] = {}


@contextmanager
def pinned(data_dir: Path, index: int) -> Iterator[Path]:
    """The checkpoint at `index`, kept while the block reads it (a snapshot for a peer)."""
    path = directory(data_dir, index)
    _pins[path] = _pins.get(path, 0) + 1
    try:
        yield path
    finally:
        _pins[path] -= 1
        if not _pins[path]:
            del _pins[path]


def fsync_dir(path: Path) -> None:
    """Make the entries of a directory (files created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync every file under `path` and the directory itself."""
    for entry in path.iterdir():
        if entry.is_file():
            fd = os.open(entry, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(path)
