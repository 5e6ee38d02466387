"""Storage drivers: the ordered key-value databases a member's storage can use.

`rocksdb` (the default) and `sqlite`; a cluster's realm selects one
(`persistent_store.driver`, docs/store-operations.md). `open_driver` opens a member's database
and keeps the data directory's record of which driver wrote it (the file `STORE_DRIVER`): a
member refuses to open a data directory another driver wrote (`StoreDriverMismatch`); changing
a cluster's driver is a migration (unload, load), never a reinterpretation of files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from strongroom.errors import StoreDriverMismatch
from strongroom.persistence.drivers.base import DEFAULT_MEMORY, Batch, Driver, DriverMemory, Family, Record, StoreDamaged
from strongroom.persistence.drivers.rocksdb import RocksDriver, is_rocksdb
from strongroom.persistence.drivers.sqlite import SqliteDriver, is_sqlite

__all__ = ["Batch", "Driver", "DriverMemory", "Family", "Record", "StoreDamaged", "DEFAULT_MEMORY", "DRIVERS", "DEFAULT_DRIVER", "MARKER", "driver_class",
           "open_driver", "written_by"]

DRIVERS: dict[str, type[Driver]] = {RocksDriver.name: RocksDriver, SqliteDriver.name: SqliteDriver}
DEFAULT_DRIVER = RocksDriver.name
MARKER = "STORE_DRIVER"
"""The file in a member's data directory naming the driver that wrote its database."""


def driver_class(name: str) -> type[Driver]:
    """The driver called `name`."""
    try:
        return DRIVERS[name]
    except KeyError:
        raise ValueError(f"unknown storage driver {name!r} (known: {', '.join(DRIVERS)})") from None


def written_by(data_dir: Path, db: Path) -> str | None:
    """The driver that wrote the database `db` of the data directory `data_dir`: as recorded,
    else as its files show (data directories of versions before drivers: RocksDB); None: no
    database yet."""
    marker = data_dir / MARKER
    if marker.is_file():
        return marker.read_text().strip()
    if is_rocksdb(db):
        return RocksDriver.name
    if is_sqlite(db):
        return SqliteDriver.name
    return None


def open_driver(name: str, data_dir: Path, families: Sequence[str], db: str = "db", strict: bool = False,
                memory: DriverMemory = DEFAULT_MEMORY) -> Driver:
    """Open the database `data_dir/db` with driver `name`, recording the driver in `data_dir`
    the first time; refuses (`StoreDriverMismatch`) a database another driver wrote;
    `StoreDamaged` when its files are damaged (`strict`: see `Driver`)."""
    cls = driver_class(name)
    path = data_dir / db
    found = written_by(data_dir, path)
    if found is not None and found != name:
        raise StoreDriverMismatch(
            f"the data directory {data_dir} holds a {found} store but the realm selects the {name} driver "
            f"for this cluster: set persistent_store.driver to {found} again, or move the contents to a "
            f"{name} store by unload and load (docs/store-operations.md)", found=found, wanted=name)
    marker = data_dir / MARKER
    if not marker.is_file():
        # A new data directory, or one of a version before drivers (RocksDB): recorded now.
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(name + "\n")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, marker)
        fd = os.open(data_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return cls(path, families, strict=strict, memory=memory)
