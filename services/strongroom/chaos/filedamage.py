"""Damage to a member's RocksDB files: a stopped member's for the `corrupt-member` fault, a running
member's table files for `rot-member` (found by its scrub: docs/store-operations.md).

One of: a bit flipped in the newest write-ahead log, a bit flipped in the newest table file
(SST), a table file cut to half its size. The member must find it when it starts (docs/store-operations.md, "A damaged store"): it moves the store into
`damaged-*/` and rebuilds from its peers. A file RocksDB no longer uses (a log already flushed,
a table a compaction replaced or one an interrupted compaction left) is deleted at the next
open without being read: damage there changes nothing and is not found, which `judge` accepts
only when that file is gone.

The MANIFEST is left alone here: a flipped bit in a few bytes of its record headers makes RocksDB
take the record for the end of the file and open the state before it, unnoticed
(docs/store-operations.md, "A damaged store", what is not detected; `tests/unit/
test_store_damage_units.py` flips the bytes that are found).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Damage", "damage_files", "judge", "rot_file"]


@dataclass(frozen=True)
class Damage:
    """What was done to which file of a member."""

    member: str
    file: str
    """The file's name in the member's `db/` directory."""
    how: str


def _newest(db: Path, suffix: str) -> Path | None:
    files = [p for p in db.iterdir() if p.name.endswith(suffix) and p.stat().st_size > 0]
    return max(files, key=lambda p: p.name) if files else None


def _flip(path: Path, rng: random.Random) -> int:
    at = rng.randrange(path.stat().st_size)
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
        f.flush()
        os.fsync(f.fileno())
    return at


def damage_files(member: str, data_dir: Path, rng: random.Random) -> Damage | None:
    """Damage one file of the stopped member's database (`data_dir/db`); None when it has no
    file to damage yet (an empty log just after a restart, no table)."""
    db = data_dir / "db"
    sst, wal = _newest(db, ".sst"), _newest(db, ".log")
    kinds = [k for k, present in (("flip-wal", wal), ("flip-sst", sst), ("cut-sst", sst)) if present is not None]
    if not kinds:
        return None
    kind = rng.choice(kinds)
    if kind == "cut-sst":
        assert sst is not None
        size = sst.stat().st_size
        os.truncate(sst, size // 2)
        return Damage(member, sst.name, f"{sst.name} cut from {size} to {size // 2} bytes")
    target = wal if kind == "flip-wal" else sst
    assert target is not None
    at = _flip(target, rng)
    return Damage(member, target.name, f"a bit flipped at byte {at} of {target.name}")


def rot_file(member: str, data_dir: Path, rng: random.Random) -> Damage | None:
    """Flip a bit in a table file (SST) of a running member's database, the newest or another
    (`rot-member`); None when it has none yet."""
    db = data_dir / "db"
    tables = sorted(p for p in db.glob("*.sst") if p.stat().st_size > 0)
    if not tables:
        return None
    target = tables[-1] if rng.random() < 0.5 else rng.choice(tables)
    at = _flip(target, rng)
    return Damage(member, target.name, f"a bit flipped at byte {at} of {target.name} while it ran")


def judge(done: list[Damage], data_dir_of: dict[str, Path]) -> list[str]:
    """Each damage was found (its file is in a `damaged-*` directory of the member) or harmless
    (the file is gone: RocksDB did not use it). What was neither."""
    problems = []
    for d in done:
        data_dir = data_dir_of[d.member]
        if any((moved / "db" / d.file).exists() for moved in data_dir.glob("damaged-*")):
            continue
        if (data_dir / "db" / d.file).exists():
            problems.append(f"{d.member}: {d.how} was not found: the file is still in its live store")
    return problems
