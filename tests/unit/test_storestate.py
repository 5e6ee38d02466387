"""The persistent store's state machine (persistence/storestate.py), in-process: every operator
transition and every refused one (precise error, nothing changed), the state a store over its
capacity enters by itself, what the capacity counts (messages of replicated stores and of units of
work), the record's round trip, the errors commands get in each state, and the realm's capacity
setting with file:line errors."""

from __future__ import annotations

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    NoNewUow,
    PersistenceUnavailable,
    RealmInvalid,
    StoreStateError,
    error_for_reason,
)
from strongroom.persistence.state import StateMachine
from strongroom.persistence.storestate import (
    AVAILABLE_RECORD,
    StoreAction,
    StoreCause,
    StoreRecord,
    StoreState,
    Usage,
    after,
    by_capacity,
    no_new_error,
    over_capacity,
    unavailable_error,
    usage_of,
)
from strongroom.realm.model import PersistentStore, parse_realm
from strongroom.uow.model import OpKind

A, U, N = StoreState.AVAILABLE, StoreState.UNAVAILABLE, StoreState.NO_NEW_UOW


def record(state: StoreState, revision: int = 7) -> StoreRecord:
    return StoreRecord(state, since=100.0, reason="before", cause=StoreCause.OPERATOR, changed_by="m0",
                       revision=revision)


@pytest.mark.parametrize(("start", "action", "to"), [
    (A, StoreAction.DISCONNECT, U),
    (N, StoreAction.DISCONNECT, U),
    (U, StoreAction.CONNECT, N),
    (N, StoreAction.ALLOW_NEW, A),
])
def test_the_operators_transitions(start: StoreState, action: StoreAction, to: StoreState) -> None:
    got = after(record(start), action, "c1", "m2", reason="disk swap", now=200.0)
    assert got.state is to and got.since == 200.0 and got.cause is StoreCause.OPERATOR and got.changed_by == "m2"
    assert got.reason.endswith(": disk swap")
    # Written with a compare-and-swap on the revision the decision was made from.
    assert got.revision == 7


@pytest.mark.parametrize(("start", "action", "says"), [
    (U, StoreAction.DISCONNECT, "disconnected already; `strongroom store connect --cluster c1`"),
    (A, StoreAction.CONNECT, "only a disconnected store is connected; nothing changed"),
    (N, StoreAction.CONNECT, "`strongroom store allow-new --cluster c1` lifts the state"),
    (U, StoreAction.ALLOW_NEW, "connect it first (`strongroom store connect --cluster c1`)"),
    (A, StoreAction.ALLOW_NEW, "takes new units of work already"),
])
def test_a_wrong_transition_is_refused_with_its_reason(start: StoreState, action: StoreAction, says: str) -> None:
    before = record(start)
    with pytest.raises(StoreStateError) as info:
        after(before, action, "c1", "m2")
    err = info.value
    assert err.reason == "PSTORE_STATE" and err.code == "FAILED_PRECONDITION" and not err.retriable
    assert says in err.message and "nothing changed" in err.message
    assert err.metadata == {"state": start.value}
    assert before == record(start)


def test_new_units_of_work_are_not_allowed_while_over_capacity() -> None:
    over = "12 messages held, over the capacity of 10"
    with pytest.raises(StoreStateError) as info:
        after(record(N), StoreAction.ALLOW_NEW, "c1", "m1", over=over)
    assert f"still over its capacity ({over})" in info.value.message
    assert after(record(N), StoreAction.ALLOW_NEW, "c1", "m1", over="").state is A


def test_an_available_store_over_its_capacity_takes_no_new_units_of_work_by_itself() -> None:
    got = by_capacity(record(A), "12 messages held, over the capacity of 10", "m1", now=300.0)
    assert got is not None and got.state is N and got.cause is StoreCause.CAPACITY and got.since == 300.0
    assert got.reason == "capacity exceeded: 12 messages held, over the capacity of 10" and got.revision == 7
    assert by_capacity(record(A), "", "m1") is None
    # Another state stays as it is: an operator's decision is not overwritten.
    assert by_capacity(record(U), "over", "m1") is None and by_capacity(record(N), "over", "m1") is None


def test_over_capacity_counts_messages_and_bytes() -> None:
    assert over_capacity(Usage(10, 999), PersistentStore(capacity_messages=10)) == ""
    assert over_capacity(Usage(11, 0), PersistentStore(capacity_messages=10)) == \
        "11 messages held, over the capacity of 10"
    assert over_capacity(Usage(1, 2049), PersistentStore(capacity_bytes=2048)) == \
        "2049 message bytes held, over the capacity of 2048"
    assert over_capacity(Usage(10**9, 10**12), PersistentStore()) == ""


def test_usage_counts_the_replicated_stores_and_their_units_of_work() -> None:
    sm = StateMachine()
    for i in range(3):
        sm.apply_op(rpb.Operation(publish=rpb.PublishOp(store="s", destination="q", queue=True,
                                                        message=cpb.Message(body=b"x" * 10))))
    messages = [cpb.Message(body=b"u" * 20) for _ in range(2)]
    definition = rpb.UowDefinition(store="s", destination="w.queue", persistent=True, persistent_status=True,
                                   lifetime=100.0, status_lifetime_multiple=1, conversation_timeout=30.0)
    sm.apply_op(rpb.Operation(uow=rpb.UowOp(kind=int(OpKind.COMMIT), uow_ids=["u1"], definition=definition,
                                            messages=messages, message_count=2,
                                            message_bytes=sum(m.ByteSize() for m in messages))))
    usage = usage_of(sm)
    assert usage.messages == 5
    assert usage.bytes == sum(sm.store_bytes.values()) + sum(m.ByteSize() for m in messages)
    assert usage_of(StateMachine()) == Usage(0, 0)


def test_the_record_round_trips_without_its_revision() -> None:
    rec = StoreRecord(N, since=12.5, reason="capacity exceeded: x", cause=StoreCause.CAPACITY, changed_by="m3")
    back = StoreRecord.from_bytes(rec.to_bytes(), revision=42)
    assert back == rec and back.revision == 42 and b"revision" not in rec.to_bytes()
    assert AVAILABLE_RECORD.state is A and AVAILABLE_RECORD.describe() == "available"
    assert back.describe().startswith("taking no new units of work since ") and back.describe().endswith(
        "(capacity exceeded: x)")


def test_what_commands_are_told_in_each_state() -> None:
    rec = StoreRecord(U, since=50.0, reason="disconnected by an operator", cause=StoreCause.OPERATOR)
    err = unavailable_error("c1", rec)
    assert isinstance(err, PersistenceUnavailable) and err.retriable and err.code == "UNAVAILABLE"
    assert err.reason == "PSTORE_UNAVAILABLE" and "strongroom store connect --cluster c1" in err.message
    assert err.metadata == {"state": "unavailable", "since": "50.000", "cause": "operator"}
    err2 = no_new_error("c1", StoreRecord(N, since=60.0, cause=StoreCause.CAPACITY))
    assert isinstance(err2, NoNewUow) and not err2.retriable and err2.code == "FAILED_PRECONDITION"
    assert "strongroom store allow-new --cluster c1" in err2.message
    # The client's one table rebuilds both from their reasons.
    again = error_for_reason(err2.reason, err2.message, err2.metadata)
    assert type(again) is NoNewUow and again.metadata["cause"] == "capacity"
    assert type(error_for_reason("PSTORE_STATE", "m")) is StoreStateError


def test_the_realm_sets_a_capacity_and_a_bad_one_is_located() -> None:
    text = """\
clusters:
  - name: c1
    persistent_store:
      capacity_messages: 1000
    members:
      - name: m1
"""
    realm = parse_realm(text)
    assert realm.clusters[0].persistent_store == PersistentStore(capacity_messages=1000, capacity_bytes=0)
    assert parse_realm(text.replace("    persistent_store:\n      capacity_messages: 1000\n", "")).clusters[0] \
        .persistent_store == PersistentStore()
    with pytest.raises(RealmInvalid) as info:
        parse_realm(text.replace("capacity_messages: 1000", "capacity_bytes: -1"), "prod.yaml")
    (problem,) = info.value.problems
    assert problem.startswith("prod.yaml:4:7: clusters[0].persistent_store.capacity_bytes: ")
    with pytest.raises(RealmInvalid) as info:
        parse_realm(text.replace("capacity_messages: 1000", "capacity: 5"), "prod.yaml")
    assert info.value.problems == ["prod.yaml:4:7: clusters[0].persistent_store.capacity: unknown key 'capacity'"]


def test_the_realm_selects_a_store_driver_rocksdb_by_default_and_a_bad_one_is_located() -> None:
    from strongroom.persistence.drivers import DRIVERS
    from strongroom.realm.model import StoreDriver

    text = """\
clusters:
  - name: c1
    persistent_store:
      driver: sqlite
    members:
      - name: m1
"""
    assert {d.value for d in StoreDriver} == set(DRIVERS)
    assert parse_realm(text).clusters[0].persistent_store.driver == StoreDriver.SQLITE
    assert parse_realm(text.replace("sqlite", "rocksdb")).clusters[0].persistent_store.driver == StoreDriver.ROCKSDB
    default = parse_realm(text.replace("    persistent_store:\n      driver: sqlite\n", ""))
    assert default.clusters[0].persistent_store.driver == StoreDriver.ROCKSDB
    with pytest.raises(RealmInvalid) as info:
        parse_realm(text.replace("driver: sqlite", "driver: lmdb"), "prod.yaml")
    (problem,) = info.value.problems
    assert problem.startswith("prod.yaml:4:7: clusters[0].persistent_store.driver: ")
    assert "'rocksdb'" in problem and "'sqlite'" in problem
