"""The state file of a local deployment (`<data_dir>/state.json`): where it is, what it lists,
and `down`, which stops every process it lists.

`strongroom up` (`strongroom.local.launcher`) writes it; `down`, the CLI's default endpoints, the
drills and the tests read it. Every write replaces the file atomically.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from strongroom.local.process import STOP_GRACE, pid_alive, stop_processes

__all__ = [
    "STATE_FILE",
    "default_data_dir",
    "down",
    "dr_services",
    "live_pids",
    "load_state",
    "member_endpoints",
    "say",
    "standby_endpoints",
    "state_path",
    "warn",
    "write_state",
]

STATE_FILE = "state.json"


def say(message: str) -> None:
    """A line for the operator on stdout (the launcher's commands too)."""
    print(message, flush=True)


def warn(message: str) -> None:
    """A line for the operator on stderr."""
    print(message, file=sys.stderr, flush=True)


def default_data_dir() -> Path:
    """`$STRONGROOM_DATA_DIR`, else `./.strongroom`."""
    return Path(os.environ.get("STRONGROOM_DATA_DIR") or ".strongroom").absolute()


def state_path(data_dir: Path) -> Path:
    """Where the state file of a data dir lives."""
    return Path(data_dir) / STATE_FILE


def load_state(data_dir: Path) -> dict[str, Any] | None:
    """The state file of a data dir, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads(state_path(data_dir).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(data_dir: Path, state: dict[str, Any]) -> None:
    path = state_path(data_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)  # atomic: readers never see half a file


def member_endpoints(state: dict[str, Any]) -> list[str]:
    """Every member address the state file lists, cluster by cluster."""
    out: list[str] = []
    for cluster in state.get("clusters", {}).values():
        for member in cluster.get("members", {}).values():
            if member.get("address"):
                out.append(str(member["address"]))
    return out


def standby_endpoints(state: dict[str, Any]) -> list[str]:
    """Every member address of the clusters' disaster-recovery standby sets (not for clients:
    they serve none; for status)."""
    out: list[str] = []
    for cluster in state.get("clusters", {}).values():
        for member in cluster.get("standby", {}).get("members", {}).values():
            if member.get("address"):
                out.append(str(member["address"]))
    return out


def dr_services(state: dict[str, Any], cluster: str | None = None) -> list[tuple[str, str, str]]:
    """(cluster, site, address) of every DR service the state file lists (of `cluster` only,
    when given): per cluster with a standby set, the one at its standby site ("standby") and the
    one at the site of its primary set ("primary")."""
    out: list[tuple[str, str, str]] = []
    for name, c in state.get("clusters", {}).items():
        if cluster not in (None, name):
            continue
        for site, dr in (("standby", c.get("standby", {}).get("dr", {})), ("primary", c.get("dr", {}))):
            if dr.get("address"):
                out.append((name, site, str(dr["address"])))
    return out


def _state_pids(state: dict[str, Any]) -> list[tuple[str, int]]:
    """(label, pid) of every process in a state file: routers and DR services first, then
    members (standby members too), realm services, etcds (the order `down` stops them in)."""
    out: list[tuple[str, int]] = []
    for cname, cluster in state.get("clusters", {}).items():
        if cluster.get("router", {}).get("pid"):
            out.append((f"router {cname}", int(cluster["router"]["pid"])))
        if cluster.get("standby", {}).get("dr", {}).get("pid"):
            out.append((f"dr {cname} (standby site)", int(cluster["standby"]["dr"]["pid"])))
        if cluster.get("dr", {}).get("pid"):
            out.append((f"dr {cname} (primary site)", int(cluster["dr"]["pid"])))
    for cname, cluster in state.get("clusters", {}).items():
        for mname, member in [*cluster.get("members", {}).items(), *cluster.get("standby", {}).get("members", {}).items()]:
            if member.get("pid"):
                out.append((f"member {cname}/{mname}", int(member["pid"])))
    sites = state.get("sites") or {"": {"realm": state.get("realm", {}), "etcd": state.get("etcd", {})}}
    for name, site in sites.items():
        if site.get("realm", {}).get("pid"):
            out.append((f"realm service {name}".rstrip(), int(site["realm"]["pid"])))
    for name, site in sites.items():
        if site.get("etcd", {}).get("pid"):
            out.append((f"etcd {name}".rstrip(), int(site["etcd"]["pid"])))
    return out


def _looks_like_ours(pid: int) -> bool:
    """Guard against a reused pid: the command line must be etcd's or a strongroom service's."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the state file
    return b"strongroom" in cmdline or b"etcd" in cmdline


def live_pids(state: dict[str, Any]) -> list[tuple[str, int]]:
    """The processes of a state file that are still running."""
    return [(label, pid) for label, pid in _state_pids(state) if pid_alive(pid) and _looks_like_ours(pid)]


def down(data_dir: Path, grace: float = STOP_GRACE) -> int:
    """`strongroom down`: stop every process of the state file (members, realm, etcd) and remove it."""
    data_dir = Path(data_dir).absolute()
    state = load_state(data_dir)
    if state is None:
        say(f"no local cluster in {data_dir} (no {STATE_FILE})")
        return 0
    alive = {pid: label for label, pid in live_pids(state)}
    groups: list[list[tuple[str, int]]] = [
        [(label, pid) for label, pid in _state_pids(state) if label.startswith(kind)]
        for kind in ("router ", "dr ", "member ", "realm service", "etcd")
    ]
    for group in groups:
        running = [(label, pid) for label, pid in group if pid in alive]
        if running:
            say(f"stopping {', '.join(f'{label} (pid {pid})' for label, pid in running)}")
            stop_processes([pid for _, pid in running], grace)
    still = live_pids(state)
    if still:
        warn(f"error: still running: {', '.join(f'{label} pid {pid}' for label, pid in still)}")
        return 1
    state_path(data_dir).unlink(missing_ok=True)
    say(f"stopped the local cluster in {data_dir}")
    return 0
