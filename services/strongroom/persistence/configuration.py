"""A cluster's voters: the members whose promises and acknowledgments count toward a majority.

The realm names the members a cluster should have; the *voters* are the members it has now.
They are the same until a realm version changes the member list; then the leader carries the
change out one member at a time (`reconfig.py`), and the voters are what it has reached so far.

Where the voters are kept: in the cluster's etcd (`keys.voters_key`, a `VoterRecord`), written
only by a leader, in a transaction that also checks it still holds the leader key. Absent until
the first change: the realm's member list counts then (every cluster before online changes).
etcd is the one place every member and every future leader reads them from, and it is
linearizable: a new leader reads the record after it was elected, so it sees the last change
any earlier leader made, and an earlier leader can no longer make one.

Why one member at a time, and why a change is safe (the reasoning `reconfig.py` follows):

* Any majority of voters V and any majority of V plus or minus one member have a member in
  common. So a leader that counts with the new voters still meets, in every recovery majority
  of the old ones, a member holding what it committed, and the other way round.
* Before the record changes, the leader counts every commit with both the old and the new
  voters (`majority_index` of each, the lower wins) and waits until a majority of the new voters
  holds everything committed so far. When the record changes, then, everything ever committed
  is on a majority of the new voters: a later leader, which gathers promises from a majority
  of the new voters, finds all of it.
* A member being added is caught up first (a learner: appended to, never counted), so adding it
  does not stop commits while it copies the state.

Joint consensus (Raft's two-configuration entries) would allow several members at once; one at
a time needs no log format of its own, a crash in the middle leaves either the old or the new
voters in etcd (never a mixture), and 3 to 5 members is two steps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strongroom.etcd import EtcdClient
from strongroom.keys import leader_key, stored_prefix, voters_key

__all__ = ["Step", "VoterRecord", "freeze_holders", "load_voters", "majority", "majority_heard", "majority_index", "next_step", "write_voters"]


@dataclass(frozen=True)
class VoterRecord:
    """The voters as etcd holds them."""

    voters: tuple[str, ...]
    revision: int = 0
    """The record's mod_revision in etcd; 0: no record (the realm's member list)."""
    epoch: int = 0
    """The epoch of the leader that wrote it."""
    also: tuple[str, ...] = ()
    """With no record: the members that ever acknowledged entries, when they are not the realm's
    list, counted beside it (a majority of both) until a leader writes the record. The realm may
    already name a change the earlier voters never carried out (a cluster of a version before the
    record, given new members in the same upgrade): the members with state are then the voters a
    commit was counted by, and the realm's list the ones a member that starts now takes. Counting
    both keeps every recovery majority meeting every earlier commit majority, whichever of the
    two lists the voters were.

    The first leader that finds no record writes this list down (`freeze_holders`) before it
    sends an entry: the new members it catches up acknowledge entries too, and were they counted
    among the holders by the next recovery (its leader died before writing the realm's list), a
    majority of them could be new members holding part of the log only, without any member of
    the majority that committed the rest. Such a record has a revision and this list; it is not
    `settled` until a leader writes the realm's list over it."""

    damaged: bool = False
    """etcd holds a record that cannot be read (its list is then the one above)."""

    @property
    def settled(self) -> bool:
        """Whether a leader wrote these voters down (else the next leader writes them)."""
        return bool(self.revision) and not self.also and not self.damaged

    def newer_than(self, other: VoterRecord) -> bool:
        """Whether this record was written after `other` (by the leader of a later epoch, or by
        the same leader later); a list without a record is neither newer nor older."""
        if not self.revision or not other.revision:
            return True
        return (self.epoch, self.revision) >= (other.epoch, other.revision)

    def to_bytes(self) -> bytes:
        data: dict[str, object] = {"voters": list(self.voters), "epoch": self.epoch}
        if self.also:
            data["also"] = list(self.also)
        return json.dumps(data).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, revision: int) -> VoterRecord | None:
        """The stored record, or None if it is not one (a record that names no voter is not)."""
        try:
            data = json.loads(raw)
            voters = data["voters"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(voters, list) or not voters or not all(isinstance(v, str) and v for v in voters):
            return None
        epoch = data.get("epoch")
        also = data.get("also", [])
        if not isinstance(also, list) or not all(isinstance(v, str) and v for v in also):
            return None
        return cls(tuple(voters), revision, epoch if isinstance(epoch, int) else 0, also=tuple(also))


@dataclass(frozen=True)
class Step:
    """One member added to or removed from the voters."""

    kind: str
    """"add" or "remove"."""
    member: str
    old: tuple[str, ...]
    new: tuple[str, ...]

    def __str__(self) -> str:
        return f"{'adding' if self.kind == 'add' else 'removing'} {self.member} ({len(self.old)} -> {len(self.new)} voters)"


def next_step(voters: Sequence[str], target: Sequence[str]) -> Step | None:
    """The next step from `voters` toward `target` (the realm's members), None when there: every
    addition before any removal (a cluster growing and shrinking at once keeps more members to
    lose on the way), each in the order the realm lists them. The new voters keep the realm's
    order, members the realm no longer names last."""
    old = tuple(voters)
    for name in target:
        if name not in old:
            return Step("add", name, old, _ordered(set(old) | {name}, target, old))
    for name in old:
        if name not in target:
            return Step("remove", name, old, _ordered(set(old) - {name}, target, old))
    return None


def _ordered(names: set[str], target: Sequence[str], old: Sequence[str]) -> tuple[str, ...]:
    first = [n for n in target if n in names]
    return tuple(first + [n for n in old if n in names and n not in first])


def majority(count: int) -> int:
    """How many of `count` voters make a majority."""
    return count // 2 + 1


def majority_index(voters: Sequence[str], match: Callable[[str], int]) -> int:
    """The highest index a majority of `voters` holds (`match`: a voter's last index known to
    match the leader's log)."""
    matches = sorted((match(v) for v in voters), reverse=True)
    return matches[majority(len(matches)) - 1] if matches else 0


def majority_heard(voters: Sequence[str], member: str, last_ack: Callable[[str], float]) -> float:
    """When a majority of `voters` last answered `member` (monotonic time; `member` itself always
    has, if it is a voter; 0: never)."""
    acks = sorted((last_ack(v) for v in voters if v != member), reverse=True)
    need = majority(len(voters)) - (1 if member in voters else 0)
    if need <= 0:
        return time.monotonic()
    return acks[need - 1] if len(acks) >= need else 0.0


async def load_voters(etcd: EtcdClient, cluster: str, realm_members: Sequence[str]) -> VoterRecord:
    """The cluster's voters as etcd holds them now; when it holds no record (or one that cannot
    be read: logged by the caller), the realm's members, with the members that ever
    acknowledged entries counted beside them if they differ (`VoterRecord.also`)."""
    kv = await etcd.get(voters_key(cluster))
    if kv is not None:
        record = VoterRecord.from_bytes(kv.value, kv.mod_revision)
        if record is not None:
            return record
    prefix = stored_prefix(cluster)
    holders = sorted(kv.key[len(prefix):] for kv in await etcd.get_prefix(prefix))
    also = tuple(holders) if holders and set(holders) != set(realm_members) else ()
    # A record that cannot be read keeps its revision: the leader's write replaces it.
    return VoterRecord(tuple(realm_members), kv.mod_revision if kv is not None else 0, also=also,
                       damaged=kv is not None)


async def write_voters(etcd: EtcdClient, cluster: str, voters: Sequence[str], epoch: int, expected: int,
                       lease: int, also: Sequence[str] = ()) -> VoterRecord | None:
    """The leader of `epoch` writes the new voters (with the members with state counted beside
    them, `also`, while no list is settled), if the record is still at revision `expected` and it
    still holds the leader key under `lease`; the record written, or None if not."""
    record = VoterRecord(tuple(voters), 0, epoch, also=tuple(also))
    revision = await etcd.put_while_held(voters_key(cluster), record.to_bytes(), expected, leader_key(cluster), lease)
    return VoterRecord(record.voters, revision, epoch, also=record.also) if revision else None


async def freeze_holders(etcd: EtcdClient, cluster: str, record: VoterRecord, epoch: int,
                         lease: int) -> VoterRecord | None:
    """A leader that found no record (or a damaged one) and members with state beside the realm's
    list: both lists written down as they are now, before any member acknowledges an entry of its
    term (`VoterRecord.also`); the record written, `record` itself when there is nothing to write
    (a record already holds them, or there are no members with state to count beside the realm's
    list), None when the record moved on or the leader key is no longer held."""
    if not record.also or (record.revision and not record.damaged):
        return record
    return await write_voters(etcd, cluster, record.voters, epoch, record.revision, lease, also=record.also)
