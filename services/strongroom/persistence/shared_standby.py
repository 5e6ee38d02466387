"""Standby on a shared store (docs/store-operations.md): a single-member cluster run as two
instances on one store in one directory on shared storage.

    standard   holds the store's lock for its whole life, opens the store and serves
    standby    does not open the store; checks the standard at the realm's control interval
               (`shared_store.control_interval_seconds`) and, once the standard stops answering
               *and* its lock is free, takes the lock, opens the store (restoring every
               persistent record from it), and serves as the standard

**Never two writers.** The store's lock is an exclusive `fcntl` lock on `<data_dir>/store.lock`,
taken before the store is opened and held until the process ends: the kernel (or an NFSv4
server, for a ReadWriteMany volume) releases it only when the process is gone. A standard that
is paused (SIGSTOP, a VM freeze) stops answering but still holds it, so the standby waits,
says so, and never opens the store; the standard resumes and goes on as if nothing happened.
The holder writes itself into the lock file, and the serving standard checks every control
interval that the file still names it (`watch_ownership`): if another instance wrote itself
there, this process lost its lock without knowing (an NFS lease that expired while it was
frozen) and it stops at once, before its next write. RocksDB's own `LOCK` file (an fcntl lock
too, in `<data_dir>/db/`) is the third guard. The lock is the store's, not the driver's: it works the same for any store driver in the
directory.

**Handshake.** The standby asks its partner's status (`AdminService.Status`, field
`shared_store`) and compares what must be the same for it to take the store over: the cluster
and member, the store (the id the first standard wrote into the directory: a standby whose
directory is not the shared one sees another id or none), the log format, the software version
and the transport security. A difference stops the standby with a precise message.

Both instances may be started as standby: neither answers as the standard, so each tries the
lock and the first to get it becomes the standard.

This module holds the lock, the store's identity, the handshake and the standby's control loop;
it imports no gRPC (the probe of the partner and the standby's own answers are
`standby_server.py`'s).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path

from strongroom.persistence.config import MemberConfig
from strongroom.persistence.log import LOG_FORMAT
from strongroom.security import tls

__all__ = [
    "HandshakeFailed",
    "Identity",
    "PartnerView",
    "RunMode",
    "STORE_ID_FILE",
    "STORE_LOCK_FILE",
    "SharedView",
    "Standby",
    "StoreLock",
    "StoreLocked",
    "identity",
    "mismatches",
    "read_store_id",
    "shared_view",
    "software_version",
    "take_as_standard",
    "transport_security",
    "watch_ownership",
]

log = logging.getLogger("strongroom.shared_standby")

STORE_LOCK_FILE = "store.lock"
"""The store's lock, in the member's data directory: held by the instance that may write it."""
STORE_ID_FILE = "store.id"
"""The store's identity, written once by the first instance that held the lock."""


def transport_security() -> str:
    """The transport security of this process's member API, compared in the handshake: the two
    instances serve the same clients and peers, so both are "mutual-tls" (as `strongroom up`
    and the chart run members) or both "plaintext" (`--insecure`)."""
    return "plaintext" if tls.current() is None else "mutual-tls"


class RunMode(str, Enum):
    """How an instance of a shared store is started (`--run-mode`)."""

    STANDARD = "standard"
    """Takes the store's lock at once (refused if the other instance holds it) and serves."""
    STANDBY = "standby"
    """Checks the standard and takes the store over when it stops answering."""


class StoreLocked(Exception):
    """An instance started as standard finds the store's lock held by its partner."""


class HandshakeFailed(Exception):
    """The partner is not this instance's standard on this store (the sentences say why)."""


def software_version() -> str:
    """The installed package's version ("unknown" outside an installed package)."""
    try:
        return metadata.version("strongroom")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_store_id(data_dir: Path) -> str:
    """The store's id as its directory holds it ("" when no standard wrote one yet)."""
    try:
        return (Path(data_dir) / STORE_ID_FILE).read_text().strip()
    except FileNotFoundError:
        return ""


@dataclass(frozen=True)
class Identity:
    """What an instance says of itself in the handshake."""

    cluster: str
    member: str
    store_id: str
    log_format: int
    version: str
    security: str


def identity(cluster: str, member: str, data_dir: Path) -> Identity:
    """This instance's identity, the store id read from its directory now."""
    return Identity(cluster, member, read_store_id(data_dir), LOG_FORMAT, software_version(), transport_security())


def mismatches(ours: Identity, theirs: Identity, partner: str) -> list[str]:
    """Why the instance at `partner` is not our partner on the same store, one sentence each
    (empty: the handshake holds). A partner without a store id yet (none was ever the standard)
    matches any."""
    problems = []
    if (theirs.cluster, theirs.member) != (ours.cluster, ours.member):
        problems.append(f"the partner at {partner} is member {theirs.member or '?'} of cluster "
                        f"{theirs.cluster or '?'}, not {ours.member} of {ours.cluster}: check shared_store.instances")
    if theirs.store_id and theirs.store_id != ours.store_id:
        problems.append(f"not the same store: the partner at {partner} holds store {theirs.store_id}, this "
                        f"instance's data directory {'holds ' + ours.store_id if ours.store_id else 'holds none'} "
                        f"(both instances must use one directory on shared storage)")
    if theirs.log_format != ours.log_format:
        problems.append(f"the partner at {partner} writes log format {theirs.log_format}, this instance "
                        f"{ours.log_format}: run the same version on both")
    if theirs.version != ours.version:
        problems.append(f"the partner at {partner} runs version {theirs.version}, this instance {ours.version}")
    if theirs.security != ours.security:
        problems.append(f"the partner at {partner} uses transport security {theirs.security!r}, this instance "
                        f"{ours.security!r}")
    return problems


@dataclass(frozen=True)
class PartnerView:
    """The partner's answer to the standby's check."""

    run_mode: str
    """"standard", "standby", or "" (the partner is not an instance of a shared store)."""
    identity: Identity


@dataclass(frozen=True)
class SharedView:
    """What an instance of a shared store reports in its status (`ClusterStatus.shared_store`)."""

    run_mode: RunMode
    partner: str
    identity: Identity
    state: str
    control_interval: float


def shared_view(config: MemberConfig) -> Callable[[], SharedView] | None:
    """The status view of a member serving as a shared store's standard (None for a member of
    another cluster)."""
    if not config.partner:
        return None

    def view() -> SharedView:
        return SharedView(RunMode.STANDARD, config.partner, identity(config.cluster, config.member, config.data_dir),
                          "", config.control_interval)

    return view


class StoreLock:
    """The exclusive fcntl lock on `<data_dir>/store.lock`, held until the process ends.

    fcntl locks belong to the process and go when *any* of its descriptors of the file is
    closed: this object opens the file once and never closes it while held, and nothing else
    in the process opens it."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / STORE_LOCK_FILE
        self._fd: int | None = None
        self.held = False
        self.holder_text = ""
        """What this process wrote into the file when it took the lock."""

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def try_acquire(self, holder: str) -> bool:
        """Take the lock if it is free (never waits); on success write `holder` (who holds it)
        into the file. True when this process holds it."""
        if self.held:
            return True
        fd = self._open()
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        self.held = True
        self.holder_text = holder
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder}\n".encode(), 0)
        os.fsync(fd)
        return True

    def still_ours(self) -> bool:
        """The lock file still names this holder (read through the held descriptor, which keeps
        the lock): False once another instance wrote itself there, which it can only have done
        holding the lock, i.e. after this process lost it."""
        return self.held and self.holder() == self.holder_text

    def holder(self) -> str:
        """Who holds (or last held) the lock, as the holder wrote it."""
        fd = self._open()
        return os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"

    def ensure_store_id(self) -> str:
        """The store's id, written now if this is the first holder (write-then-rename: never
        half a file). Only while held."""
        assert self.held
        current = read_store_id(self.path.parent)
        if current:
            return current
        new = uuid.uuid4().hex
        tmp = self.path.parent / f"{STORE_ID_FILE}.tmp"
        tmp.write_text(new + "\n")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path.parent / STORE_ID_FILE)
        return new


def _holder(address: str) -> str:
    """What the holder of the store's lock writes into its file: who and since when."""
    return f"pid {os.getpid()} at {address} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"


Probe = Callable[[str, float], Awaitable[PartnerView | None]]
"""Ask the instance at an address for its shared-store status within a timeout (None: no answer)."""


class Standby:
    """The standby's control loop: `run` returns once this instance holds the store's lock."""

    def __init__(self, cluster: str, member: str, data_dir: Path, address: str, partner: str,
                 interval: float, probe: Probe, lock: StoreLock) -> None:
        self.cluster = cluster
        self.member = member
        self.data_dir = Path(data_dir)
        self.address = address
        self.partner = partner
        self.interval = interval
        self._probe = probe
        self.lock = lock
        self.state = "checking the standard"
        """What the standby does, in words (status, the standby's refusals, the log)."""
        self.standard_answers = False
        """The partner answered the last check as the standard (the standby redirects to it)."""
        self.handshaken = False

    def view(self) -> SharedView:
        """The standby's status."""
        return SharedView(RunMode.STANDBY, self.partner, identity(self.cluster, self.member, self.data_dir),
                          self.state, self.interval)

    def _note(self, state: str, level: int = logging.INFO) -> None:
        if state != self.state:
            log.log(level, "standby of %s/%s: %s", self.cluster, self.member, state)
        self.state = state

    async def run(self) -> None:
        """Check the partner every control interval until the store's lock is ours. Raises
        HandshakeFailed when the partner is not this instance's standard on this store."""
        while True:
            started = time.monotonic()
            view = await self._probe(self.partner, max(0.2, min(self.interval, 2.0)))
            if view is not None:
                problems = mismatches(identity(self.cluster, self.member, self.data_dir), view.identity,
                                      self.partner)
                if not view.run_mode:
                    problems.insert(0, f"the instance at {self.partner} is not an instance of a shared store "
                                       f"(is its realm's cluster {self.cluster} the same?)")
                if problems:
                    raise HandshakeFailed("; ".join(problems))
                if not self.handshaken:
                    self.handshaken = True
                    log.info("standby of %s/%s: handshake with %s (%s) done: store %s, log format %d, version %s, "
                             "security %s", self.cluster, self.member, self.partner, view.run_mode,
                             view.identity.store_id or "(new)", view.identity.log_format, view.identity.version,
                             view.identity.security)
            self.standard_answers = view is not None and view.run_mode == RunMode.STANDARD.value
            if self.standard_answers:
                self._note(f"watching the standard at {self.partner} every {self.interval:g} s")
            elif self.lock.try_acquire(_holder(self.address)):
                why = "is a standby too" if view is not None else "does not answer"
                self._note(f"taking the store over: the partner at {self.partner} {why} and its lock is free",
                           logging.WARNING)
                return
            else:
                why = "answers as a standby" if view is not None else "does not answer"
                self._note(f"the partner at {self.partner} {why} but the store's lock is held ({self.lock.holder()}): "
                           f"waiting, the store is not opened while it is held", logging.WARNING)
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))


async def watch_ownership(lock: StoreLock, interval: float, lost: Callable[[str], None]) -> None:
    """The serving standard's second guard: every control interval, check that the lock file
    still names it; if another instance wrote itself there (a lock lost without this process
    knowing: an NFS lease that expired while it was frozen), call `lost` with the new holder,
    which stops the process before it writes again."""
    while True:
        await asyncio.sleep(interval)
        if not lock.still_ours():
            lost(lock.holder())
            return


def take_as_standard(lock: StoreLock, address: str) -> None:
    """An instance started as standard: the lock now, or StoreLocked naming its holder."""
    if not lock.try_acquire(_holder(address)):
        raise StoreLocked(f"the shared store in {lock.path.parent} is held by another instance ({lock.holder()}); "
                          f"start this one as standby (--run-mode standby)")
