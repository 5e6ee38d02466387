"""The persistent store's state as a leader term enforces it, in-process over a real replica
(RocksDB in a temporary directory) and a real one-member term: what is queued for the log and
not yet in an entry is backed out at the moment the store becomes unavailable (its callers get
PSTORE_UNAVAILABLE, the log never holds it) while the term's own bookkeeping is written; nothing
new is queued meanwhile; the pseudo-clock stands still and runs on from there; maps of a
replicated store are refused (deletes served while no new units of work), a non-replicated
store's served throughout; the dispatcher ends the replicated stores' subscriptions and offers
again what was acknowledged or dead-lettered and not yet stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import NoNewUow, NotLeaderError, PersistenceUnavailable
from strongroom.persistence.dispatcher import Closed, Dispatcher
from strongroom.persistence.maps import MapFront
from strongroom.persistence.membership import Membership
from strongroom.persistence.replica import Replica
from strongroom.persistence.state import StateMachine
from strongroom.persistence.storestate import StoreRecord, StoreState, no_new_error, unavailable_error
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import Realm, parse_realm

REALM = parse_realm("""\
clusters:
  - name: c1
    members:
      - name: m1
stores:
  - name: s
    cluster: c1
  - name: volatile
    cluster: c1
    replicated: false
""")
UNAVAILABLE = unavailable_error("c1", StoreRecord(StoreState.UNAVAILABLE, since=1.0, reason="test"))
NO_NEW = no_new_error("c1", StoreRecord(StoreState.NO_NEW_UOW, since=2.0))


class Member:
    """What a term and the map front need of their member: a real replica and a real term of a
    one-member cluster (an entry commits as this member stores it)."""

    cluster_name = "c1"
    realm_version = 1
    member = "m1"

    def __init__(self, realm: Realm, data_dir: Path) -> None:
        self.realm = realm
        cluster = realm.cluster("c1")
        assert cluster is not None
        self.replica = Replica(lambda: cluster, "m1", data_dir, self._stored)
        self.membership = Membership(None, cluster, "m1", "127.0.0.1:1")  # type: ignore[arg-type]
        self.term = LeaderTerm(5, "m1", self.replica, self.membership, self)
        self.term.start_replication(lambda term, peer: None)  # type: ignore[arg-type, return-value]
        self.term.start_clock()

    async def _stored(self) -> None:
        pass

    def require_leader(self) -> LeaderTerm:
        return self.term

    def name_leader(self, err: Any) -> Any:
        return err

    def elected(self) -> bool:
        return True

    def lease_valid(self) -> bool:
        return True

    async def step_down(self, reason: str, err: Exception | None = None, term: LeaderTerm | None = None) -> None:
        pass

    async def hand_over(self, reason: str, err: Exception | None = None, pause: float = 0.0,
                        term: LeaderTerm | None = None) -> None:
        pass

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.ensure_future(work)

    def publishes(self) -> list[bytes]:
        lg = self.replica.log
        return [op.publish.message.body for i in range(lg.first_index, lg.last_index + 1)
                for op in lg.entry(i).ops if op.HasField("publish")]


@pytest.fixture
async def member(tmp_path: Path) -> AsyncIterator[Member]:
    m = Member(REALM, tmp_path)
    yield m
    await m.term.close(NotLeaderError("test over"))
    m.replica.close()


def publish(body: bytes) -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True, message=cpb.Message(body=body)))


async def test_what_is_queued_and_not_yet_stored_is_backed_out(member: Member) -> None:
    term = member.term
    await term.commit(publish(b"stored before"))
    # Queued in this moment: the proposer has not taken them into an entry yet.
    queued = [term.submit([publish(f"queued {i}".encode())]) for i in range(3)]
    unconfirmed = term.submit([publish(b"not confirmed")], want_result=False)
    bookkeeping = term.submit([rpb.Operation(noop=rpb.Noop(leader="m1"))], bookkeeping=True)
    assert unconfirmed is None and bookkeeping is not None
    assert term.enforce_store(UNAVAILABLE, None) == 4
    for fut in queued:
        assert fut is not None
        with pytest.raises(PersistenceUnavailable, match="strongroom store connect --cluster c1"):
            await fut
    await bookkeeping  # the term's own bookkeeping is written all the same
    # Nothing new is queued while the store is unavailable: refused at once.
    with pytest.raises(PersistenceUnavailable):
        await term.commit(publish(b"while unavailable"))
    assert member.publishes() == [b"stored before"]
    with pytest.raises(PersistenceUnavailable):
        term.require_store()
    with pytest.raises(PersistenceUnavailable):
        term.require_new()
    # Connected, taking no new units of work: consumers served, producers told so.
    assert term.enforce_store(None, NO_NEW) == 0
    term.require_store()
    with pytest.raises(NoNewUow):
        term.require_new()
    await term.commit(publish(b"after"))  # the term itself queues again (the fronts decide)
    assert member.publishes() == [b"stored before", b"after"]
    term.enforce_store(None, None)
    term.require_new()
    assert term.producing_refusal() is None


async def test_the_pseudo_clock_stands_still_while_the_store_is_unavailable(member: Member) -> None:
    term = member.term
    await asyncio.sleep(0.2)
    term.enforce_store(UNAVAILABLE, None)
    stopped = term.clock()
    assert stopped >= 0.2 and term.store_unavailable
    await asyncio.sleep(0.3)
    assert term.clock() == stopped
    term.enforce_store(None, NO_NEW)
    assert not term.store_unavailable
    await asyncio.sleep(0.2)
    assert stopped + 0.15 < term.clock() < stopped + 0.5


async def test_a_term_that_starts_while_unavailable_starts_its_clock_stopped(tmp_path: Path) -> None:
    m = Member(REALM, tmp_path)
    try:
        term = LeaderTerm(6, "m1", m.replica, m.membership, m)
        term.enforce_store(UNAVAILABLE, None)
        term.start_clock()
        at = term.clock()
        await asyncio.sleep(0.2)
        assert term.clock() == at
        term.enforce_store(None, None)
        await asyncio.sleep(0.1)
        assert term.clock() > at
        await term.close(NotLeaderError("done"))
    finally:
        await m.term.close(NotLeaderError("test over"))
        m.replica.close()


async def test_maps_of_a_replicated_store_follow_the_store_state(member: Member) -> None:
    front = MapFront(member)  # type: ignore[arg-type]
    await front.put("s", "m", "a", b"1")
    await front.put("volatile", "m", "a", b"1")
    member.term.enforce_store(UNAVAILABLE, None)
    for call in (front.get("s", "m", "a"), front.list("s", "m"), front.put("s", "m", "b", b"2"),
                 front.delete("s", "m", "a")):
        with pytest.raises(PersistenceUnavailable):
            await call
    # A non-replicated store's maps need no persistence: served throughout.
    assert (await front.put("volatile", "m", "b", b"2")).swapped
    assert await front.get("volatile", "m", "a") is not None
    member.term.enforce_store(None, NO_NEW)
    with pytest.raises(NoNewUow):
        await front.put("s", "m", "b", b"2")
    with pytest.raises(NoNewUow):
        await front.compare_and_set("s", "m", "a", 1, b"x")
    got = await front.get("s", "m", "a")
    assert got is not None and got.value == b"1"
    assert (await front.delete("s", "m", "a")).swapped  # a delete consumes
    member.term.enforce_store(None, None)
    assert (await front.put("s", "m", "b", b"2")).swapped


async def test_the_dispatcher_ends_the_replicated_subscriptions_and_offers_again() -> None:
    replicated, local = StateMachine(), StateMachine()
    dispatcher = Dispatcher("t")
    for state, destination in ((replicated, "q"), (local, "lq")):
        dispatcher.attach(state)
        state.apply_op(rpb.Operation(create_durable=rpb.CreateDurableOp(
            store="s", destination=destination, durable="d", kind=cpb.DURABLE_KIND_STANDARD)))
        for body in (b"a", b"b"):
            state.apply_op(rpb.Operation(publish=rpb.PublishOp(store="s", destination=destination,
                                                               message=cpb.Message(body=body))))
    dispatcher.start()
    try:
        durable, other = replicated.durable("q", "d"), local.durable("lq", "d")
        assert durable is not None and other is not None
        sub = dispatcher.open(durable, replicated, "c", credit=10)
        keep = dispatcher.open(other, local, "c", credit=10)
        await asyncio.sleep(0.05)
        # An acknowledgment on its way to the log when the store becomes unavailable.
        dispatcher.acking(durable, replicated, [1])
        assert dispatcher.suspend(replicated, "PSTORE_UNAVAILABLE", "the store is unavailable") == 1
        items = [sub.outbox.get_nowait() for _ in range(sub.outbox.qsize())]
        assert Closed("PSTORE_UNAVAILABLE", "the store is unavailable") in items and items[-1] is None
        # The non-replicated store's subscription goes on.
        assert not keep.closed and dispatcher.subscribers(other.key) == 1
        # Connected again: both messages are delivered again (the acknowledgment was backed out).
        again = dispatcher.open(durable, replicated, "c", credit=10)
        await asyncio.sleep(0.05)
        delivered = [d.message_seq for item in [again.outbox.get_nowait() for _ in range(again.outbox.qsize())]
                     if isinstance(item, list) for d in item]
        assert sorted(delivered) == [1, 2]
    finally:
        await dispatcher.stop("NOT_LEADER", "over")
