"""A new leader's recovery that fails hands the election over, whatever ended it.

In-process: a one-member cluster with memory storage and a stand-in for the etcd election (the
lease and the leader key, and the voters it reads), so a lease that runs out mid-recovery, or a storage that fails as
recovery ends, can be made to happen at a chosen moment. What is asserted is what the other
members rely on: the member that could not finish recovering sits out the next election for
a lease TTL and releases the leader key, instead of holding it while answering "recovering"
or campaigning again at once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from strongroom.persistence.config import MemberConfig, Role
from strongroom.persistence.configuration import VoterRecord
from strongroom.persistence.node import PersistenceNode
from strongroom.realm.model import parse_realm

REALM = """\
clusters:
  - name: c
    storage: memory
    lease_ttl_seconds: 3
    members:
      - name: m1
stores:
  - name: s
    cluster: c
"""


class _Election:
    """The election as the node uses it, with the lease's validity set by the test."""

    def __init__(self, epoch: int) -> None:
        self.is_leader = True
        self.epoch = epoch
        self.valid = True
        self.calls: list[tuple[str, float]] = []

    def lease_valid(self) -> bool:
        return self.valid

    def pause(self, until: float) -> None:
        self.calls.append(("pause", round(until - time.monotonic())))

    async def resign(self) -> None:
        self.calls.append(("resign", 0))
        self.is_leader = False

    async def stop(self, resign: bool = True) -> None:
        pass


def _node(tmp_path: Path) -> tuple[PersistenceNode, _Election]:
    config = MemberConfig(cluster="c", member="m1", address="127.0.0.1:1", data_dir=tmp_path,
                          etcd_endpoints="127.0.0.1:9")  # never reached: nothing here talks to etcd
    node = PersistenceNode(config, parse_realm(REALM, "test realm"), 1)
    election = _Election(epoch=5)
    node.election = election  # type: ignore[assignment]
    node.replica.stored = True  # no etcd write before the first entry

    async def voters() -> VoterRecord:  # the voters as etcd would hold them: the realm's member
        return node.membership.record

    node.membership.load_voters = voters  # type: ignore[method-assign]
    return node, election


async def _until(check: object, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        await asyncio.sleep(0.02)


async def test_a_lease_lost_during_recovery_pauses_and_resigns(tmp_path: Path) -> None:
    node, election = _node(tmp_path)
    election.valid = False  # the no-op's round finds the lease expired: the term ends mid-recovery
    await node._on_elected(5, 0.0)
    await _until(lambda: ("resign", 0) in election.calls)
    assert election.calls == [("pause", 3), ("resign", 0)]
    assert node.role is Role.FOLLOWER
    node.replica.close()


async def test_a_storage_that_fails_as_recovery_ends_hands_over(tmp_path: Path) -> None:
    node, election = _node(tmp_path)

    def fail(synced: bool) -> None:
        raise OSError("disk gone")

    node.replica.set_synced = fail  # type: ignore[method-assign]
    await node._on_elected(5, 0.0)
    await _until(lambda: ("resign", 0) in election.calls)
    assert election.calls == [("pause", 3), ("resign", 0)]
    assert node.role is not Role.LEADER and not await node.wait_serving(0.2)
    await node.step_down("test over")
    node.replica.close()


async def test_a_recovery_that_succeeds_serves(tmp_path: Path) -> None:
    node, election = _node(tmp_path)
    await node._on_elected(5, 0.0)
    assert await node.wait_serving(3.0)
    assert node.role is Role.LEADER and election.calls == []
    assert node.replica.synced
    await node.step_down("test over")
    assert node.role is Role.FOLLOWER
    node.replica.close()


async def test_a_serving_leader_whose_lease_check_fails_gives_up_its_key(tmp_path: Path) -> None:
    """The round finds the lease expired and the term ends; the keep-alive then succeeds (it was
    only late): the key must go with the term, or the member holds it serving nothing and no
    other member campaigns (seen under load: minutes without a leader)."""
    import pytest

    from strongroom.api.v1 import replication_pb2 as rpb
    from strongroom.errors import NotLeaderError

    node, election = _node(tmp_path)
    await node._on_elected(5, 0.0)
    assert await node.wait_serving(3.0)
    term = node.term
    assert term is not None
    election.valid = False
    with pytest.raises(NotLeaderError):
        await term.commit(rpb.Operation(noop=rpb.Noop(leader="m1")))
    election.valid = True  # the late keep-alive renewed the lease
    await _until(lambda: ("resign", 0) in election.calls)
    assert ("resign", 0) in election.calls and not election.is_leader
    assert node.role is Role.FOLLOWER and node.term is None
    node.replica.close()


async def test_a_term_that_ends_after_a_newer_one_was_elected_leaves_the_newer_key(tmp_path: Path) -> None:
    """The old term's clean-up finishes after the member was elected again (a new lease, a new
    epoch): its step-down must not give up the new term's key."""
    node, election = _node(tmp_path)
    await node._on_elected(5, 0.0)
    assert await node.wait_serving(3.0)
    old = node.term
    assert old is not None
    election.epoch = 6  # elected again meanwhile
    await node.step_down("the old term's lease check", term=old)
    assert ("resign", 0) not in election.calls and election.is_leader
    node.replica.close()
