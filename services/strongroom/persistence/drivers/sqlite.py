"""The SQLite driver (the standard library's sqlite3): one table per family, WAL journal.

Each family is a table `f_<name>(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID`: SQLite compares
BLOBs with memcmp, so keys are ordered as bytes, as in RocksDB. The database is one file,
`store.sqlite`, in the driver's directory, in WAL mode. A batch collects its changes and
`write` applies them in one transaction; a synced write commits with `synchronous=FULL` (the
WAL is fsynced at commit, with every frame before it), an unsynced one with `NORMAL` (appended
to the WAL, fsynced by a later synced commit or a checkpoint), which is the ordering RocksDB's
WAL gives. A volatile database (swap) keeps no journal and never syncs. A checkpoint is a copy
of the database made with SQLite's online backup.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from strongroom.persistence.drivers.base import DEFAULT_MEMORY, Driver, DriverMemory, Record, StoreDamaged

__all__ = ["SqliteDriver", "FILE"]

FILE = "store.sqlite"
# Rows fetched per query while scanning: a scan holds no cursor open between pages, so writes
# on the same connection while a caller iterates are safe.
_PAGE = 512


class _Table:
    """One family's table: its statements, and reads."""

    __slots__ = ("driver", "name", "sql_get", "sql_scan", "sql_scan_to", "sql_put", "sql_delete", "sql_delete_range")

    def __init__(self, driver: SqliteDriver, name: str) -> None:
        table = f'"f_{name}"'
        self.driver = driver
        self.name = name
        self.sql_get = f"SELECT v FROM {table} WHERE k = ?"
        self.sql_scan = f"SELECT k, v FROM {table} WHERE k >= ? ORDER BY k LIMIT {_PAGE}"
        self.sql_scan_to = f"SELECT k, v FROM {table} WHERE k >= ? AND k < ? ORDER BY k LIMIT {_PAGE}"
        self.sql_put = f"INSERT OR REPLACE INTO {table} (k, v) VALUES (?, ?)"
        self.sql_delete = f"DELETE FROM {table} WHERE k = ?"
        self.sql_delete_range = f"DELETE FROM {table} WHERE k >= ? AND k < ?"

    def get(self, key: bytes) -> bytes | None:
        row = self.driver._conn.execute(self.sql_get, (key,)).fetchone()
        return None if row is None else row[0]  # type: ignore[no-any-return]

    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        conn = self.driver._conn
        while True:
            if end is None:
                rows = conn.execute(self.sql_scan, (start,)).fetchall()
            else:
                rows = conn.execute(self.sql_scan_to, (start, end)).fetchall()
            yield from rows
            if len(rows) < _PAGE:
                return
            start = rows[-1][0] + b"\x00"  # the next key above the last one


class _SqliteBatch:
    """Changes collected in order; consecutive ones of the same kind and table run as one
    `executemany`."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: list[tuple[str, tuple[bytes, ...]]] = []

    def put(self, key: bytes, value: bytes, family: _Table) -> None:
        self.ops.append((family.sql_put, (key, value)))

    def delete(self, key: bytes, family: _Table) -> None:
        self.ops.append((family.sql_delete, (key,)))

    def delete_range(self, start: bytes, end: bytes, family: _Table) -> None:
        self.ops.append((family.sql_delete_range, (start, end)))


class SqliteDriver(Driver):
    """A SQLite database file in WAL mode."""

    name = "sqlite"

    def __init__(self, path: Path, families: Sequence[str], volatile: bool = False, strict: bool = False,
                 memory: DriverMemory = DEFAULT_MEMORY) -> None:
        super().__init__(path, families, volatile, strict, memory)
        path.mkdir(parents=True, exist_ok=True)
        # Autocommit mode (transactions are explicit); one connection, used by the member's
        # event loop, and by a worker thread only under the lock.
        self._conn = sqlite3.connect(str(path / FILE), isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        conn = self._conn
        try:
            if volatile:
                conn.execute("PRAGMA journal_mode=OFF")
                conn.execute("PRAGMA synchronous=OFF")
            else:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            self._synchronous = "OFF" if volatile else "NORMAL"
            # The page cache, in KiB when negative (no write buffer: a commit goes to the WAL).
            conn.execute(f"PRAGMA cache_size=-{max(1, memory.read_cache_bytes // 1024)}")
            self._tables = {name: _Table(self, name) for name in self.families}
            for name in self.families:
                conn.execute(f'CREATE TABLE IF NOT EXISTS "f_{name}" (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID')
        except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed"
            conn.close()
            raise StoreDamaged(f"{path / FILE}: {exc}") from None

    def verify(self) -> None:
        """SQLite keeps no checksums of its pages: `PRAGMA quick_check` finds structural damage
        (a page cut short, a broken b-tree), not a flipped bit inside a value."""
        self.scrub_read(self.path)

    def scrub_source(self, work: Path) -> Path:
        """The live file: `scrub_read` checks it on a connection of its own."""
        return self.path

    @classmethod
    def scrub_read(cls, path: Path, stop: threading.Event | None = None) -> None:
        """`PRAGMA quick_check` on a read-only connection of its own, whose page cache is empty:
        structural damage in the file as it is on disk (SQLite keeps no checksums of values).
        It runs to its end: SQLite reads a check through at once."""
        try:
            conn = cls._read_only(path)
        except sqlite3.DatabaseError as exc:
            raise StoreDamaged(f"{path / FILE}: {exc}") from None
        try:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as exc:
            raise StoreDamaged(f"{path / FILE}: {exc}") from None
        finally:
            conn.close()
        if problems != ["ok"]:
            raise StoreDamaged(f"{path / FILE}: " + "; ".join(problems[:5]))

    def family(self, name: str) -> _Table:
        return self._tables[name]

    def handle(self, name: str) -> _Table:
        return self._tables[name]

    def batch(self) -> _SqliteBatch:
        return _SqliteBatch()

    def _set_synchronous(self, level: str) -> None:
        if level != self._synchronous:
            self._conn.execute(f"PRAGMA synchronous={level}")
            self._synchronous = level

    def write(self, batch: _SqliteBatch, sync: bool) -> None:  # type: ignore[override]
        ops = batch.ops
        if not ops and not sync:
            return
        with self._lock:
            conn = self._conn
            if not self.volatile:
                self._set_synchronous("FULL" if sync else "NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                i, n = 0, len(ops)
                while i < n:
                    sql = ops[i][0]
                    j = i + 1
                    while j < n and ops[j][0] is sql:
                        j += 1
                    if j == i + 1:
                        conn.execute(sql, ops[i][1])
                    else:
                        conn.executemany(sql, [args for _, args in ops[i:j]])
                    i = j
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def checkpoint(self, target: Path) -> None:
        target.mkdir(parents=True)
        copy = sqlite3.connect(str(target / FILE))
        try:
            with self._lock:
                self._conn.backup(copy)
        finally:
            copy.close()

    @classmethod
    def copy(cls, source: Path, target: Path) -> None:
        target.mkdir(parents=True)
        for path in source.iterdir():
            shutil.copy2(path, target / path.name)

    def close(self) -> None:
        conn = self.__dict__.pop("_conn", None)
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:  # closing a failed database
                pass

    @classmethod
    def _read_only(cls, path: Path) -> sqlite3.Connection:
        return sqlite3.connect(f"{(path / FILE).resolve().as_uri()}?mode=ro", uri=True)

    @classmethod
    def stored_families(cls, path: Path) -> list[str]:
        conn = cls._read_only(path)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, 2) = 'f_' "
                                "ORDER BY rowid").fetchall()
        finally:
            conn.close()
        return [name[2:] for (name,) in rows]

    @classmethod
    def read_stored(cls, path: Path) -> Iterator[Record]:
        families = cls.stored_families(path)
        conn = cls._read_only(path)
        try:
            for name in families:
                for key, value in conn.execute(f'SELECT k, v FROM "f_{name}" ORDER BY k'):
                    yield name, key, value
        finally:
            conn.close()


def is_sqlite(path: Path) -> bool:
    """Whether `path` holds a SQLite database of this driver."""
    return (path / FILE).is_file()
