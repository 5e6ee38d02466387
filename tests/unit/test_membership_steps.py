"""The pure rules of a membership change (`persistence/configuration.py`) and the order of a
change's steps as the leader takes them (`persistence/reconfig.py`), in-process: a stand-in for
the leader's term (what each member holds) and for etcd's guarded write of the voters."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.configuration import (
    VoterRecord,
    majority,
    majority_heard,
    majority_index,
    next_step,
)
from strongroom.persistence.membership import Membership
from strongroom.persistence.reconfig import Reconfiguration
from strongroom.persistence.recovery import most_advanced
from strongroom.realm.members import MembershipError, edited_realm, member_lists, synced_realm
from strongroom.realm.model import parse_realm


def realm(names: list[str]) -> str:
    members = "".join(f"      - name: {n}\n" for n in names)
    return f"clusters:\n  - name: c\n    members:\n{members}stores:\n  - name: s\n    cluster: c\n"


def test_additions_come_before_removals_one_member_at_a_time_in_realm_order() -> None:
    step = next_step(("m1", "m2", "m3"), ["m2", "m3", "m4", "m5"])
    assert step is not None and (step.kind, step.member, step.new) == ("add", "m4", ("m2", "m3", "m4", "m1"))
    step = next_step(("m1", "m2", "m3", "m4", "m5"), ["m2", "m3", "m4", "m5"])
    assert step is not None and (step.kind, step.member, step.new) == ("remove", "m1", ("m2", "m3", "m4", "m5"))
    assert next_step(("m1", "m2", "m3"), ["m1", "m2", "m3"]) is None
    path, voters = [], ("m1", "m2", "m3")
    while (step := next_step(voters, ["m3", "m4", "m5"])) is not None:
        assert abs(len(step.new) - len(step.old)) == 1
        path.append(f"{step.kind} {step.member}")
        voters = step.new
    assert path == ["add m4", "add m5", "remove m1", "remove m2"] and voters == ("m3", "m4", "m5")


def test_majorities_of_voters() -> None:
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    held = {"m1": 10, "m2": 7, "m3": 3, "m4": 0}
    assert majority_index(("m1", "m2", "m3"), held.__getitem__) == 7
    assert majority_index(("m1", "m2", "m3", "m4"), held.__getitem__) == 3
    heard = {"m2": 5.0, "m3": 2.0, "m4": 1.0}
    assert majority_heard(("m1", "m2", "m3"), "m1", heard.__getitem__) == 5.0
    assert majority_heard(("m1", "m2", "m3", "m4"), "m1", heard.__getitem__) == 2.0
    # A leader that is not a voter (removing itself) needs a majority of the others.
    assert majority_heard(("m2", "m3", "m4"), "m1", heard.__getitem__) == 2.0


def test_a_voter_record_round_trips_and_a_damaged_one_is_refused() -> None:
    record = VoterRecord(("m1", "m2"), 0, 7)
    back = VoterRecord.from_bytes(record.to_bytes(), 12)
    assert back == VoterRecord(("m1", "m2"), 12, 7)
    held = VoterRecord(("m1", "m2", "m3"), 0, 7, also=("m1", "m4"))
    back = VoterRecord.from_bytes(held.to_bytes(), 13)
    assert back == VoterRecord(("m1", "m2", "m3"), 13, 7, also=("m1", "m4")) and not back.settled
    for raw in (b"", b"{}", b'{"voters": []}', b'{"voters": ["m1", 3]}', b"not json",
                b'{"voters": ["m1"], "also": "m2"}', b'{"voters": ["m1"], "also": [""]}'):
        assert VoterRecord.from_bytes(raw, 1) is None


def test_the_local_realm_edit_adds_and_removes_members_and_refuses_what_it_cannot_do() -> None:
    text, names = edited_realm(realm(["m1", "m2", "m3"]), "c", ["m4", "m5"], [])
    assert names == ["m1", "m2", "m3", "m4", "m5"]
    assert [m.name for m in parse_realm(text, "edited").cluster("c").members] == names  # type: ignore[union-attr]
    _, names = edited_realm(text, "c", [], ["m1", "m2"])
    assert names == ["m3", "m4", "m5"]
    with pytest.raises(MembershipError, match="already a member"):
        edited_realm(text, "c", ["m2"], [])
    with pytest.raises(MembershipError, match="not a member"):
        edited_realm(text, "c", [], ["m9"])
    with pytest.raises(MembershipError, match="no cluster"):
        edited_realm(text, "nosuch", ["m9"], [])


def test_a_sync_puts_only_the_member_lists_of_a_file_into_the_realm_in_force() -> None:
    current = realm(["m1", "m2", "m3"]) + "destinations:\n  - name: kept\n    store: s\n"
    wanted = ("clusters:\n  - name: c\n    storage: memory\n    members:\n"
              + "".join(f"      - name: m{i}\n        address: h{i}:7101\n" for i in range(1, 6))
              + "  - name: later\n    members:\n      - name: x1\n"
              + "stores:\n  - name: s\n    cluster: c\n")
    text, changes = synced_realm(current, wanted)
    assert [(c.cluster, c.added, c.removed) for c in changes] == [("c", ["m4", "m5"], [])]
    parsed = parse_realm(text, "synced")
    cluster = parsed.cluster("c")
    assert cluster is not None and [(m.name, m.address) for m in cluster.members] == [
        (f"m{i}", f"h{i}:7101") for i in range(1, 6)]
    # Nothing else of the file: the cluster's storage, the cluster not in force, the destinations.
    assert cluster.storage.value != "memory" and parsed.cluster("later") is None
    assert [d.name for d in parsed.destinations] == ["kept"]
    # Already in force: no new text, nothing to change.
    assert synced_realm(text, wanted) == (text, [])
    shrunk, changes = synced_realm(text, realm(["m1", "m2", "m3"]))
    assert [(c.cluster, c.added, c.removed) for c in changes] == [("c", [], ["m4", "m5"])]
    assert [m["name"] for m in member_lists(shrunk)["c"]] == ["m1", "m2", "m3"]
    with pytest.raises(MembershipError, match="lists no members"):
        synced_realm(text, "clusters:\n  - name: c\n    members: []\n")
    with pytest.raises(MembershipError, match="not YAML"):
        synced_realm(text, "clusters: [")


def test_a_sync_leaves_a_shared_store_cluster_alone() -> None:
    shared = ("clusters:\n  - name: c\n    members:\n      - name: m\n    shared_store:\n"
              "      instances: [a:1, b:1]\nstores:\n  - name: s\n    cluster: c\n")
    assert member_lists(shared) == {}
    assert synced_realm(shared, realm(["m1", "m2", "m3"])) == (shared, [])


class _Etcd:
    """etcd's guarded write of the voters: the revision must still match."""

    def __init__(self) -> None:
        self.revision = 0
        self.writes: list[tuple[str, ...]] = []

    async def put_while_held(self, key: str, value: bytes, mod_revision: int, held: str, lease: int) -> int:
        if mod_revision != self.revision or lease != 1:
            return 0
        self.revision += 1
        record = VoterRecord.from_bytes(value, self.revision)
        assert record is not None
        self.writes.append(record.voters)
        return self.revision


class _Term:
    """What the leader's term answers: the index each member holds, the commit index."""

    def __init__(self, held: dict[str, int]) -> None:
        self.epoch, self.member = 5, "m1"
        self.joint: tuple[str, ...] | None = None
        self.held = held
        self.commit_index = 100
        self.replicating: set[str] = set()
        self.stopped: list[str] = []
        self.live = True

    def alive(self) -> bool:
        return self.live

    def match_of(self, name: str) -> int:
        return self.held.get(name, 0)

    def replicate_to(self, name: str) -> None:
        self.replicating.add(name)

    async def stop_replicating(self, name: str) -> None:
        self.stopped.append(name)

    def advance_commit(self) -> None:
        pass


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.06)


def _cluster(names: list[str]) -> Any:
    cluster = parse_realm(realm(names), "r").cluster("c")
    assert cluster is not None
    return cluster


@contextlib.asynccontextmanager
async def _leading(held: dict[str, int]) -> AsyncIterator[tuple[Reconfiguration, Membership, _Term, _Etcd, list[bool]]]:
    """A `Reconfiguration` running for a leader m1 of m1, m2, m3 whose members hold `held`:
    (it, the membership, the term, etcd, whether it was told it removed itself)."""
    etcd = _Etcd()
    membership = Membership(etcd, _cluster(["m1", "m2", "m3"]), "m1", "127.0.0.1:1")  # type: ignore[arg-type]
    term, removed = _Term(held), []
    change = Reconfiguration(term, membership, etcd, lambda: 1, lambda: removed.append(True))  # type: ignore[arg-type]
    running = asyncio.create_task(change.run())
    try:
        yield change, membership, term, etcd, removed
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def test_a_member_is_caught_up_then_counted_with_both_voters_then_recorded() -> None:
    async with _leading({"m1": 100, "m2": 100, "m3": 40}) as (change, membership, term, etcd, removed):
        await _settle()
        assert etcd.writes == [("m1", "m2", "m3")]  # the voters in force written down first
        assert membership.update(_cluster(["m1", "m2", "m3", "m4", "m5"]))
        await _settle()
        # m4 (and m5) are replicated to, but m4 holds nothing yet: catching up, nothing counted or written.
        assert "m4" in term.replicating and term.joint is None and "catching up" in change.describe()
        assert etcd.writes == [("m1", "m2", "m3")] and membership.voters == ("m1", "m2", "m3")
        term.held["m2"] = 50
        term.held["m4"] = 100
        await _settle()
        # Caught up; only m1 and m4 hold index 100, and 3 of 4 must: both sets counted, waiting.
        assert term.joint == ("m1", "m2", "m3", "m4") and "both counted" in change.describe(), change.describe()
        assert membership.voters == ("m1", "m2", "m3")
        term.held["m3"] = 100
        await _settle()
        assert etcd.writes[-1] == ("m1", "m2", "m3", "m4") and membership.voters == ("m1", "m2", "m3", "m4")
        # The next step: m5, which holds nothing yet.
        assert term.joint is None and "adding m5" in change.describe(), change.describe()
        # The realm changes its mind (m5 not added after all) and removes the leader itself:
        # recorded, then the term is told to hand over.
        term.held.update({"m3": 100, "m4": 100})
        assert membership.update(_cluster(["m2", "m3", "m4"]))
        await _settle()
        assert etcd.writes[-1] == ("m2", "m3", "m4") and removed == [True]


async def test_a_step_the_realm_no_longer_asks_for_is_dropped_before_it_is_recorded() -> None:
    async with _leading({"m1": 100, "m2": 100, "m3": 100}) as (change, membership, _, etcd, _):
        assert membership.update(_cluster(["m1", "m2", "m3", "m4", "m5"]))
        await _settle()
        assert "adding m4" in change.describe()
        assert membership.update(_cluster(["m1", "m2", "m3"]))
        await _settle()
        assert change.describe() == "" and membership.voters == ("m1", "m2", "m3")
        assert etcd.writes == [("m1", "m2", "m3")]


def test_a_watch_event_older_than_the_record_held_is_not_taken_but_a_read_is() -> None:
    """The reply to the leader's own write and the watch event of its earlier write come in
    either order: the view must not go back two changes (their majorities need not meet)."""
    membership = Membership(_Etcd(), _cluster(["m1", "m2", "m3", "m4", "m5"]), "m1", "127.0.0.1:1")  # type: ignore[arg-type]
    newest = VoterRecord(("m1", "m2", "m3", "m4", "m5"), revision=12, epoch=5)
    membership.set_voters(newest)
    membership.set_voters(VoterRecord(("m1", "m2", "m3", "m4"), revision=11, epoch=5), fresh=False)
    membership.set_voters(VoterRecord(("m1", "m2", "m3"), revision=9, epoch=5), fresh=False)
    assert membership.record == newest
    # A later leader's record is newer whatever its revision (etcd restarted without its data).
    later = VoterRecord(("m1", "m2", "m3"), revision=3, epoch=9)
    membership.set_voters(later, fresh=False)
    assert membership.record == later
    # A linearizable read (a new leader's) is taken as it is.
    membership.set_voters(VoterRecord(("m1", "m2"), revision=2, epoch=4))
    assert membership.voters == ("m1", "m2")


async def test_with_no_record_the_members_with_state_are_counted_until_a_majority_of_the_realms_holds_the_commit() -> None:
    """No voters record and members with state other than the realm's list (`also`): the
    record is written only once a majority of the realm's list holds what was committed, and
    the members with state stop counting only then."""
    etcd = _Etcd()
    membership = Membership(etcd, _cluster(["m1", "m2", "m3", "m4", "m5"]), "m1", "127.0.0.1:1")  # type: ignore[arg-type]
    membership.set_voters(VoterRecord(("m1", "m2", "m3", "m4", "m5"), also=("m1", "m2", "m3")))
    assert not membership.record.settled and "m3" in membership.peers()
    term = _Term({"m1": 100, "m4": 100, "m5": 10})
    term.joint = ("m1", "m2", "m3")  # as recovery sets it
    change = Reconfiguration(term, membership, etcd, lambda: 1, lambda: None)  # type: ignore[arg-type]
    running = asyncio.create_task(change.run())
    try:
        await _settle()
        # m1 and m4 of five hold index 100: not a majority of the realm's list yet.
        assert etcd.writes == [] and term.joint == ("m1", "m2", "m3")
        term.held["m5"] = 100
        await _settle()
        assert etcd.writes == [("m1", "m2", "m3", "m4", "m5")] and term.joint is None
        assert membership.record.settled
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


def _promise(member: str, last_index: int, synced: bool = True) -> rpb.PromiseResponse:
    return rpb.PromiseResponse(ok=True, member=member, synced=synced, last_epoch=3, last_index=last_index)


def test_recovery_takes_the_most_advanced_log_of_every_member_counted() -> None:
    """No voters record, and the realm shrank from m1 ... m5 to m1, m2 and m3 before one was
    written. Index 9 was committed by m3, m4 and m5 (a majority of the five). Promises from m1,
    m2, m4 and m5 are a majority of both lists; the only ones that hold index 9 are m4 and m5,
    which the realm no longer lists: recovery must take their log, not m1's or m2's."""
    voters, also = ("m1", "m2", "m3"), ("m1", "m2", "m3", "m4", "m5")
    best = most_advanced([_promise("m1", 5), _promise("m2", 5), _promise("m4", 9), _promise("m5", 9)],
                         voters, also)
    assert best is not None and best.last_index == 9 and best.member in ("m4", "m5")
    # A majority of the realm's list, not of `also`; and the other way round.
    assert most_advanced([_promise("m1", 5), _promise("m2", 5)], voters, also) is None
    assert most_advanced([_promise("m1", 5), _promise("m4", 9), _promise("m5", 9)], voters, also) is None
    # A member that lost its state counts toward neither.
    assert most_advanced([_promise("m1", 5), _promise("m2", 9, synced=False), _promise("m4", 9),
                          _promise("m5", 9)], voters, also) is None
    # With a record: the voters alone, a majority of three.
    best = most_advanced([_promise("m1", 4), _promise("m3", 7)], voters)
    assert best is not None and best.member == "m3"
    assert most_advanced([_promise("m1", 4)], voters) is None
