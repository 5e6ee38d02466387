"""`strongroom up`: validate the realm, start a local deployment (`LocalCluster`), report it, and
stay in the foreground until Ctrl-C / SIGTERM (or return at once, detached)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any, Self

from strongroom.errors import RealmInvalid
from strongroom.local.launcher import SYNC_TIMEOUT, LocalCluster
from strongroom.local.statefile import live_pids, load_state, say, state_path, warn
from strongroom.realm.model import DEFAULT_REALM_YAML, Realm, parse_realm

__all__ = ["up"]


def _read_realm(realm_file: Path | None) -> tuple[Realm, str, str] | None:
    """Parse and validate the realm to run; print its problems and return None if invalid."""
    if realm_file is None:
        text, source = DEFAULT_REALM_YAML, "<built-in default realm>"
    else:
        source = str(realm_file)
        try:
            text = Path(realm_file).read_text()
        except OSError as exc:
            warn(f"error: cannot read realm file {source}: {exc.strerror or exc}")
            return None
    try:
        realm = parse_realm(text, source)
    except RealmInvalid as exc:
        warn(f"error: the realm {source} is invalid; nothing was started:")
        for problem in exc.problems:
            warn(f"  {problem}")
        return None
    return realm, text, source


class _Stop:
    """SIGINT/SIGTERM/SIGHUP handling: interrupt while starting, then a flag the foreground loop polls."""

    def __init__(self) -> None:
        self.requested = False
        self.interrupt = True
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Self:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        if self.interrupt:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def up(realm_file: Path | None, data_dir: Path, detach: bool, insecure: bool = False) -> int:
    """`strongroom up`: start a local deployment; returns the exit code.

    Detached, returns once every cluster has a committed leader; otherwise stays in the
    foreground until Ctrl-C / SIGTERM and then stops everything. Without `realm_file`, a realm
    already stored in a reused data dir is kept; otherwise the built-in default is applied.
    Every connection is mutual TLS with an authority kept in `<data_dir>/tls`, unless `insecure`.
    """
    data_dir = Path(data_dir).absolute()
    parsed = _read_realm(realm_file)
    if parsed is None:
        return 1
    realm, text, source = parsed
    state = load_state(data_dir)
    if state is not None:
        alive = live_pids(state)
        if alive:
            warn(f"error: a local cluster is already running in {data_dir} "
                  f"({', '.join(f'{label} pid {pid}' for label, pid in alive)}); "
                  f"use `strongroom status` or `strongroom down --data-dir {data_dir}`")
            return 1
        say(f"replacing the stale state file of {data_dir} (data is reused)")
        state_path(data_dir).unlink(missing_ok=True)

    if insecure:
        warn("WARNING: --insecure: every port of this deployment is plaintext and unauthenticated; "
             "whoever reaches them can read and write every store")
    cluster = LocalCluster(data_dir, detach=detach, tls=not insecure)
    with _Stop() as stop:
        try:
            leaders = asyncio.run(cluster.start(realm, text, source, keep_stored_realm=realm_file is None))
        except KeyboardInterrupt:
            warn("interrupted; stopping what was started ...")
            cluster.stop()
            return 130
        except Exception as exc:  # noqa: BLE001 - any failure: report it, leave nothing running
            warn(f"error: {exc}")
            warn("stopping what was started ...")
            cluster.stop()
            return 1
        stop.interrupt = False
        cluster.save()
        lagging = asyncio.run(cluster.wait_until_synced(SYNC_TIMEOUT))
        say(f"strongroom is up (data in {data_dir}):")
        for line in cluster.describe(leaders):
            say(f"  {line}")
        say(f"  endpoints: {','.join(cluster.endpoints())}")
        say(f"  TLS: {'OFF (--insecure)' if cluster.tls is None else f'on, authority {cluster.tls.ca_path}'}")
        for line in lagging:
            # Serving, but with less redundancy than the realm asks for: say so.
            warn(f"warning: member {line}; see {data_dir / 'logs'}")
        if detach:
            say(f"stop it with: strongroom down --data-dir {data_dir}")
            return 0
        say("running in the foreground; Ctrl-C stops everything")
        reported: set[str] = set()
        while not stop.requested:
            if load_state(data_dir) is None:
                say("the state file was removed (strongroom down?); stopping")
                break
            members = [p for ms in [*cluster.members.values(), *cluster.standbys.values()] for p in ms.values()]
            for proc in [*members, *cluster.services()]:
                if not proc.alive() and proc.name not in reported:
                    reported.add(proc.name)
                    what = "member" if proc in members else "router" if proc.name.endswith("/router") else "DR service"
                    warn(f"{what} {proc.name} exited with code {proc.returncode()}; see {proc.log}")
            time.sleep(0.3)
        say("stopping routers, DR services, members, the realm service and etcd ...")
        cluster.stop()
        say("stopped")
    return 0
