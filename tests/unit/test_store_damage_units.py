"""A damaged store is found at open and moved aside, never read as a shorter one
(`persistence/damage.py`): flipped bits in and truncation of RocksDB's SST, WAL and MANIFEST
files, a SQLite file cut short; each leaves the member with an empty store (it then rebuilds
from its peers), the damaged files kept in `damaged-*/` with a DAMAGE file saying why."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.damage import DAMAGE_FILE
from strongroom.persistence.drivers import StoreDamaged, open_driver
from strongroom.persistence.storage import DiskStorage

ENTRIES = 2000


def entry(index: int) -> rpb.LogEntry:
    return rpb.LogEntry(index=index, epoch=1, ops=[rpb.Operation(noop=rpb.Noop(leader="m1" + "x" * 200))])


def write_entries(data_dir: Path, driver: str = "rocksdb") -> None:
    storage = DiskStorage(data_dir, sync=True, driver=driver)
    storage.append([entry(i) for i in range(1, ENTRIES + 1)])
    storage.set_promised(1, "m1")
    storage.close()  # RocksDB flushes its memtable into an SST file


def write_entries_then_die(data_dir: Path) -> None:
    """Entries written synced by a process killed with SIGKILL: they are in the WAL only."""
    code = ("import os, signal, sys; from pathlib import Path; sys.path[:0] = %r\n"
            "from strongroom.persistence.storage import DiskStorage\n"
            "from strongroom.api.v1 import replication_pb2 as rpb\n"
            "s = DiskStorage(Path(%r), sync=True)\n"
            "for i in range(1, %d):\n"
            "    s.append([rpb.LogEntry(index=i, epoch=1, ops=[rpb.Operation(noop=rpb.Noop(leader='m1' + 'x' * 200))])])\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n") % (sys.path, str(data_dir), ENTRIES + 1)
    subprocess.run([sys.executable, "-c", code], check=False, timeout=120)


def only(data_dir: Path, suffix: str) -> Path:
    files = [p for p in (data_dir / "db").iterdir() if p.name.endswith(suffix) and p.stat().st_size]
    assert files, sorted(p.name for p in (data_dir / "db").iterdir())
    return max(files, key=lambda p: p.stat().st_size)


def flip(path: Path, at: float = 0.5) -> None:
    with open(path, "r+b") as f:
        pos = int(path.stat().st_size * at)
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x10]))


def assert_moved_aside(data_dir: Path, words: str) -> None:
    storage = DiskStorage(data_dir, sync=True)
    try:
        loaded = storage.load()
        assert loaded.empty, f"served {len(loaded.entries)} entries from a damaged store"
        assert words in storage.damage and "moved to" in storage.damage, storage.damage
    finally:
        storage.close()
    (moved,) = data_dir.glob("damaged-*")
    assert (moved / "db").is_dir() and words in (moved / DAMAGE_FILE).read_text()
    # The next start finds the new (empty) store sound.
    again = DiskStorage(data_dir, sync=True)
    assert again.damage == "" and again.load().empty
    again.close()


def test_a_sound_store_opens_whole(tmp_path: Path) -> None:
    write_entries(tmp_path)
    storage = DiskStorage(tmp_path, sync=True)
    assert storage.damage == "" and len(storage.load().entries) == ENTRIES
    storage.close()
    assert not list(tmp_path.glob("damaged-*"))


def test_a_flipped_bit_in_an_sst_file(tmp_path: Path) -> None:
    write_entries(tmp_path)
    flip(only(tmp_path, ".sst"))
    assert_moved_aside(tmp_path, "checksum mismatch")


def test_an_sst_file_cut_short(tmp_path: Path) -> None:
    write_entries(tmp_path)
    sst = only(tmp_path, ".sst")
    os.truncate(sst, sst.stat().st_size // 2)
    assert_moved_aside(tmp_path, "Corruption")


@pytest.mark.parametrize("at", [0.1, 0.5, 0.99])
def test_a_flipped_bit_in_the_manifest(tmp_path: Path, at: float) -> None:
    write_entries(tmp_path)
    flip(next((tmp_path / "db").glob("MANIFEST-*")), at)
    assert_moved_aside(tmp_path, "MANIFEST")


def test_a_manifest_cut_short_opens_empty_not_partial(tmp_path: Path) -> None:
    """RocksDB reads a MANIFEST cut short as one whose last edits were never written (a torn
    tail), so it opens the database as the edits before the cut describe: here, before the one
    flush, nothing. An empty store is a wiped disk to the member (it rebuilds from its peers,
    tests/integration/test_store_damage.py); a cut between two flushes would open an older,
    partial state (docs/store-operations.md, "A damaged store", what is not detected)."""
    write_entries(tmp_path)
    manifest = next((tmp_path / "db").glob("MANIFEST-*"))
    os.truncate(manifest, manifest.stat().st_size // 3)
    storage = DiskStorage(tmp_path, sync=True)
    try:
        assert storage.load().empty
    finally:
        storage.close()


@pytest.mark.parametrize("at", [0.5, 0.999])
def test_a_flipped_bit_in_the_wal_of_synced_writes(tmp_path: Path, at: float) -> None:
    """RocksDB's default recovery would replay the WAL up to the damage and open the rest as
    if it had never been written: every synced entry after it lost, silently."""
    write_entries_then_die(tmp_path)
    flip(only(tmp_path, ".log"), at)
    assert_moved_aside(tmp_path, "Corruption")


def test_a_damaged_block_stops_a_scan_with_an_error_not_an_early_end(tmp_path: Path) -> None:
    write_entries(tmp_path)
    flip(only(tmp_path, ".sst"))
    db = open_driver("rocksdb", tmp_path, ("log", "meta"))
    try:
        with pytest.raises(StoreDamaged, match="checksum mismatch"):
            sum(1 for _ in db.family("log").scan())
    finally:
        db.close()


def test_a_sqlite_file_cut_short(tmp_path: Path) -> None:
    write_entries(tmp_path, "sqlite")
    (db,) = [p for p in (tmp_path / "db").iterdir() if p.suffix in (".sqlite", ".db", ".sqlite3")]
    os.truncate(db, db.stat().st_size // 2)
    storage = DiskStorage(tmp_path, sync=True, driver="sqlite")
    try:
        assert storage.load().empty and "moved to" in storage.damage, storage.damage
    finally:
        storage.close()


# --- damage while the member runs (persistence/scrub.py) ---------------------------------------


def _read_everything(storage: DiskStorage) -> None:
    """What a member does while it serves: its reads fill the block cache."""
    assert len(storage.load().entries) == ENTRIES


def test_the_scrub_reads_an_open_store_back_from_its_files_not_from_its_cache(tmp_path: Path) -> None:
    """A bit flipped in an SST file while the store is open, after every block of it was read
    (and cached): reads through the open database still answer from the cache, the scrub reads
    the file and finds it; a store that reads back whole passes, and its copy is removed."""
    write_entries(tmp_path)  # the entries are in an SST file now
    storage = DiskStorage(tmp_path, sync=True)
    try:
        _read_everything(storage)
        stop = threading.Event()
        storage.scrub(stop)  # sound: nothing raised
        assert not list(tmp_path.glob("scrub.*")), "the scrub's copy is removed"
        flip(only(tmp_path, ".sst"))
        _read_everything(storage)  # the open database answers from its cache
        with pytest.raises(StoreDamaged, match="checksum mismatch|Corruption") as found:
            storage.scrub(stop)
        assert str(tmp_path / "db") in str(found.value) and "scrub." not in str(found.value), found.value
        assert not list(tmp_path.glob("scrub.*"))
    finally:
        storage.close()


def test_a_sqlite_store_cut_while_open_is_found_by_the_scrub(tmp_path: Path) -> None:
    write_entries(tmp_path, driver="sqlite")
    storage = DiskStorage(tmp_path, sync=True, driver="sqlite")
    try:
        storage.scrub(threading.Event())
        db_file = tmp_path / "db" / "store.sqlite"
        os.truncate(db_file, db_file.stat().st_size // 2)
        with pytest.raises(StoreDamaged):
            storage.scrub(threading.Event())
    finally:
        storage.close()


async def test_damage_the_scrub_finds_is_marked_and_moves_the_store_aside_at_the_next_start(tmp_path: Path) -> None:
    """The scrub's finding outlives the process: the next start moves the store aside (as damage
    found at start), says what the scrub found, and opens empty."""
    from strongroom.persistence.damage import FOUND_MARKER
    from strongroom.persistence.scrub import Scrub

    write_entries(tmp_path)
    storage = DiskStorage(tmp_path, sync=True)
    scrub = Scrub(storage, tmp_path, "m1", lambda: 0.05)
    try:
        before = time.time()
        assert await scrub.scrub_once() and not scrub.found.is_set()
        figures = scrub.figures()
        assert (figures.clean, figures.failed) == (1, 0)
        assert before <= figures.last_clean <= time.time() and 0 < figures.last_seconds < 10
        flip(only(tmp_path, ".sst"))
        await asyncio.wait_for(scrub.run(), 10)  # returns once it found the damage
        assert scrub.figures() == figures  # the damaged round is not a clean one
        assert scrub.found.is_set() and "found by the scrub" in scrub.reason
        assert (tmp_path / FOUND_MARKER).is_file()
    finally:
        storage.close()
    assert_moved_aside(tmp_path, "found by the scrub")
    assert not (tmp_path / FOUND_MARKER).exists()


async def test_damage_found_stops_the_member_even_when_its_marker_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing disk may refuse the marker too: the finding still stops the member (`found`),
    instead of the scrub dying with the write's error while the member serves on."""
    from strongroom.persistence import scrub as scrub_module
    from strongroom.persistence.scrub import Scrub

    def refused(data_dir: Path, found: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(scrub_module, "mark_found", refused)
    write_entries(tmp_path)
    storage = DiskStorage(tmp_path, sync=True)
    scrub = Scrub(storage, tmp_path, "m1", lambda: 0.05)
    try:
        flip(only(tmp_path, ".sst"))
        await asyncio.wait_for(scrub.run(), 10)
        assert scrub.found.is_set() and "found by the scrub" in scrub.reason
    finally:
        storage.close()
    assert_moved_aside(tmp_path, "Corruption")  # the start's own read finds it


async def test_the_scrub_waits_while_the_member_cannot_write_its_storage(tmp_path: Path) -> None:
    """Its checkpoint flushes the write buffer: on a full disk that would put the database into
    its error state, so no scrub runs while the storage health says it cannot store."""
    from strongroom.persistence.scrub import Scrub

    write_entries(tmp_path)
    storage = DiskStorage(tmp_path, sync=True)
    usable = False
    scrub = Scrub(storage, tmp_path, "m1", lambda: 0.05, lambda: usable)
    task = asyncio.create_task(scrub.run())
    try:
        await asyncio.sleep(0.5)
        assert scrub.rounds == 0
        usable = True
        await asyncio.sleep(0.5)
        assert scrub.rounds > 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        storage.close()


async def test_a_scrub_that_cannot_run_is_counted_and_tried_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Not damage (no room for the checkpoint, say): counted as a failure, nothing marked, and the
    next round runs."""
    from strongroom.persistence.damage import FOUND_MARKER
    from strongroom.persistence.scrub import Scrub

    write_entries(tmp_path)
    storage = DiskStorage(tmp_path, sync=True)
    scrub = Scrub(storage, tmp_path, "m1", lambda: 0.05)
    real = storage.scrub

    def no_room(stop: threading.Event) -> None:
        raise OSError(28, "No space left on device")

    try:
        monkeypatch.setattr(storage, "scrub", no_room)
        assert not await scrub.scrub_once()
        assert (scrub.figures().clean, scrub.figures().failed, scrub.figures().last_clean) == (0, 1, 0.0)
        assert not scrub.found.is_set() and not (tmp_path / FOUND_MARKER).exists()
        monkeypatch.setattr(storage, "scrub", real)
        assert await scrub.scrub_once()
        assert (scrub.figures().clean, scrub.figures().failed) == (1, 1)
    finally:
        storage.close()

