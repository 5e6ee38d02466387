"""Starting and stopping Strongroom's own processes: one place for every tool that runs them.

The local launcher, the drills, the chaos suite, the test harness and the benchmarks all start
persistence members (and the launcher and the realm tests the realm service) the same way: the
command line comes from `member_argv` / `realm_argv`, the process from `spawn` (output appended
to its log file, unbuffered), and it is stopped by pid with `stop_processes` (SIGTERM, a grace
period, then SIGKILL) or `kill` (SIGKILL at once). Nothing here waits for a process to serve:
finding the leader is `strongroom.local.leader`.

TLS: while a local authority is active (`strongroom.security.certs.activate`: `strongroom up`
without `--insecure`, the test session, the chaos suite, the benchmarks), `spawn` gives each of
these processes a certificate of its own, naming what its command line says it is
(`identity_of`), through the environment (`STRONGROOM_TLS_*`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from strongroom.security import certs
from strongroom.security.identity import Identity, Kind
from strongroom.security.revocation import CRL_ENV
from strongroom.security.tls import ENV as TLS_ENV

if TYPE_CHECKING:
    from strongroom.realm.model import SharedStore

__all__ = [
    "REAP_WAIT",
    "STOP_GRACE",
    "ProcessGroup",
    "ServiceProcess",
    "dr_argv",
    "identity_of",
    "kill",
    "member_argv",
    "member_instances",
    "pid_alive",
    "pid_exists",
    "realm_argv",
    "router_argv",
    "run_mode_args",
    "spawn",
    "stop_pid",
    "stop_processes",
]

STOP_GRACE = 10.0
"""Seconds between SIGTERM and SIGKILL unless the caller says otherwise."""
REAP_WAIT = 5.0
"""Seconds `stop_processes` waits, after a process another run started has exited, for its
parent to reap it (at once under a usual init; some container inits reap every second or two)."""

PERSISTENCE_MODULE = "strongroom.persistence.main"
REALM_MODULE = "strongroom.realm.main"
ROUTER_MODULE = "strongroom.routing.main"
DR_MODULE = "strongroom.dr.main"


def member_argv(etcd: str, cluster: str, member: str, listen: str, data_dir: str | Path, *,
                log_level: str | None = None, advertise: str | None = None,
                replication_listen: str | None = None, replication_advertise: str | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """The command line of a persistence member (what `strongroom.persistence.main` parses).

    Options left None are not passed, so the member's own defaults apply; `extra` goes last.
    """
    argv = [sys.executable, "-m", PERSISTENCE_MODULE, "--etcd", etcd, "--cluster", cluster,
            "--member", member, "--listen", listen, "--data-dir", str(data_dir)]
    for option, value in (("--log-level", log_level), ("--advertise", advertise),
                          ("--replication-listen", replication_listen),
                          ("--replication-advertise", replication_advertise)):
        if value is not None:
            argv += [option, value]
    return [*argv, *extra]


def member_instances(member: str, address: str | None,
                     shared: SharedStore | None) -> list[tuple[str, str | None, str]]:
    """The processes a member runs as: (name, address, instance). One, under its own name and
    address, for a member of most clusters; for a member of a cluster with a shared store
    (docs/store-operations.md), its two instances `<member>@1` and `<member>@2` at the realm's
    instance addresses (started on the member's one directory)."""
    if shared is None:
        return [(member, address, "")]
    return [(f"{member}@{n}", a, f"{member}@{n}") for n, a in enumerate(shared.instances, start=1)]


def run_mode_args(instance: str) -> list[str]:
    """A member's command-line arguments for its run mode: a shared store's instance starts as
    standby (the first of the two up becomes the standard); any other member needs none."""
    return ["--run-mode", "standby"] if instance else []


def realm_argv(etcd: str, listen: str, extra: Sequence[str] = ()) -> list[str]:
    """The command line of the realm service (what `strongroom.realm.main` parses)."""
    return [sys.executable, "-m", REALM_MODULE, "--etcd", etcd, "--listen", listen, *extra]


def router_argv(etcd: str, cluster: str, listen: str, replica: str, extra: Sequence[str] = ()) -> list[str]:
    """The command line of a cluster's router (what `strongroom.routing.main` parses)."""
    return [sys.executable, "-m", ROUTER_MODULE, "--cluster", cluster, "--etcd", etcd, "--listen", listen,
            "--replica", replica, *extra]


def dr_argv(etcd: str, cluster: str, extra: Sequence[str] = ()) -> list[str]:
    """The command line of a cluster's DR service at one of its sites (what `strongroom.dr.main`
    parses; `etcd`: that site's)."""
    return [sys.executable, "-m", DR_MODULE, "--cluster", cluster, "--etcd", etcd, *extra]


_KINDS = {PERSISTENCE_MODULE: Kind.MEMBER, ROUTER_MODULE: Kind.ROUTER, DR_MODULE: Kind.DR, REALM_MODULE: Kind.REALM}


def identity_of(argv: Sequence[str]) -> Identity | None:
    """Who a process started with one of this module's command lines is: a member by its
    cluster and member name, a router replica, a cluster's DR service, the realm service; None
    for any other command."""
    args = list(argv)
    module = args[args.index("-m") + 1] if "-m" in args[:-1] else ""
    kind = _KINDS.get(module)
    if kind is None:
        return None

    def option(name: str, default: str) -> str:
        return args[args.index(name) + 1] if name in args[:-1] else default

    if kind is Kind.REALM:
        return Identity(kind, "realm", "realm")
    name = {Kind.MEMBER: option("--member", ""), Kind.ROUTER: option("--replica", "r1"), Kind.DR: "dr"}[kind]
    return Identity(kind, name, option("--cluster", "default"))


class ProcessGroup(str, Enum):
    """Where a started process sits among the caller's signals."""

    INHERIT = "inherit"
    """The caller's process group: a Ctrl-C in the terminal reaches it too."""
    OWN = "own"
    """A process group of its own: a Ctrl-C reaches only the caller, which stops it in order."""
    SESSION = "session"
    """A session of its own: it outlives the terminal (`strongroom up --detach`)."""


def spawn(argv: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
          extra_env: Mapping[str, str] | None = None, cwd: Path | None = None,
          group: ProcessGroup = ProcessGroup.INHERIT, banner: str = "",
          pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr appended to `log_path` and no stdin (`pass_fds`: file
    descriptors the process inherits, such as one end of a socket pair to command it through).

    The environment is `env` (default: this process's) with PYTHONUNBUFFERED=1, so the log is
    current when a test or a tool reads it, the TLS settings of its identity (module docstring),
    then `extra_env` (e.g. a PYTHONPATH or LD_PRELOAD for hooks). `banner`, when given, is written to the log first.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    ca, identity = certs.active(), identity_of(argv)
    if ca is not None and identity is not None:
        environment.update(ca.issue(identity).env(), **{CRL_ENV: str(ca.crl_path)})
    elif identity is not None:
        for name in (*TLS_ENV, CRL_ENV):  # plaintext, whatever this process was given
            environment.pop(name, None)
    environment.update(extra_env or {})
    with open(log_path, "ab") as log:
        if banner:
            log.write(banner.encode())
            log.flush()
        return subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
            cwd=cwd, start_new_session=group is ProcessGroup.SESSION,
            process_group=0 if group is ProcessGroup.OWN else None, pass_fds=tuple(pass_fds),
        )


def pid_exists(pid: int) -> bool:
    """True while the pid is in the process table (running, or a zombie its parent has not
    reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """True while any thread of the process runs.

    A process whose main thread has exited shows as a zombie while its other threads still
    close their files and sockets (gRPC's, RocksDB's): it is alive until the last one is gone.
    A zombie with no thread left has exited (only its exit status waits for its parent)."""
    if not pid_exists(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False  # gone between the two looks
    except OSError:
        return True  # no /proc (not Linux): kill(0) is all we know
    # Field 3, after the parenthesised command name (which may contain spaces).
    if stat.rsplit(")", 1)[-1].split()[0] != "Z":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _gone(target: subprocess.Popen[bytes] | int) -> bool:
    if isinstance(target, subprocess.Popen):
        return target.poll() is not None
    return not pid_alive(target)


def _pid(target: subprocess.Popen[bytes] | int) -> int:
    return target.pid if isinstance(target, subprocess.Popen) else target


def _wait_until(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def stop_processes(targets: Sequence[subprocess.Popen[bytes] | int], grace: float = STOP_GRACE) -> None:
    """Stop several processes at once: SIGTERM to all, wait up to `grace` s, SIGKILL the rest.
    Returns once every one has exited: all its threads, not only the main one.

    A target is our child (`Popen`, reaped here) or a bare pid (a process another run started,
    e.g. from a state file). A bare pid's parent reaps it, not us: up to `REAP_WAIT` s more
    are given for that, so that a process said to be stopped is no longer listed either."""
    pending = []
    for target in targets:
        if _gone(target):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(_pid(target), signal.SIGTERM)
        pending.append(target)
    _wait_until(lambda: all(_gone(t) for t in pending), grace)
    for target in pending:
        if _gone(target):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(_pid(target), signal.SIGKILL)
        if isinstance(target, subprocess.Popen):
            target.wait()
        else:
            _wait_until(functools.partial(_gone, target), 5.0)
    pids = [t for t in pending if not isinstance(t, subprocess.Popen)]
    _wait_until(lambda: not any(pid_exists(pid) for pid in pids), REAP_WAIT)


def stop_pid(pid: int, grace: float = STOP_GRACE, process: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; reap it when it is our child (`process`)."""
    stop_processes([process if process is not None else pid], grace)


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child at once (a crash, for drills and faults) and reap it; nothing if it exited."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    process.wait()


@dataclass
class ServiceProcess:
    """One started service process (realm service, persistence member or router)."""

    name: str
    """`realm`, `<cluster>/<member>` or `<cluster>/router`."""
    address: str
    pid: int
    log: str
    data_dir: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        """True while the process runs."""
        if self.process is not None:
            return self.process.poll() is None
        return pid_alive(self.pid)

    def returncode(self) -> int | None:
        """Exit code once it exited (None if unknown or still running)."""
        return self.process.poll() if self.process is not None else None

    def kill(self) -> None:
        """SIGKILL at once (drills), and reap."""
        if self.process is not None:
            kill(self.process)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM, then SIGKILL after `grace`."""
        stop_pid(self.pid, grace, self.process)

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of its log, for error messages."""
        try:
            text = Path(self.log).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
