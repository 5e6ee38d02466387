"""Compaction of a state held in memory without stopping the member: its snapshot is serialised
by a forked child, while the member goes on serving.

A snapshot is the state at one index, and the state changes with every entry applied: built in
line (as before), a state of millions of messages held the member's event loop for tens of
seconds at every compaction (no confirms, no heartbeats). `os.fork` gives a child the image of
the state at the instant of the fork, copy on write, which is the technique of Redis's
background save: the child serialises the parts (`state_parts`) into a file of length-prefixed
parts on a core of its own and exits, while the parent goes on applying entries to the live
state. Memory: pages the child reads are shared; those either side writes are copied (the
objects the child's reference counting touches, the entries the parent applies meanwhile), so
a compaction may take up to the state's Python objects once more for its duration.

The child does nothing but that: no gRPC, no database, no logging and no garbage collection
(finalisers could call into libraries whose threads did not survive the fork), signals back to
their defaults, no flush of anything at exit (`os._exit`), and it is killed when its parent
dies (PR_SET_PDEATHSIG). The parent polls it without blocking, then writes the parts into
storage a batch at a time (`PartWriter`), yielding to the event loop between batches, records
the snapshot as the newest restore point in one synced write and drops the log's entries up to
it. An install, a roll back, a discard or a close meanwhile cancels it: the child is killed and
reaped, the parts written so far are deleted (a member killed meanwhile leaves parts that are
never read, dropped at the next snapshot: `drop_strays`).

A child that fails, or makes no progress for `STALL_SECONDS` (it is killed), makes the member
build its snapshots in line from then on, saying so in its log; parts that cannot be stored (a
full disk) are deleted and the compaction is tried again after `RETRY_SECONDS`.

Used for disk storage with the state in memory, with no payload swapped out, on a running event
loop: swapped payloads are read from the swap database, which a child cannot touch; with
indexes on disk the snapshot is a checkpoint of the database; storage `memory` keeps its
snapshot in the parent's memory anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from strongroom.persistence.snapshot_store import PartWriter
from strongroom.persistence.snapshots import state_parts
from strongroom.persistence.state import StateMachine
from strongroom.persistence.storage import DiskStorage

__all__ = ["COMPACTION_FILE", "RETRY_SECONDS", "STALL_SECONDS", "BackgroundCompaction", "usable"]

log = logging.getLogger("strongroom.compaction")

COMPACTION_FILE = "compaction.parts"
"""The file in the data directory the child writes the parts to (gone once they are stored)."""

STALL_SECONDS = 60.0
"""A child whose file has not grown for this long is killed (it is stuck)."""

POLL_SECONDS = 0.05
"""How often the parent looks at the child while it runs."""

RETRY_SECONDS = 5.0
"""After parts that could not be stored (a full disk, say), the next compaction waits this long."""

STEP_BYTES = 8 * 1024 * 1024
"""The parts are written into storage in batches of about this much, the event loop free between."""

_FRAME = struct.Struct(">Q")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _child(state: StateMachine, path: Path) -> None:
    """In the forked child: the state's parts into `path`, then exit (0: all written)."""
    code = 1
    try:
        gc.disable()
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _die_with_parent()
        with open(path, "wb") as out:
            for part in state_parts(state):
                out.write(_FRAME.pack(len(part)))
                out.write(part)
        code = 0
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's stack
        code = 1
    finally:
        os._exit(code)


def _frames(path: Path) -> Iterator[bytes]:
    """The parts of a finished child's file, in order."""
    with open(path, "rb") as f:
        while True:
            raw = f.read(_FRAME.size)
            if not raw:
                return
            if len(raw) != _FRAME.size:
                raise OSError(f"{path}: cut off inside a part's length")
            size = _FRAME.unpack(raw)[0]
            part = f.read(size)
            if len(part) != size:
                raise OSError(f"{path}: cut off inside a part")
            yield part


def usable(storage: object, state: StateMachine, indexes_on_disk: bool) -> bool:
    """Whether a compaction of `state` into `storage` can run in the background now."""
    if not isinstance(storage, DiskStorage) or indexes_on_disk or state.payloads is not None:
        return False
    if not hasattr(os, "fork"):
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class BackgroundCompaction:
    """One compaction at `index`: the child's serialisation, then the parts into storage."""

    def __init__(self, storage: DiskStorage, state: StateMachine, index: int, epoch: int, data_dir: Path,
                 done: Callable[[int, int], None], failed: Callable[[bool], None]) -> None:
        self.storage = storage
        self.index = index
        self.epoch = epoch
        self.path = data_dir / COMPACTION_FILE
        self._done = done
        self._failed = failed
        self._writer: PartWriter | None = None
        self.started = time.monotonic()
        self.path.unlink(missing_ok=True)
        self.pid: int | None = os.fork()
        if self.pid == 0:
            _child(state, self.path)  # never returns
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"compaction-{index}")

    @property
    def running(self) -> bool:
        return not self._task.done()

    def _reap(self, block: bool) -> int | None:
        """The child's exit status once it has exited (None: still running)."""
        if self.pid is None:
            return None
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.pid = None
            return -1
        if pid == 0:
            return None
        self.pid = None
        return os.waitstatus_to_exitcode(status)

    async def _wait_for_child(self) -> int:
        size, moved = -1, time.monotonic()
        while True:
            code = self._reap(block=False)
            if code is not None:
                return code
            now = time.monotonic()
            try:
                grown = self.path.stat().st_size
            except FileNotFoundError:
                grown = 0
            if grown != size:
                size, moved = grown, now
            elif now - moved > STALL_SECONDS:
                self._kill()
                return -signal.SIGKILL
            await asyncio.sleep(POLL_SECONDS)

    async def _run(self) -> None:
        try:
            code = await self._wait_for_child()
            if code != 0:
                log.error("background compaction failed (the child building the snapshot at index %d exited "
                          "with %d); snapshots are built in line from now on", self.index, code)
                self._failed(True)
                return
            built = time.monotonic()
            self.storage.drop_strays(self.index)
            writer = self._writer = PartWriter(self.storage, self.index, STEP_BYTES)
            for part in _frames(self.path):
                if writer.add(part):
                    await asyncio.sleep(0)
            head, parts = writer.finish()
            self.storage.record_snapshot(self.index, self.epoch, head, parts)
            self._writer = None
            log.info("compacted the log through index %d: the snapshot built in %.1f s by a child, "
                     "stored in %.1f s", self.index, built - self.started, time.monotonic() - built)
            self._done(self.index, self.epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the member goes on; the log says why
            self._discard_parts()
            log.error("the snapshot at index %d could not be stored (%s); compaction is tried again in %.0f s",
                      self.index, exc, RETRY_SECONDS)
            self._failed(False)
        finally:
            self.path.unlink(missing_ok=True)

    def _kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap(block=True)

    def _discard_parts(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.discard()

    def cancel(self) -> None:
        """Stop now (the log or the state is about to be replaced): the child killed and reaped,
        the parts written so far deleted, nothing recorded."""
        self._task.cancel()
        self._kill()
        self._discard_parts()
        self.path.unlink(missing_ok=True)
