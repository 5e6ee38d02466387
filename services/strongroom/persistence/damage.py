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

Nothing is deleted: an operator can look at the damaged files, and removes the directory.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from strongroom.persistence.checkpoints import CHECKPOINTS

__all__ = ["DAMAGE_FILE", "quarantine"]

log = logging.getLogger("strongroom.persistence")

DAMAGE_FILE = "DAMAGE"
"""In a `damaged-*` directory: what was found, when."""


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
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    log.error("%s", said)
    return said
