"""Migration of a member's persistent store by unload and load (docs/store-operations.md,
"Migration: unload and load"): the domain, without gRPC (`migration_server.py` is the wire).

A cluster's driver or a store's capacity changes by moving each member's store, raw record by
raw record, into a new store. Two instances run per member store:

    pstore-unload  reads the member's store (`data_dir/db` and the checkpoints of its restore
                   points) from a read-only open, never changing it, and sends every record;
    pstore-load    writes the records it receives, unchanged, into a new store of the driver it
                   was given, which must be empty.

Before anything is sent, the two compare each other (`handshake_problems`): one of each run
mode, the same version and log format, each at the address the other was given, the same
cluster and member, and not the same store (a fingerprint of each data directory). Any problem
stops both. After the transfer the load reads its new store back and both compare the counts
(`Counts`: records, bytes and messages per database and family).

The records keep their keys and values, so the new store holds exactly the log, the metadata
(promised epoch, commit index, restore points) and the indexes on disk of the old one: the
member started on it with the new driver is the member it was. The swap (`data_dir/swap`) is a
cache thrown away at every start and is not moved.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from strongroom.persistence import checkpoints
from strongroom.persistence.drivers import MARKER, driver_class, open_driver, written_by
from strongroom.persistence.drivers.base import Driver
from strongroom.persistence.log import LOG_FORMAT
from strongroom.persistence.shared_standby import read_store_id, software_version

__all__ = ["Counts", "Loader", "MigrationMode", "Side", "handshake_problems", "load_problems", "source_databases",
           "StoreInUse", "unload_lock", "unload_problems"]

LIVE = "db"
"""The live database, relative to the data directory."""


class MigrationMode(str, Enum):
    """The run mode of a migration instance."""

    UNLOAD = "pstore-unload"
    LOAD = "pstore-load"

    @property
    def other(self) -> MigrationMode:
        return MigrationMode.LOAD if self is MigrationMode.UNLOAD else MigrationMode.UNLOAD


@dataclass(frozen=True)
class Side:
    """What an instance says of itself in the handshake."""

    run_mode: str
    address: str
    partner: str
    version: str
    log_format: int
    driver: str
    fingerprints: tuple[str, ...]
    cluster: str
    member: str
    data_dir: str


def fingerprints(data_dir: Path) -> tuple[str, ...]:
    """The store's identity: host, device and inode of the data directory (and the store id a
    shared store's directory holds): two instances sharing one of these use the same store."""
    st = os.stat(data_dir)
    found = [f"{socket.gethostname()}:{st.st_dev}:{st.st_ino}"]
    store_id = read_store_id(data_dir)
    if store_id:
        found.append(f"store-id:{store_id}")
    return tuple(found)


def side(mode: MigrationMode, address: str, partner: str, driver: str, data_dir: Path, cluster: str,
         member: str) -> Side:
    """This instance's side of the handshake."""
    return Side(mode.value, address, partner, software_version(), LOG_FORMAT, driver, fingerprints(data_dir), cluster,
                member, str(data_dir))


def handshake_problems(ours: Side, theirs: Side) -> list[str]:
    """Why the two instances may not migrate together, one sentence each (empty: they may). The
    same function on both sides, each with itself first."""
    problems = []
    if {ours.run_mode, theirs.run_mode} != {m.value for m in MigrationMode}:
        problems.append(f"both instances run in mode {ours.run_mode} ({ours.address} and {theirs.address}): start "
                        f"one with `strongroom store unload` and the other with `strongroom store load`")
    if theirs.version != ours.version:
        problems.append(f"the instance at {theirs.address} runs version {theirs.version}, the one at {ours.address} "
                        f"{ours.version}: migrate with the same version on both sides")
    if theirs.log_format != ours.log_format:
        problems.append(f"the instance at {theirs.address} writes log format {theirs.log_format}, the one at "
                        f"{ours.address} {ours.log_format}")
    if ours.partner != theirs.address:
        problems.append(f"the instance at {ours.address} was given {ours.partner} as its partner, but its partner "
                        f"says it is at {theirs.address}: give each instance the other's address (--partner)")
    if theirs.partner != ours.address:
        problems.append(f"the instance at {theirs.address} was given {theirs.partner} as its partner, but its "
                        f"partner says it is at {ours.address}: give each instance the other's address (--partner)")
    if (theirs.cluster, theirs.member) != (ours.cluster, ours.member):
        problems.append(f"the instance at {theirs.address} migrates the store of member {theirs.member} of cluster "
                        f"{theirs.cluster}, the one at {ours.address} that of {ours.member} of {ours.cluster}: "
                        f"pair the instances of one member")
    shared = set(ours.fingerprints) & set(theirs.fingerprints)
    if shared:
        problems.append(f"both instances point at the same store ({ours.data_dir} and {theirs.data_dir}, "
                        f"{sorted(shared)[0]}): the load needs a new, empty data directory")
    return problems


def source_databases(data_dir: Path) -> list[tuple[str, Path]]:
    """The databases an unload reads, relative name and path: the live one, then the checkpoint
    of each restore point (members with indexes on disk). Raises ValueError (the sentence says
    why) when there is none or a roll back is half done."""
    if (data_dir / checkpoints.ROLLBACK).exists() or (data_dir / "db.old").exists():
        raise ValueError(f"a roll back is under way in {data_dir}: start the member once (it finishes or drops it), "
                         "stop it, then unload")
    if written_by(data_dir, data_dir / LIVE) is None:
        raise ValueError(f"{data_dir} holds no persistent store (no {LIVE}/ database): give the member's data "
                         "directory (--store-dir)")
    found = [(LIVE, data_dir / LIVE)]
    root = data_dir / checkpoints.CHECKPOINTS
    if root.is_dir():
        found += [(f"{checkpoints.CHECKPOINTS}/{p.name}", p) for p in sorted(root.iterdir()) if p.is_dir()]
    return found


def unload_problems(data_dir: Path) -> list[str]:
    """What stops an unload of `data_dir` (empty: it may run)."""
    try:
        source_databases(data_dir)
    except ValueError as err:
        return [str(err)]
    return []


def load_problems(data_dir: Path) -> list[str]:
    """What stops a load into `data_dir` (empty: it is empty, or does not exist yet)."""
    if written_by(data_dir, data_dir / LIVE) is not None or (data_dir / MARKER).exists():
        return [f"the load's data directory {data_dir} already holds a store: records are loaded into an empty "
                "store only (give a new directory)"]
    if (data_dir / checkpoints.CHECKPOINTS).exists():
        return [f"the load's data directory {data_dir} already holds checkpoints: give a new directory"]
    return []


class StoreInUse(Exception):
    """A member holds the store an unload was asked to read."""


def unload_lock(data_dir: Path) -> int | None:
    """Hold RocksDB's own lock of the live database for the unload (a file descriptor to close
    at the end; None for a driver without one): a member running on the store holds it, and a
    member started during the unload cannot open the store. StoreInUse when it is held."""
    lock = data_dir / LIVE / "LOCK"
    if not lock.is_file():
        return None
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StoreInUse(f"a process holds the store in {data_dir} open (RocksDB's LOCK): stop the member "
                         "before unloading its store") from None
    return fd


@dataclass
class FamilyCount:
    """Records, bytes (keys and values) and messages of one family of one database."""

    records: int = 0
    bytes: int = 0
    elements: int = 0


@dataclass
class Counts:
    """One side's counts, per (database, family), in the order first seen."""

    families: dict[tuple[str, str], FamilyCount] = field(default_factory=dict)

    def add(self, database: str, family: str, key: bytes, value: bytes, elements: int) -> None:
        count = self.families.get((database, family))
        if count is None:
            count = self.families[(database, family)] = FamilyCount()
        count.records += 1
        count.bytes += len(key) + len(value)
        count.elements += elements

    @property
    def records(self) -> int:
        return sum(c.records for c in self.families.values())

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.families.values())

    @property
    def elements(self) -> int:
        return sum(c.elements for c in self.families.values())

    def differences(self, other: Counts, ours: str = "unload", theirs: str = "load") -> list[str]:
        """Every count that differs, one sentence each (empty: equal)."""
        out = []
        for key in [*self.families, *(k for k in other.families if k not in self.families)]:
            a = self.families.get(key, FamilyCount())
            b = other.families.get(key, FamilyCount())
            if a != b:
                out.append(f"{key[0]}/{key[1]}: {ours} {a.records} records, {a.bytes} bytes, {a.elements} messages; "
                           f"{theirs} {b.records} records, {b.bytes} bytes, {b.elements} messages")
        return out


def read_databases(data_dir: Path, driver: str) -> Iterator[tuple[str, list[str], Iterator[tuple[str, bytes, bytes]]]]:
    """(database, families, its records) for every database of `data_dir`, read-only."""
    cls = driver_class(driver)
    for name, path in source_databases(data_dir):
        yield name, cls.stored_families(path), cls.read_stored(path)


class Loader:
    """Writes raw records into the new store of a load instance: database by database, in
    unsynced batches, each database synced once it is complete."""

    BATCH = 10_000

    def __init__(self, data_dir: Path, driver: str) -> None:
        self.data_dir = data_dir
        self.driver = driver
        self.counts = Counts()
        self._db: Driver | None = None
        self._database = ""
        self._batch: object | None = None
        self._pending = 0

    def open(self, database: str, families: list[str]) -> None:
        """Start writing `database` (a name `source_databases` gives) with these families."""
        self._finish_database()
        if database != LIVE and not database.startswith(f"{checkpoints.CHECKPOINTS}/"):
            raise ValueError(f"unknown database {database!r} (only {LIVE} and {checkpoints.CHECKPOINTS}/<index>)")
        name = database.rsplit("/", 1)[-1]
        if database != LIVE and not name.isdigit():
            raise ValueError(f"unknown database {database!r}")
        if database == LIVE:
            self._db = open_driver(self.driver, self.data_dir, families)
        else:
            path = self.data_dir / checkpoints.CHECKPOINTS / name
            if path.exists():
                raise ValueError(f"database {database!r} was sent twice")
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = driver_class(self.driver)(path, families)
        self._database = database
        self._batch = self._db.batch()

    @property
    def database(self) -> str:
        """The database being written."""
        return self._database

    def put(self, family: str, key: bytes, value: bytes, elements: int) -> None:
        """Write one record of the open database."""
        db = self._db
        if db is None:
            raise ValueError("a record came before its database was named")
        if family not in db.families:
            raise ValueError(f"a record of family {family!r}, which database {self._database!r} does not have "
                             f"({', '.join(db.families)})")
        self._batch.put(key, value, db.handle(family))  # type: ignore[union-attr]
        self.counts.add(self._database, family, key, value, elements)
        self._pending += 1
        if self._pending >= self.BATCH:
            db.write(self._batch, sync=False)  # type: ignore[arg-type]
            self._batch = db.batch()
            self._pending = 0

    def _finish_database(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.write(self._batch, sync=True)  # type: ignore[arg-type]
            db.close()
            if self._database != LIVE:
                checkpoints.fsync_tree(db.path)
        self._batch, self._pending = None, 0

    def finish(self) -> None:
        """Sync and close what is open; the new store is complete."""
        self._finish_database()
        checkpoints.fsync_dir(self.data_dir)

    def close(self) -> None:
        """Release files without syncing (an aborted load)."""
        db, self._db = self._db, None
        if db is not None:
            db.close()
