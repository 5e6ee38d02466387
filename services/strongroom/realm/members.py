"""The member lists of a realm file's clusters, read and rewritten as YAML (pure).

A membership change is a realm version whose only difference is a cluster's member list
(`persistence/reconfig.py` carries it out). Two callers make one: `strongroom cluster
add-member`/`remove-member` on a local deployment (`local/members.py`) and `strongroom cluster
sync-members` (the Helm chart's upgrade hooks: the member lists of the release's new realm file
put into the realm in force, nothing else of it). The text is read back and dumped again, so the
comments of the stored text do not survive an edit; the realm service validates the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["MemberListChange", "MembershipError", "edited_realm", "member_lists", "synced_realm"]


class MembershipError(Exception):
    """A membership change that cannot be made: nothing was changed."""


Member = dict[str, Any]
"""One entry of a cluster's `members` as the realm file writes it (name, and an address if given)."""


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MembershipError(f"{what} is not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise MembershipError(f"{what} is not a realm file (a mapping with clusters)")
    return doc


def _clusters(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c["name"]): c for c in doc.get("clusters") or [] if isinstance(c, dict) and "name" in c}


def _names(members: Sequence[Member]) -> list[str]:
    return [str(m.get("name")) for m in members if isinstance(m, dict)]


def member_lists(text: str) -> dict[str, list[Member]]:
    """Each cluster's primary members as the realm file lists them, in order. A cluster of a
    shared store (one member run as two instances) is left out: its member list does not change."""
    return {name: [dict(m) for m in c.get("members") or [] if isinstance(m, dict)]
            for name, c in _clusters(_load(text, "the realm file")).items() if not c.get("shared_store")}


def edited_realm(text: str, cluster: str, add: Sequence[str], remove: Sequence[str]) -> tuple[str, list[str]]:
    """The realm text with `add` appended to the cluster's members and `remove` dropped, and the
    member names it then lists (a MembershipError naming the problem, if one is already a member
    or is not one)."""
    doc = _load(text, "the realm in force")
    found = _clusters(doc).get(cluster)
    if found is None:
        raise MembershipError(f"the realm in force has no cluster {cluster!r}")
    members = found.setdefault("members", [])
    names = _names(members)
    for name in add:
        if name in names:
            raise MembershipError(f"{name} is already a member of cluster {cluster} (members: {', '.join(names)})")
    for name in remove:
        if name not in names:
            raise MembershipError(f"{name} is not a member of cluster {cluster} (members: {', '.join(names)})")
    found["members"] = [m for m in members if not (isinstance(m, dict) and m.get("name") in remove)]
    found["members"] += [{"name": name} for name in add]
    return str(yaml.safe_dump(doc, sort_keys=False)), _names(found["members"])


@dataclass(frozen=True)
class MemberListChange:
    """One cluster whose member list a sync changes: the names before and after."""

    cluster: str
    before: list[str]
    after: list[str]

    @property
    def added(self) -> list[str]:
        return [n for n in self.after if n not in self.before]

    @property
    def removed(self) -> list[str]:
        return [n for n in self.before if n not in self.after]


def synced_realm(current: str, wanted: str) -> tuple[str, list[MemberListChange]]:
    """The realm in force (`current`) with the member list of each of its clusters replaced by
    the one the realm file `wanted` gives it, and what that changes (no change: `current`
    itself and an empty list). Only member lists change: a cluster `wanted` lists that is not in
    force yet, and everything else `wanted` says, are left to applying the file itself."""
    lists = member_lists(wanted)
    doc = _load(current, "the realm in force")
    changes: list[MemberListChange] = []
    for name, cluster in _clusters(doc).items():
        if name not in lists or cluster.get("shared_store"):
            continue
        before = _names(cluster.get("members") or [])
        after = _names(lists[name])
        if cluster.get("members") == lists[name]:
            continue
        if not after:
            raise MembershipError(f"the realm file lists no members for cluster {name!r}")
        cluster["members"] = lists[name]
        changes.append(MemberListChange(name, before, after))
    if not changes:
        return current, []
    return str(yaml.safe_dump(doc, sort_keys=False)), changes
