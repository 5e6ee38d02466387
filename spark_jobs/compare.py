"""The backlog job's answer beside what the cluster reports: `strongroom status --json`'s durables
and stores, field by field.

The backlog job names its columns after status's (`DurableStatus.pending_messages`,
`pending_bytes`, `unacked`; `StoreStatus.messages`, `bytes`), so each compared field is the same
name on both sides. What status reports and the event log cannot say is not compared:
`refused` (refusals are not events), `subscribers`, the realm settings. `unacked` is leader
state about open subscriptions: it matches only while the subscribers that received the
messages are still connected (a subscription closing is not an event), so it is compared only
when asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DURABLE_FIELDS", "STORE_FIELDS", "Difference", "compare_with_status", "status_of_leaders"]

DURABLE_FIELDS = ("pending_messages", "pending_bytes")
"""Durable fields compared by default (`unacked` on request)."""
STORE_FIELDS = ("messages", "bytes")
"""Store fields compared by default."""


@dataclass(frozen=True)
class Difference:
    """One field on which the job and the cluster disagree (or a durable or store only one has)."""

    cluster: str
    store: str
    destination: str | None
    """None for a store's own fields."""
    durable: str | None
    field: str
    """The field, or "present" when one side lacks the durable or store."""
    backlog: Any
    status: Any

    def __str__(self) -> str:
        where = f"{self.cluster}/{self.store}" + (
            f" {self.destination}/{self.durable or '(queue)'}" if self.destination is not None else "")
        return f"{where}: {self.field}: backlog {self.backlog!r}, status {self.status!r}"


def status_of_leaders(status: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Per cluster, the status of its leader from `strongroom status --json` (a list of member
    answers); a cluster with no leader answering: the member with the newest epoch and commit."""
    best: dict[str, Mapping[str, Any]] = {}
    for member in status:
        if "cluster" not in member:
            continue  # a member that did not answer
        rank = (member.get("role") == "leader", int(member.get("epoch", 0)), int(member.get("commit_index", 0)))
        cluster = member["cluster"]
        if cluster not in best or rank > _rank(best[cluster]):
            best[cluster] = member
    return best


def _rank(m: Mapping[str, Any]) -> tuple[bool, int, int]:
    return (m.get("role") == "leader", int(m.get("epoch", 0)), int(m.get("commit_index", 0)))


def compare_with_status(durables: Iterable[Mapping[str, Any]], stores: Iterable[Mapping[str, Any]],
                        status: Sequence[Mapping[str, Any]], durable_fields: Sequence[str] = DURABLE_FIELDS,
                        store_fields: Sequence[str] = STORE_FIELDS) -> list[Difference]:
    """Every difference between the backlog job's as-of rows (`durables`, `stores`: its
    durables.parquet / stores.parquet rows) and the leaders' status, in a stable order; empty
    when they agree on every compared field of every durable and store."""
    ours_d = {(r["cluster"], r["store"], r["destination"], r["durable"]): r for r in durables}
    ours_s = {(r["cluster"], r["store"]): r for r in stores}
    theirs_d: dict[tuple[str, str, str, str], Mapping[str, Any]] = {}
    theirs_s: dict[tuple[str, str], Mapping[str, Any]] = {}
    for cluster, member in status_of_leaders(status).items():
        for store in member.get("stores", []):
            theirs_s[(cluster, store["name"])] = store
            for d in store.get("durables", []):
                theirs_d[(cluster, store["name"], d["destination"], d["name"])] = d
    out: list[Difference] = []
    for key in sorted(ours_s.keys() | theirs_s.keys()):
        out.extend(_fields(key[0], key[1], None, None, ours_s.get(key), theirs_s.get(key), store_fields))
    for key in sorted(ours_d.keys() | theirs_d.keys()):
        out.extend(_fields(key[0], key[1], key[2], key[3], ours_d.get(key), theirs_d.get(key), durable_fields))
    return out


def _fields(cluster: str, store: str, destination: str | None, durable: str | None, ours: Mapping[str, Any] | None,
            theirs: Mapping[str, Any] | None, fields: Sequence[str]) -> list[Difference]:
    if ours is None or theirs is None:
        # A store or durable with nothing in it on the side that lacks it is no disagreement.
        present = ours if ours is not None else theirs
        assert present is not None
        if all(int(present.get(f) or 0) == 0 for f in fields):
            return []
        return [Difference(cluster, store, destination, durable, "present", ours is not None, theirs is not None)]
    return [Difference(cluster, store, destination, durable, f, ours.get(f), theirs.get(f))
            for f in fields if int(ours.get(f) or 0) != int(theirs.get(f) or 0)]
