"""The storage drivers against one contract (RocksDB and SQLite alike): keys ordered as bytes,
atomic batches applied in order, range deletes, ordered scans that may stop early and tolerate
writes meanwhile, checkpoints that open as copies, raw records out of one driver and into
another, and a data directory that refuses the other driver."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from strongroom.errors import StoreDriverMismatch
from strongroom.persistence.drivers import DRIVERS, MARKER, Driver, open_driver, written_by

U64 = struct.Struct(">Q")
ALL = pytest.mark.parametrize("name", sorted(DRIVERS))


def _open(name: str, data_dir: Path) -> Driver:
    return open_driver(name, data_dir, ("a", "b"))


@ALL
def test_keys_iterate_in_byte_order_and_scans_stop_at_their_end(tmp_path: Path, name: str) -> None:
    db = _open(name, tmp_path)
    wb = db.batch()
    keys = [U64.pack(i) for i in (5, 1, 2**40, 300, 2**64 - 1)] + [b"", b"\x00", b"\xff\xff", b"a", b"ab"]
    for key in keys:
        wb.put(key, b"v" + key, db.handle("a"))
    db.write(wb, sync=True)
    a = db.family("a")
    assert [k for k, _ in a.scan()] == sorted(keys)
    assert [k for k, _ in a.scan(U64.pack(2), U64.pack(2**40 + 1))] == [U64.pack(5), U64.pack(300), U64.pack(2**40)]
    assert a.get(U64.pack(300)) == b"v" + U64.pack(300) and a.get(U64.pack(301)) is None
    assert list(db.family("b").scan()) == []
    del a
    db.close()


@ALL
def test_a_batch_applies_in_order_across_families(tmp_path: Path, name: str) -> None:
    db = _open(name, tmp_path)
    a, b = db.handle("a"), db.handle("b")
    wb = db.batch()
    for i in range(2000):
        wb.put(U64.pack(i), b"x", a)
    wb.delete_range(U64.pack(100), U64.pack(1900), a)
    wb.put(U64.pack(150), b"again", a)
    wb.put(b"k", b"1", b)
    wb.delete(b"k", b)
    wb.put(b"k", b"2", b)
    db.write(wb, sync=False)
    fa = db.family("a")
    assert len(list(fa.scan())) == 201 and fa.get(U64.pack(150)) == b"again"
    assert db.family("b").get(b"k") == b"2"
    # A scan survives writes made while it runs (whether it sees them is the driver's).
    seen = []
    for key, _ in fa.scan():
        seen.append(key)
        if len(seen) == 1:
            wb = db.batch()
            wb.delete(U64.pack(1950), a)
            db.write(wb, sync=True)
    assert len(seen) in (200, 201) and seen == sorted(seen)
    assert db.size_on_disk() > 0
    del fa
    db.close()


@ALL
def test_a_checkpoint_opens_as_a_copy_of_the_database_then(tmp_path: Path, name: str) -> None:
    db = _open(name, tmp_path / "live")
    wb = db.batch()
    wb.put(b"k", b"then", db.handle("a"))
    db.write(wb, sync=True)
    db.checkpoint(tmp_path / "point")
    wb = db.batch()
    wb.put(b"k", b"now", db.handle("a"))
    db.write(wb, sync=True)
    db.close()
    DRIVERS[name].copy(tmp_path / "point", tmp_path / "restored" / "db")
    restored = _open(name, tmp_path / "restored")
    assert restored.family("a").get(b"k") == b"then"
    restored.close()
    again = _open(name, tmp_path / "point-again")
    again.close()
    assert _open(name, tmp_path / "live").family("a").get(b"k") == b"now"


@pytest.mark.parametrize(("source", "target"), [("rocksdb", "sqlite"), ("sqlite", "rocksdb")])
def test_raw_records_move_unchanged_into_an_empty_store_of_the_other_driver(
        tmp_path: Path, source: str, target: str) -> None:
    src = _open(source, tmp_path / "src")
    wb = src.batch()
    for i in range(25000):
        wb.put(U64.pack(i), i.to_bytes(3, "big") * 10, src.handle("a" if i % 3 else "b"))
    src.write(wb, sync=True)
    dst = _open(target, tmp_path / "dst")
    assert dst.load(src.records()) == 25000
    assert list(dst.records()) == list(src.records())
    # Only into an empty store.
    with pytest.raises(ValueError, match="not empty"):
        dst.load(iter([("a", b"x", b"y")]))
    src.close()
    dst.close()


@ALL
def test_a_data_directory_refuses_the_other_driver_and_says_how_to_change(tmp_path: Path, name: str) -> None:
    _open(name, tmp_path).close()
    assert (tmp_path / MARKER).read_text().strip() == name == written_by(tmp_path, tmp_path / "db")
    other = next(n for n in DRIVERS if n != name)
    with pytest.raises(StoreDriverMismatch) as refused:
        _open(other, tmp_path)
    message = refused.value.message
    assert f"holds a {name} store" in message and f"selects the {other} driver" in message
    assert "unload and load" in message and refused.value.metadata == {"found": name, "wanted": other}
    # Without the record (a data directory of a version before drivers), the files tell.
    (tmp_path / MARKER).unlink()
    with pytest.raises(StoreDriverMismatch):
        _open(other, tmp_path)
    _open(name, tmp_path).close()
    assert (tmp_path / MARKER).read_text().strip() == name


def test_an_unknown_driver_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown storage driver 'lmdb'"):
        open_driver("lmdb", Path("/nonexistent"), ("a",))


@ALL
def test_a_closed_database_is_read_whole_from_a_read_only_open_and_not_changed(tmp_path: Path, name: str) -> None:
    db = _open(name, tmp_path / "m")
    wb = db.batch()
    for i in range(3000):
        wb.put(U64.pack(i), b"v%d" % i, db.handle("a" if i % 2 else "b"))
    db.write(wb, sync=True)
    live = list(db.records())
    db.close()
    path = tmp_path / "m" / "db"
    cls = DRIVERS[name]
    assert set(cls.stored_families(path)) >= {"a", "b"}
    stored = [r for r in cls.read_stored(path) if r[0] in ("a", "b")]
    # Family by family in the database's own order, keys in byte order, every record once.
    assert sorted(stored) == sorted(live) and len(stored) == 3000
    for fam in ("a", "b"):
        keys = [k for f, k, _ in stored if f == fam]
        assert keys == sorted(keys)
    # Nothing was written: the database opens with the same records.
    again = _open(name, tmp_path / "m")
    assert list(again.records()) == live
    again.close()


def _fill(db: Driver, messages: int, body: bytes) -> int:
    """Log-like writes (and a small record per batch in a second family); the most memory the
    write buffers held after any batch."""
    peak = 0
    log_h, meta_h = db.handle("a"), db.handle("b")
    for first in range(0, messages, 100):
        batch = db.batch()
        for i in range(first, first + 100):
            batch.put(U64.pack(i), body, log_h)
        batch.put(b"commit", U64.pack(first), meta_h)
        db.write(batch, False)
        peak = max(peak, db.memory_in_use()["write_buffers"])
    return peak


def test_rocksdb_write_buffers_stay_within_the_realms_budget(tmp_path: Path) -> None:
    """40 MB written: within an 8 MiB budget the memtables never pass it (they flush); with a
    budget above what was written they hold it all (RocksDB's default per family is 64 MiB,
    which is what let a member's memory climb by everything it wrote)."""
    from strongroom.persistence.drivers import DriverMemory

    body = bytes(range(256)) + bytes(144)
    small = open_driver("rocksdb", tmp_path / "small", ("a", "b"), memory=DriverMemory(8 * 2**20, 4 * 2**20))
    big = open_driver("rocksdb", tmp_path / "big", ("a", "b"), memory=DriverMemory(256 * 2**20, 4 * 2**20))
    try:
        bounded, unbounded = _fill(small, 100_000, body), _fill(big, 100_000, body)
        assert bounded <= 8 * 2**20, bounded
        assert unbounded > 30 * 2**20, unbounded
        assert sum(1 for _ in small.family("a").scan()) == 100_000  # flushed, nothing lost
        assert small.memory_in_use()["read_cache"] <= 4 * 2**20
    finally:
        small.close()
        big.close()


def test_sqlite_page_cache_follows_the_realm(tmp_path: Path) -> None:
    from strongroom.persistence.drivers import DriverMemory

    db = open_driver("sqlite", tmp_path, ("a", "b"), memory=DriverMemory(8 * 2**20, 6 * 2**20))
    try:
        assert db._conn.execute("PRAGMA cache_size").fetchone()[0] == -6 * 1024  # type: ignore[attr-defined]
    finally:
        db.close()
