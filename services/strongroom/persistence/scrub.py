"""Damage that happens while a member runs: the scrub, and what the member does when it finds some.

At start a member reads every record of its store once (damage.py). A bit that flips in one of
its files afterwards (a failing disk, a bad controller, an operator's mistake) would otherwise be
found only at the next start, or when a catch-up or a snapshot happens to read that block, and
until then the member would vote and answer from a store that no longer holds what it
acknowledged. So every `persistent_store.scrub_interval_seconds` (realm; 0: never) each member
reads its whole store back from its files (`Storage.scrub`, off the event loop): RocksDB through
a checkpoint opened by a reader of its own, so every block comes from the file and its checksum
is checked, not from the open database's cache; SQLite by `PRAGMA quick_check` on a connection
of its own.

Damage found: the member logs it (ERROR, the driver's words), writes `DAMAGE_FOUND` into its data
directory and stops (`found` is set: `main.serve` stops the member, which steps down and
resigns, then starts it again in the same process, on the same addresses). The start reads the
marker and moves the store aside as damage found at start is (damage.py): the member starts
empty, neither serves nor counts toward a recovery majority until it has caught up from its
peers, and its status says what was found (`store_damage`). The marker also holds across a crash
between the finding and the restart: whoever starts the member next (Kubernetes, an operator)
gets the same rebuild.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strongroom.persistence.damage import mark_found
from strongroom.persistence.drivers.base import StoreDamaged
from strongroom.persistence.storage import Storage

__all__ = ["IDLE_CHECK_SECONDS", "Scrub", "ScrubFigures"]

log = logging.getLogger("strongroom.scrub")

IDLE_CHECK_SECONDS = 60.0
"""With the scrub off (interval 0), how often the realm's interval is read again."""


@dataclass(frozen=True)
class ScrubFigures:
    """What the member's metrics say of its scrubs since it started (all 0: none yet, or a
    member in mode memory, which has no files to read back)."""

    clean: int = 0
    """Scrubs that read the store back whole."""
    failed: int = 0
    """Scrubs that could not run (not damage: a full disk for the checkpoint, say)."""
    last_clean: float = 0.0
    """Unix seconds the last clean scrub finished."""
    last_seconds: float = 0.0
    """How long the last clean scrub took."""


class Scrub:
    """The member's scrub (see the module's docstring): `run` for the member's life."""

    def __init__(self, storage: Storage, data_dir: Path, member: str, interval: Callable[[], float],
                 usable: Callable[[], bool] = lambda: True) -> None:
        self._storage = storage
        # While the member cannot write its storage the scrub waits: its checkpoint flushes the
        # write buffer, which on a full disk would put the database in its error state.
        self._usable = usable
        self._data_dir = data_dir
        self._member = member
        self._interval = interval
        self.found = asyncio.Event()
        """Set once damage was found: the member must stop and start again."""
        self.reason = ""
        """What was found ("": nothing)."""
        self.rounds = 0
        """Scrubs finished without finding damage."""
        self.last_finished = 0.0
        """Unix seconds the last clean scrub finished (0: none yet)."""
        self.last_seconds = 0.0
        """How long the last clean scrub took."""
        self.failed = 0
        """Scrubs that could not run (not damage)."""

    async def run(self) -> None:
        """Scrub every interval until damage is found or the task is cancelled."""
        if not self._storage.durable:
            return
        while not self.found.is_set():
            interval = self._interval()
            if interval <= 0:
                await asyncio.sleep(IDLE_CHECK_SECONDS)
                continue
            await asyncio.sleep(interval)
            if self._usable():
                await self.scrub_once()

    async def scrub_once(self) -> bool:
        """One scrub now; True when the store read back whole."""
        started = time.monotonic()
        stop = threading.Event()
        try:
            await asyncio.to_thread(self._storage.scrub, stop)
        except asyncio.CancelledError:
            stop.set()  # the member stops: the reading thread ends at its next check
            raise
        except StoreDamaged as exc:
            self._damaged(str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - not damage (a full disk for the checkpoint): next round
            self.failed += 1
            log.warning("member %s: the scrub of its store could not run: %s: %s", self._member,
                        type(exc).__name__, exc)
            return False
        self.rounds += 1
        self.last_finished = time.time()
        self.last_seconds = time.monotonic() - started
        log.debug("member %s: scrub %d read its store back whole in %.2f s", self._member, self.rounds,
                  self.last_seconds)
        return True

    def figures(self) -> ScrubFigures:
        return ScrubFigures(self.rounds, self.failed, self.last_finished, self.last_seconds)

    def _damaged(self, words: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        self.reason = f"found by the scrub while the member ran, at {stamp}: {words}"
        self.found.set()
        try:
            mark_found(self._data_dir, self.reason)
        except OSError as exc:
            # A failing disk may refuse the marker too: the member still stops, and its start
            # reads every record from the files again (damage.py), which finds the damage.
            log.error("member %s: cannot record the damage found in %s: %s", self._member, self._data_dir, exc)
        log.error("member %s: the scrub found its persistent store damaged (%s); it stops serving and voting and "
                  "starts again, moving the store aside and rebuilding it from its peers", self._member, words)
