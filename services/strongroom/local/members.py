"""Adding and removing members of a running local cluster (`strongroom cluster add-member` and
`remove-member`).

A change is a realm version and processes: the cluster's member list in the realm the site's
realm service holds is changed (the YAML read back, edited and applied again: comments of the
stored text do not survive the edit), the new members' processes are started (detached, with
certificates of the deployment's authority) and recorded in the state file, then the cluster's
leader carries the change out one member at a time (`persistence/reconfig.py`) and the command
waits until the leader's status names the realm's members as its voters. Removed members'
processes are stopped only then, so a removed member keeps serving its part until it no longer
counts; their data directories stay (delete them by hand).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from strongroom.local.launcher import apply_realm, current_realm, start_member
from strongroom.local.leader import NoLeader, wait_for_leader
from strongroom.local.process import STOP_GRACE, stop_processes
from strongroom.local.statefile import load_state, write_state
from strongroom.security.certs import set_up_local

__all__ = ["MemberChange", "MembershipError", "change_members", "edited_realm"]


class MembershipError(Exception):
    """A membership change that cannot be made here: nothing was changed."""


@dataclass
class MemberChange:
    """What a change did."""

    cluster: str
    realm_version: int
    voters: list[str]
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The new members' processes as the state file lists them."""

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "realm_version": self.realm_version, "voters": self.voters,
                "added": self.added, "removed": self.removed, "seconds": round(self.seconds, 2),
                "started": self.started}


def _where(state: dict[str, Any], cluster: str) -> tuple[str, str]:
    """The etcd endpoint and realm service address of the cluster's site."""
    sites = state.get("sites") or {}
    site = sites.get(cluster) or {}
    etcd = (state["clusters"][cluster].get("etcd") or (site.get("etcd") or {}).get("endpoint")
            or state.get("etcd", {}).get("endpoint"))
    realm = (site.get("realm") or {}).get("address") or state.get("realm", {}).get("address")
    if not etcd or not realm:
        raise MembershipError(f"the state file names no etcd or realm service for cluster {cluster}")
    return str(etcd), str(realm)


def edited_realm(text: str, cluster: str, add: Sequence[str], remove: Sequence[str]) -> tuple[str, list[str]]:
    """The realm text with `add` appended to the cluster's members and `remove` dropped, and the
    member names it then lists (a MembershipError naming the problem, if one is already a member
    or is not one)."""
    doc = yaml.safe_load(text)
    found = [c for c in doc.get("clusters") or [] if isinstance(c, dict) and c.get("name") == cluster]
    if not found:
        raise MembershipError(f"the realm in force has no cluster {cluster!r}")
    members = found[0].setdefault("members", [])
    names = [m.get("name") for m in members if isinstance(m, dict)]
    for name in add:
        if name in names:
            raise MembershipError(f"{name} is already a member of cluster {cluster} (members: {', '.join(names)})")
    for name in remove:
        if name not in names:
            raise MembershipError(f"{name} is not a member of cluster {cluster} (members: {', '.join(names)})")
    found[0]["members"] = [m for m in members if not (isinstance(m, dict) and m.get("name") in remove)]
    found[0]["members"] += [{"name": name} for name in add]
    return str(yaml.safe_dump(doc, sort_keys=False)), [m.get("name") for m in found[0]["members"]]


async def change_members(data_dir: Path, cluster: str, add: Sequence[str] = (), remove: Sequence[str] = (),
                         timeout: float = 300.0, progress: Any = None) -> MemberChange:
    """Carry out one change of a local cluster's members (module docstring). Raises
    MembershipError (nothing changed), RealmInvalid (the realm service refused the new member
    list: nothing changed), or NoLeader when the leader did not finish in `timeout` seconds (the
    change goes on: see `strongroom status`)."""
    started_at = time.monotonic()
    state = load_state(data_dir)
    if state is None or cluster not in state.get("clusters", {}):
        raise MembershipError(f"no local deployment with a cluster {cluster!r} runs in {data_dir} (strongroom up)")
    etcd, realm_address = _where(state, cluster)
    set_up_local(Path(data_dir) / "tls", state.get("tls") is not None)
    current = await current_realm(realm_address)
    if current is None:
        raise MembershipError(f"the realm service at {realm_address} holds no realm")
    text, target = edited_realm(current.yaml, cluster, add, remove)
    what = " ".join([*(f"+{n}" for n in add), *(f"-{n}" for n in remove)])
    version = await apply_realm(realm_address, text, f"strongroom cluster: {cluster} {what}")
    members: dict[str, dict[str, Any]] = state["clusters"][cluster]["members"]
    change = MemberChange(cluster, version, [], list(add), list(remove))
    for name in add:
        proc = start_member(etcd, cluster, name, Path(data_dir), detach=True)
        members[name] = change.started[name] = {"address": proc.address, "pid": proc.pid, "data_dir": proc.data_dir,
                                                "log": proc.log}
        if progress:
            progress(f"started {cluster}/{name} at {proc.address} (pid {proc.pid}, log {proc.log})")
    write_state(data_dir, state)
    addresses = [str(m["address"]) for m in members.values() if m.get("address")]
    last = [""]

    def report() -> None:
        if progress and time.monotonic() - started_at > 1.0:
            line = f"waiting for the leader of {cluster} to make {', '.join(target)} its voters"
            if line != last[0]:
                progress(line)
                last[0] = line

    try:
        leader = await wait_for_leader(addresses, timeout, interval=0.25, each_round=report, accept=lambda st: (
            list(st.voters) == target and not st.membership_change))
    except NoLeader:
        raise NoLeader(f"the leader of {cluster} did not make {', '.join(target)} its voters within {timeout:.0f} s; "
                       f"the change goes on (strongroom status shows where it is)") from None
    change.voters = list(leader.status.voters)
    gone = [members.pop(name) for name in remove if name in members]
    stop_processes([int(m["pid"]) for m in gone if m.get("pid")], STOP_GRACE)
    write_state(data_dir, state)
    change.seconds = time.monotonic() - started_at
    return change

