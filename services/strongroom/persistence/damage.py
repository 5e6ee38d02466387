"""A member's store found damaged at start: moved aside, never served from.

`DiskStorage` opens its database strictly (RocksDB: paranoid checks; in disk-sync a WAL that must
replay whole) and reads every record once (`Driver.verify`: RocksDB checks each block's
checksum). When the driver says the files are damaged (`StoreDamaged`: a flipped bit, a file cut
short, a manifest that does not parse), the database and its restore points are moved into
`damaged-<UTC time>/` in the data directory with a `DAMAGE` file saying why, and the member starts
with an empty store: exactly a member whose disk was wiped. It then neither serves nor counts
toward a recovery majority until it has caught up from its peers (it had acknowledged entries,
as etcd records), and what it held comes back from them. Its status says what happened
(`ClusterStatus.store_damage`) and its log has an ERROR line with the driver's words.

Damage found while the member runs (scrub.py) is recorded in `DAMAGE_FOUND` in the data
directory, and the next start moves the store aside the same way, saying what the scrub found.

Nothing is deleted: an operator can look at the damaged files, and removes the directory.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from strongroom.persistence.checkpoints import CHECKPOINTS, fsync_dir

__all__ = ["DAMAGE_FILE", "FOUND_MARKER", "mark_found", "marked_damage", "quarantine"]

log = logging.getLogger("strongroom.persistence")

DAMAGE_FILE = "DAMAGE"
"""In a `damaged-*` directory: what was found, when."""
FOUND_MARKER = "DAMAGE_FOUND"
"""In the data directory: damage found while the member ran (scrub.py), for its next start to
move the store aside; removed once it is."""


def mark_found(data_dir: Path, found: str) -> None:
    """Record damage found while the member runs, durably, for its next start."""
    tmp = data_dir / (FOUND_MARKER + ".tmp")
    with open(tmp, "w") as f:
        f.write(found + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, data_dir / FOUND_MARKER)
    fsync_dir(data_dir)


def marked_damage(data_dir: Path) -> str:
    """The damage found while the member last ran ("": none)."""
    try:
        return (data_dir / FOUND_MARKER).read_text().strip()
    except FileNotFoundError:
        return ""


def quarantine(data_dir: Path, found: str, db: str = "db") -> str:
    """Move the damaged database `data_dir/db` and the restore points aside; the sentence for the
    log and the status."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = data_dir / f"damaged-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = data_dir / f"damaged-{stamp}-{n}"
    target.mkdir()
    for name in (db, CHECKPOINTS):
        if (data_dir / name).exists():
            os.rename(data_dir / name, target / name)
    said = (f"the persistent store is damaged ({found}); it was moved to {target} and this member starts "
            f"with an empty store, serving and voting only once it has caught up from its peers")
    (target / DAMAGE_FILE).write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: {said}\n")
    (data_dir / FOUND_MARKER).unlink(missing_ok=True)  # what it said is in DAMAGE now
    fsync_dir(data_dir)
    log.error("%s", said)
    return said
