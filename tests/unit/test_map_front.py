"""The map front in-process, over a real leader term whose group commit puts everything
submitted in the same moment into one log entry: validation, errors, leader and lease checks,
and versions that never repeat for a key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    InvalidArgument,
    MapsNotAllowed,
    MessageTooLarge,
    NoLeaderError,
    NotLeaderError,
    UnknownStore,
)
from strongroom.persistence.maps import MAX_KEY, MAX_LIST_LIMIT, MAX_MAP_NAME, MapFront
from strongroom.persistence.membership import Membership
from strongroom.persistence.replica import Replica
from strongroom.persistence.state import StateMachine
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import Realm, parse_realm

REALM = """\
clusters:
  - name: c1
    members:
      - name: m1
  - name: c2
    members:
      - name: m1
stores:
  - name: s
    cluster: c1
  - name: nomaps
    cluster: c1
    maps: false
  - name: wide
    cluster: c1
    routed: true
  - name: volatile
    cluster: c1
    replicated: false
  - name: small
    cluster: c1
    max_message_bytes: 16
  - name: elsewhere
    cluster: c2
"""


@dataclass
class _Election:
    valid: bool = True

    def lease_valid(self) -> bool:
        return self.valid


class FakeNode:
    """What MapFront uses of PersistenceNode, over a real replica (RocksDB in a temporary
    directory) and a real leader term of a one-member cluster: its group commit puts everything
    submitted in the same moment into one log entry."""

    cluster_name = "c1"
    realm_version = 1
    member = "m1"

    def __init__(self, realm: Realm, data_dir: Path) -> None:
        self.realm = realm
        self.leading = True
        self.election = _Election()
        cluster = realm.cluster("c1")
        assert cluster is not None
        self.replica = Replica(lambda: cluster, "m1", data_dir, self._record_stored)
        # The member watch (the one user of etcd) is never started here.
        self.membership = Membership(None, cluster, "m1", "127.0.0.1:1")  # type: ignore[arg-type]
        self.term: LeaderTerm | None = None

    async def _record_stored(self) -> None:
        pass

    def new_term(self, epoch: int) -> None:
        """This member is elected for `epoch` (a new leadership: new non-replicated state)."""
        if self.term is not None:
            self.term.close(NotLeaderError("new term"))
        self.term = LeaderTerm(epoch, "m1", self.replica, self.membership, self)
        self.term.start_replication(lambda term, peer: None)  # type: ignore[arg-type, return-value]

    @property
    def epoch(self) -> int:
        assert self.term is not None
        return self.term.epoch

    @property
    def state(self) -> StateMachine:
        return self.replica.state

    @property
    def local_state(self) -> StateMachine:
        assert self.term is not None
        return self.term.local_state

    @property
    def entries(self) -> list[rpb.LogEntry]:
        lg = self.replica.log
        return [lg.entry(i) for i in range(lg.first_index, lg.last_index + 1)]

    def require_leader(self) -> LeaderTerm:
        if not self.leading:
            raise NotLeaderError("not the leader", "m2", "127.0.0.1:2")
        assert self.term is not None
        return self.term

    # The Leadership a term holds.
    def elected(self) -> bool:
        return self.leading

    def lease_valid(self) -> bool:
        return self.election.lease_valid()

    async def step_down(self, reason: str, err: Exception | None = None, term: LeaderTerm | None = None) -> None:
        self.leading = False

    async def hand_over(self, reason: str, err: Exception | None = None, pause: float = 0.0,
                        term: LeaderTerm | None = None) -> None:
        self.leading = False

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.ensure_future(work)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[FakeNode]:
    fake = FakeNode(parse_realm(REALM), tmp_path)
    fake.new_term(9)
    yield fake
    if fake.term is not None:
        await fake.term.close(NotLeaderError("test over"))
    fake.replica.close()


@pytest.fixture
def front(node: FakeNode) -> MapFront:
    return MapFront(node)


async def test_put_get_delete_list(front: MapFront, node: FakeNode) -> None:
    w = await front.put("s", "m", "a", b"1")
    assert w.swapped and w.entry is not None and w.entry.version == w.log_index == 1
    got = await front.get("s", "m", "a")
    assert got is not None and (got.value, got.version) == (b"1", 1)
    assert await front.get("s", "m", "b") is None
    await front.put("s", "m", "b", b"2")
    entries, more = await front.list("s", "m")
    assert [e.key for e in entries] == ["a", "b"] and not more
    d = await front.delete("s", "m", "a")
    assert d.swapped and d.entry is None
    again = await front.delete("s", "m", "a")
    assert not again.swapped and again.entry is None


async def test_compare_and_set_returns_the_current_entry_when_it_loses(front: MapFront) -> None:
    first = await front.compare_and_set("s", "m", "k", 0, b"mine")
    assert first.swapped and first.entry is not None
    lost = await front.compare_and_set("s", "m", "k", 0, b"theirs")
    assert not lost.swapped and lost.entry == first.entry
    gone = await front.compare_and_set("s", "m", "k", first.entry.version, delete=True)
    assert gone.swapped and gone.entry is None


async def test_concurrent_writes_of_one_key_get_distinct_versions(front: MapFront, node: FakeNode) -> None:
    # Group commit would put these into one entry, where they would share its index as version
    # and a compare-and-set against the first one's version would overwrite the second.
    writes = await asyncio.gather(front.compare_and_set("s", "m", "k", 0, b"cas"),
                                  front.put("s", "m", "k", b"p1"), front.put("s", "m", "k", b"p2"))
    versions = [w.entry.version for w in writes if w.entry is not None]
    assert len(set(versions)) == 3
    assert all(sum(op.map.key == "k" for op in e.ops) <= 1 for e in node.entries)
    current = await front.get("s", "m", "k")
    assert current is not None and current.version == max(versions)
    # Whoever holds an older version cannot compare-and-set over the newer value.
    stale = await front.compare_and_set("s", "m", "k", min(versions), b"stale")
    assert not stale.swapped


async def test_writes_of_different_keys_still_share_a_round(front: MapFront, node: FakeNode) -> None:
    writes = await asyncio.gather(*(front.put("s", "m", f"k{i}", b"v") for i in range(10)))
    assert len({w.log_index for w in writes}) == 1 and len(node.entries) == 1


async def test_unknown_store_and_store_of_another_cluster(front: MapFront) -> None:
    with pytest.raises(UnknownStore, match="'nope' is not defined in the realm"):
        await front.put("nope", "m", "k", b"v")
    with pytest.raises(UnknownStore, match="belongs to cluster 'c2'"):
        await front.get("elsewhere", "m", "k")
    with pytest.raises(InvalidArgument, match="store is required"):
        await front.get("", "m", "k")


@pytest.mark.parametrize(("store", "why"), [("nomaps", "maps: false"), ("wide", "routed")])
async def test_stores_without_maps_refuse_every_operation(front: MapFront, store: str, why: str) -> None:
    for call in (front.put(store, "m", "k", b"v"), front.get(store, "m", "k"), front.delete(store, "m", "k"),
                 front.list(store, "m"), front.compare_and_set(store, "m", "k", 0, b"v")):
        with pytest.raises(MapsNotAllowed, match=why):
            await call


async def test_names_keys_and_values_are_checked(front: MapFront, node: FakeNode) -> None:
    with pytest.raises(InvalidArgument, match="map name is required"):
        await front.put("s", "", "k", b"v")
    with pytest.raises(InvalidArgument, match="key is required"):
        await front.get("s", "m", "")
    with pytest.raises(InvalidArgument, match="map name of 256 characters"):
        await front.put("s", "x" * (MAX_MAP_NAME + 1), "k", b"v")
    with pytest.raises(InvalidArgument, match="key of 1025 characters"):
        await front.put("s", "m", "k" * (MAX_KEY + 1), b"v")
    await front.put("s", "x" * MAX_MAP_NAME, "k" * MAX_KEY, b"v")  # the limits themselves are fine
    await front.put("small", "m", "k", b"x" * 16)
    with pytest.raises(MessageTooLarge, match="17 bytes exceeds store 'small' limit of 16"):
        await front.put("small", "m", "k", b"x" * 17)
    with pytest.raises(MessageTooLarge):
        await front.compare_and_set("small", "m", "k", 0, b"x" * 17)
    with pytest.raises(InvalidArgument, match="limit"):
        await front.list("s", "m", limit=-1)
    assert len(node.entries) == 2  # nothing refused reached the log


async def test_list_limit_defaults_and_is_capped(front: MapFront, node: FakeNode) -> None:
    node.state.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[
        rpb.Operation(map=rpb.MapOp(store="s", map="big", key=f"{i:05d}", put=b"")) for i in range(MAX_LIST_LIMIT + 5)]))
    page, more = await front.list("s", "big")
    assert len(page) == 1000 and more
    page, more = await front.list("s", "big", limit=50_000)
    assert len(page) == MAX_LIST_LIMIT and more
    page, more = await front.list("s", "big", start_after=page[-1].key, limit=50_000)
    assert len(page) == 5 and not more


async def test_a_follower_redirects_and_a_leader_without_lease_does_not_read(front: MapFront, node: FakeNode) -> None:
    await front.put("s", "m", "k", b"v")
    node.election.valid = False
    with pytest.raises(NoLeaderError, match="lease"):
        await front.get("s", "m", "k")
    with pytest.raises(NoLeaderError):
        await front.list("s", "m")
    node.election.valid = True
    node.leading = False
    with pytest.raises(NotLeaderError) as info:
        await front.put("s", "m", "k", b"w")
    assert info.value.leader_address == "127.0.0.1:2"
    with pytest.raises(NotLeaderError):
        await front.get("s", "m", "k")


async def test_non_replicated_store_stays_on_the_leader(front: MapFront, node: FakeNode) -> None:
    w = await front.put("volatile", "m", "k", b"v")
    assert w.log_index == 0 and not node.entries
    assert w.entry is not None and w.entry.version == (node.epoch << 32) + 1
    assert node.local_state.map_get("volatile", "m", "k") == (b"v", w.entry.version)
    assert node.state.map_get("volatile", "m", "k") is None
    got = await front.get("volatile", "m", "k")
    assert got is not None and got.value == b"v"
    # A new leadership (new local state, higher epoch): versions continue above the old ones.
    node.new_term(12)
    w2 = await front.put("volatile", "m", "k", b"again")
    assert w2.entry is not None and w2.entry.version == (12 << 32) + 1 > w.entry.version
    stale = await front.compare_and_set("volatile", "m", "k", w.entry.version, b"stale")
    assert not stale.swapped
