"""Changing the members of a running cluster: `strongroom cluster add-member` and
`remove-member` on a local deployment, `strongroom cluster sync-members` anywhere (the Helm
chart's upgrade hooks run it).

A change is a realm version and processes: the cluster's member list in the realm the site's
realm service holds is changed (`realm/members.py`), then the cluster's leader carries the change
out one member at a time (`persistence/reconfig.py`) and the command waits until the leader's
status names the realm's members as its voters.

Locally the new members' processes are started (detached, with certificates of the deployment's
authority) and recorded in the state file; removed members' processes are stopped only once the
leader no longer counts them, so a removed member keeps serving its part until then; their data
directories stay (delete them by hand).

On Kubernetes the processes are the StatefulSet's pods, which the chart's upgrade starts and
stops, so `sync_members` only changes the realm and waits, in two steps around the upgrade of
the StatefulSet (README, "Kubernetes"): before it, the new member lists go in and, when members
are removed, the hook waits until the leader no longer counts them (`wait="removed"`), so the
pods the StatefulSet then deletes are out of every majority; after it (the new pods running),
until the voters are the new members (`wait="all"`). An added member's pod does not exist yet
during the first step: the leader keeps it a learner, trying to reach it, until it starts.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.api.v1 import admin_pb2
from strongroom.local.launcher import apply_realm, current_realm, start_member
from strongroom.local.leader import Leader, NoLeader, wait_for_leader
from strongroom.local.process import STOP_GRACE, stop_processes
from strongroom.local.statefile import load_state, write_state
from strongroom.realm.members import (
    MemberListChange,
    MembershipError,
    edited_realm,
    member_lists,
    synced_realm,
)
from strongroom.security.certs import set_up_local

__all__ = ["MemberChange", "MembershipError", "SyncedCluster", "Wait", "change_members", "edited_realm", "sync_members"]


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
    leader = await _await_voters(cluster, addresses, lambda st: list(st.voters) == target, target, timeout,
                                 progress, started_at)
    change.voters = list(leader.status.voters)
    gone = [members.pop(name) for name in remove if name in members]
    stop_processes([int(m["pid"]) for m in gone if m.get("pid")], STOP_GRACE)
    write_state(data_dir, state)
    change.seconds = time.monotonic() - started_at
    return change


async def _await_voters(cluster: str, addresses: Sequence[str], done: Callable[[admin_pb2.ClusterStatus], bool],
                        target: Sequence[str], timeout: float, progress: Callable[[str], None] | None,
                        started_at: float) -> Leader:
    """The cluster's leader once `done(its status)` holds and no change is under way, asking
    the members at `addresses`; NoLeader (the change goes on) after `timeout` seconds."""
    last = [""]

    def report() -> None:
        if progress and time.monotonic() - started_at > 1.0:
            line = f"waiting for the leader of {cluster} to make {', '.join(target)} its voters"
            if line != last[0]:
                progress(line)
                last[0] = line

    try:
        return await wait_for_leader(list(addresses), timeout, interval=0.25, each_round=report, accept=lambda st: (
            done(st) and not st.membership_change))
    except NoLeader:
        raise NoLeader(f"the leader of {cluster} did not make {', '.join(target)} its voters within {timeout:.0f} s; "
                       f"the change goes on (strongroom status shows where it is)") from None


class Wait(enum.Enum):
    """What `sync_members` waits for once the realm holds the new member lists."""

    NONE = "none"
    REMOVED = "removed"
    """Until the leader counts no removed member (added ones may not run yet)."""
    ALL = "all"
    """Until the leader's voters are exactly the new members."""


@dataclass
class SyncedCluster:
    """One cluster of a sync: its member list before and after, and the voters it ended with
    (none when the sync did not wait for it)."""

    change: MemberListChange
    voters: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        c = self.change
        return {"cluster": c.cluster, "before": c.before, "after": c.after, "added": c.added, "removed": c.removed,
                "voters": self.voters}


async def sync_members(realm_address: str, wanted: str, wait: Wait = Wait.ALL, timeout: float = 600.0,
                       progress: Callable[[str], None] | None = None) -> tuple[int, list[SyncedCluster]]:
    """Put the member lists of the realm file `wanted` into the realm in force at
    `realm_address` (one realm version, nothing else of the file; none when the lists are
    already in force) and wait as `wait` says for every cluster whose list the file gives:
    returns the realm version in force and the clusters. The leaders are asked at the member
    addresses the realms give (old and new). MembershipError or RealmInvalid: nothing changed;
    NoLeader: the change goes on but did not finish in time."""
    started_at = time.monotonic()
    current = await current_realm(realm_address)
    if current is None:
        raise MembershipError(f"the realm service at {realm_address} holds no realm")
    text, changes = synced_realm(current.yaml, wanted)
    version = int(current.version)
    if changes:
        what = "; ".join(f"{c.cluster}: {', '.join(c.after)}" for c in changes)
        version = await apply_realm(realm_address, text, f"strongroom cluster sync-members: {what}")
        if progress:
            for c in changes:
                progress(f"realm version {version}: cluster {c.cluster} lists {', '.join(c.after)} "
                         f"(was {', '.join(c.before)})")
    old, new = member_lists(current.yaml), member_lists(text)
    changed = {c.cluster: c for c in changes}
    synced: list[SyncedCluster] = []
    for name in member_lists(wanted):
        if name not in new:
            continue  # not in force yet: applying the file itself adds it
        c = changed.get(name) or MemberListChange(name, [str(m["name"]) for m in new[name]],
                                                  [str(m["name"]) for m in new[name]])
        one = SyncedCluster(c)
        synced.append(one)
        if wait is Wait.NONE or (wait is Wait.REMOVED and not c.removed):
            continue
        addresses = sorted({str(m["address"]) for m in [*old.get(name, []), *new[name]] if m.get("address")})
        if not addresses:
            raise MembershipError(f"cannot wait for cluster {name}: the realm gives none of its members an address "
                                  f"(--wait none applies the member lists without waiting)")
        gone = set(c.removed)
        done: Callable[[admin_pb2.ClusterStatus], bool] = (
            (lambda st, after=c.after: list(st.voters) == after) if wait is Wait.ALL else
            (lambda st, gone=gone: bool(st.voters) and not gone & set(st.voters)))
        leader = await _await_voters(name, addresses, done, c.after, timeout, progress, started_at)
        one.voters = list(leader.status.voters)
    return version, synced
