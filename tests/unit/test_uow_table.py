"""The replicated table of units of work, in-process: every transition of the status table,
refusals that change nothing, the backout threshold, timeouts on the pseudo-clock, status
lifetimes, store limits, and snapshots (in memory and on disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes
from strongroom.persistence.state import StateMachine
from strongroom.uow.model import OpKind, Refused, Subscribed, Uow, UowStatus
from strongroom.uow.table import UowTable

STORE, QUEUE, DLQ, TOPIC = "default", "work.queue", "work.dlq", "news.topic"


def definition(persistent: bool = True, persistent_status: bool = True, lifetime: float = 100.0,
               multiple: int = 2, threshold: int = 0) -> rpb.UowDefinition:
    return rpb.UowDefinition(store=STORE, destination=QUEUE, persistent=persistent, persistent_status=persistent_status,
                             lifetime=lifetime, status_lifetime_multiple=multiple, backout_threshold=threshold,
                             dead_letter_store=STORE if threshold else "", dead_letter_destination=DLQ if threshold else "",
                             conversation_timeout=30.0)


def op(kind: OpKind, *ids: str, clock: float = 0.0, **fields: object) -> rpb.Operation:
    return rpb.Operation(uow=rpb.UowOp(clock=clock, kind=int(kind), uow_ids=list(ids), **fields))  # type: ignore[arg-type]


def commit_new(sm: StateMachine, uow_id: str, n: int = 2, clock: float = 0.0, **kw: object) -> object:
    messages = [cpb.Message(body=f"{uow_id}-{i}".encode()) for i in range(n)]
    return sm.apply_op(op(OpKind.COMMIT, uow_id, clock=clock, definition=definition(**kw),  # type: ignore[arg-type]
                          messages=messages, message_count=n, message_bytes=sum(m.ByteSize() for m in messages)))


def status(sm: StateMachine, uow_id: str) -> UowStatus | None:
    uow = sm.uows.uows.get(uow_id)
    return uow.status if uow is not None else None


def subscribe(name: str, clock: float = 0.0, expiration: float = 50.0, kind: OpKind = OpKind.SUBSCRIBE
              ) -> rpb.Operation:
    return op(kind, clock=clock, subscriptions=[rpb.UowSubscriptionState(
        store=STORE, topic=TOPIC, subscriber=name, expiration=expiration)])


def publish(sm: StateMachine, uow_id: str, n: int = 2, clock: float = 0.0, lifetime: float = 100.0) -> Uow:
    d = definition(lifetime=lifetime)
    d.destination, d.publication = TOPIC, True
    messages = [cpb.Message(body=f"{uow_id}-{i}".encode()) for i in range(n)]
    got = sm.apply_op(op(OpKind.COMMIT, uow_id, clock=clock, definition=d, messages=messages, message_count=n,
                         message_bytes=sum(m.ByteSize() for m in messages)))
    assert isinstance(got, Uow), got
    return got


def readers(sm: StateMachine, uow_id: str) -> dict[str, tuple[UowStatus, int]]:
    return {name: (r.status, r.backouts) for name, r in (sm.uows.uows[uow_id].readers or {}).items()}


def test_open_then_commit_makes_every_message_visible_at_once() -> None:
    sm = StateMachine()
    opened = sm.apply_op(op(OpKind.OPEN, "u1", clock=1.0, definition=definition()))
    assert isinstance(opened, Uow) and opened.status == UowStatus.RECEIVED
    assert sm.uows.next_accepted(QUEUE, set()) is None
    msgs = [cpb.Message(body=b"a"), cpb.Message(body=b"b")]
    done = sm.apply_op(op(OpKind.COMMIT, "u1", clock=2.0, messages=msgs, message_count=2, message_bytes=6))
    assert isinstance(done, Uow) and done.status == UowStatus.ACCEPTED
    assert [m.body for m in sm.uows.next_accepted(QUEUE, set()).messages] == [b"a", b"b"]  # type: ignore[union-attr]
    assert sm.uows.counts(STORE) == (1, 1, 2, 6)
    assert sm.uows.clock == 2.0


@pytest.mark.parametrize(("kind", "before", "after"), [
    (OpKind.SENDER_BACKOUT, UowStatus.RECEIVED, UowStatus.BACKEDOUT),
    (OpKind.SENDER_CANCEL, UowStatus.ACCEPTED, UowStatus.CANCELLED),
    (OpKind.RECEIVER_COMMIT, UowStatus.DELIVERED, UowStatus.PROCESSED),
    (OpKind.RECEIVER_CANCEL, UowStatus.DELIVERED, UowStatus.CANCELLED),
    (OpKind.RECEIVER_BACKOUT, UowStatus.DELIVERED, UowStatus.ACCEPTED),
])
def test_each_transition_of_the_status_table(kind: OpKind, before: UowStatus, after: UowStatus) -> None:
    sm = StateMachine()
    if before == UowStatus.RECEIVED:
        sm.apply_op(op(OpKind.OPEN, "u", definition=definition()))
    else:
        commit_new(sm, "u")
    if before == UowStatus.DELIVERED:
        sm.apply_op(op(OpKind.DELIVER, "u", receiver="r"))
    assert status(sm, "u") == before
    result = sm.apply_op(op(kind, "u", receiver="r"))
    assert isinstance(result, Uow), result
    assert status(sm, "u") == after
    if after in (UowStatus.PROCESSED, UowStatus.CANCELLED, UowStatus.BACKEDOUT):
        assert sm.uows.counts(STORE)[1:] == (0, 0, 0)


def test_refusals_change_nothing() -> None:
    sm = StateMachine()
    commit_new(sm, "u")
    before = snapshot_bytes(sm)
    for kind in (OpKind.COMMIT, OpKind.SENDER_BACKOUT, OpKind.RECEIVER_COMMIT):
        refused = sm.apply_op(op(kind, "u", receiver="r", message_count=1))
        assert isinstance(refused, Refused) and refused.reason == "UOW_STATE", refused
    assert sm.apply_op(op(OpKind.RECEIVER_COMMIT, "nope", receiver="r")) == Refused("UNKNOWN_UOW", "no unit of work 'nope'")
    assert isinstance(commit_new(sm, "u"), Refused)
    assert snapshot_bytes(sm) == before
    sm.apply_op(op(OpKind.DELIVER, "u", receiver="r1"))
    held = sm.apply_op(op(OpKind.RECEIVER_COMMIT, "u", receiver="r2"))
    assert isinstance(held, Refused) and held.reason == "UOW_NOT_HELD"
    assert status(sm, "u") == UowStatus.DELIVERED and sm.uows.uows["u"].receiver == "r1"


def test_past_the_backout_threshold_the_uow_moves_whole_to_the_dead_letter_queue() -> None:
    sm = StateMachine()
    commit_new(sm, "u", n=3, threshold=2)
    for attempt in range(1, 4):
        sm.apply_op(op(OpKind.DELIVER, "u", receiver="r"))
        moved = sm.apply_op(op(OpKind.RECEIVER_BACKOUT, "u", receiver="r", user_status=b"s%d" % attempt))
        assert isinstance(moved, Uow)
    uow = sm.uows.uows["u"]
    assert (uow.status, uow.backouts, uow.destination, uow.dead_lettered_from) == (UowStatus.ACCEPTED, 3, DLQ, QUEUE)
    assert uow.user_status == b"s3" and len(uow.messages or []) == 3
    assert sm.uows.next_accepted(QUEUE, set()) is None
    assert sm.uows.next_accepted(DLQ, set()) is uow


def test_a_backed_out_uow_goes_back_to_its_place_in_the_queue() -> None:
    sm = StateMachine()
    for name in ("a", "b", "c"):
        commit_new(sm, name)
    sm.apply_op(op(OpKind.DELIVER, "a", receiver="r"))
    sm.apply_op(op(OpKind.RECEIVER_BACKOUT, "a", receiver="r"))
    assert [u for u in sm.uows.queues[QUEUE].accepted] == ["a", "b", "c"]


def test_lifetime_timeout_only_while_accepted_and_the_status_lifetime_after() -> None:
    sm = StateMachine()
    commit_new(sm, "accepted", clock=0.0, lifetime=10.0, multiple=2)
    commit_new(sm, "delivered", clock=0.0, lifetime=10.0)
    sm.apply_op(op(OpKind.DELIVER, "delivered", receiver="r", clock=1.0))
    sm.apply_op(op(OpKind.OPEN, "received", clock=1.0, definition=definition(lifetime=10.0)))
    assert sm.uows.due(9.0) == {}
    due = sm.uows.due(10.0)
    assert due == {OpKind.TIMEOUT: ["accepted"]}
    # A timeout written before the clock reached the lifetime is ignored by every member.
    assert sm.apply_op(op(OpKind.TIMEOUT, "accepted", clock=9.5)) == []
    assert status(sm, "accepted") == UowStatus.ACCEPTED
    sm.apply_op(op(OpKind.TIMEOUT, "accepted", clock=10.0))
    assert status(sm, "accepted") == UowStatus.TIMEOUT
    assert (status(sm, "delivered"), status(sm, "received")) == (UowStatus.DELIVERED, UowStatus.RECEIVED)
    # The status is kept 2 lifetimes after completion, then forgotten.
    assert sm.uows.uows["accepted"].expires_at() == 30.0
    assert OpKind.FORGET not in sm.uows.due(29.0)
    assert sm.uows.due(30.0)[OpKind.FORGET] == ["accepted"]
    sm.apply_op(op(OpKind.FORGET, "accepted", clock=30.0))
    assert "accepted" not in sm.uows.uows


def test_a_receiver_whose_conversation_timed_out_loses_the_uow() -> None:
    sm = StateMachine()
    commit_new(sm, "u")
    sm.apply_op(op(OpKind.DELIVER, "u", receiver="r", clock=5.0))
    assert sm.uows.due(34.0) == {}
    assert sm.uows.due(35.0) == {OpKind.RELEASE: ["u"]}
    sm.apply_op(op(OpKind.RELEASE, "u", clock=35.0))
    uow = sm.uows.uows["u"]
    assert (uow.status, uow.backouts) == (UowStatus.ACCEPTED, 1)


def test_without_persistent_status_only_the_id_is_remembered_for_a_lifetime() -> None:
    sm = StateMachine()
    commit_new(sm, "u", persistent_status=False, lifetime=10.0, clock=1.0)
    sm.apply_op(op(OpKind.DELIVER, "u", receiver="r", clock=2.0))
    sm.apply_op(op(OpKind.RECEIVER_COMMIT, "u", receiver="r", clock=3.0))
    assert "u" not in sm.uows.uows and sm.uows.gone == {"u": 13.0}
    assert isinstance(commit_new(sm, "u"), Refused)  # a sender's retry is recognised
    sm.apply_op(op(OpKind.FORGET, "u", clock=13.0))
    assert sm.uows.gone == {}


def test_non_persistent_messages_are_not_in_the_state_and_discard_ends_the_uow() -> None:
    sm = StateMachine()
    commit_new(sm, "u", persistent=False)
    assert sm.uows.uows["u"].messages is None and sm.uows.uows["u"].count == 2
    sm.apply_op(op(OpKind.DISCARD, "u"))
    assert status(sm, "u") == UowStatus.DISCARDED
    assert sm.uows.counts(STORE) == (1, 0, 0, 0)


def test_a_store_limit_refuses_a_uow_that_does_not_fit() -> None:
    sm = StateMachine()
    sm.apply_op(rpb.Operation(configure_store=rpb.ConfigureStoreOp(store=STORE, max_messages=3)))
    assert isinstance(commit_new(sm, "a", n=2), Uow)
    refused = commit_new(sm, "b", n=2)
    assert isinstance(refused, Refused) and refused.reason == "STORE_LIMIT_EXCEEDED"
    assert "b" not in sm.uows.uows


def test_the_pseudo_clock_never_goes_back() -> None:
    table = UowTable()
    table.advance(5.0)
    table.advance(3.0)
    assert table.clock == 5.0


def _busy_state(sm: StateMachine) -> None:
    commit_new(sm, "accepted", clock=1.0)
    commit_new(sm, "delivered", clock=2.0, threshold=1)
    sm.apply_op(op(OpKind.DELIVER, "delivered", receiver="r", clock=3.0))
    sm.apply_op(op(OpKind.OPEN, "open", clock=4.0, definition=definition(), user_status=b"hi"))
    commit_new(sm, "gone", clock=5.0, persistent_status=False)
    sm.apply_op(op(OpKind.SENDER_CANCEL, "gone", clock=6.0))
    sm.apply_op(rpb.Operation(clock=rpb.ClockOp(clock=7.5)))


    sm.apply_op(subscribe("s1", clock=7.6))
    sm.apply_op(subscribe("s2", clock=7.7))
    publish(sm, "pub", clock=7.8)
    sm.apply_op(op(OpKind.DELIVER, "pub", receiver="s1", clock=7.9))


def _view(table: UowTable) -> object:
    return (table.clock, table.order, table.gone, table.store_count, table.store_bytes,
            {k: (u.status, u.count, u.size, u.user_status, u.receiver, u.order, u.created_at,
                 [m.body for m in u.messages or []], u.readers) for k, u in table.uows.items()},
            {k: list(q.accepted) for k, q in table.queues.items()}, table.subscriptions)


def test_a_snapshot_holds_every_uow_and_the_clock() -> None:
    sm = StateMachine()
    _busy_state(sm)
    again = restore_bytes(snapshot_bytes(sm))
    assert _view(again.uows) == _view(sm.uows)
    assert again.uows.clock == 7.9


def test_indexes_on_disk_keep_the_uows_across_a_reopen(tmp_path: Path, driver: str) -> None:
    from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
    from strongroom.persistence.storage import DiskStorage

    storage = DiskStorage(tmp_path / "db", sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    disk, mem = DiskStateMachine.open(storage), StateMachine()
    settle = rpb.LogEntry(index=1, epoch=1, ops=[op(OpKind.RECEIVER_COMMIT, "delivered", receiver="r", clock=8.0)])
    for sm in (disk, mem):
        _busy_state(sm)
        sm.apply_entry(settle)
    storage.close()
    storage = DiskStorage(tmp_path / "db", sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        reopened = DiskStateMachine.open(storage)
        assert _view(reopened.uows) == _view(mem.uows)
        assert reopened.uows.uows["delivered"].status == UowStatus.PROCESSED
        assert reopened.applied_index == 1
    finally:
        storage.close()


def test_a_publication_reaches_the_subscribers_subscribed_before_its_commit() -> None:
    sm = StateMachine()
    assert isinstance(sm.apply_op(subscribe("a")), Subscribed)
    sm.apply_op(subscribe("b"))
    sm.apply_op(op(OpKind.OPEN, "p1", definition=rpb.UowDefinition(
        store=STORE, destination=TOPIC, persistent=True, persistent_status=True, lifetime=100.0,
        status_lifetime_multiple=1, conversation_timeout=30.0, publication=True)))
    sm.apply_op(subscribe("c"))  # after p1 was opened, before its commit: eligible
    sm.apply_op(op(OpKind.COMMIT, "p1", messages=[cpb.Message(body=b"x")], message_count=1, message_bytes=3))
    sm.apply_op(subscribe("late"))
    publish(sm, "p2")
    assert set(readers(sm, "p1")) == {"a", "b", "c"}
    assert set(readers(sm, "p2")) == {"a", "b", "c", "late"}
    assert sm.uows.next_publication(TOPIC, "late", set()).id == "p2"  # type: ignore[union-attr]
    assert sm.uows.next_publication(TOPIC, "a", {"p1"}).id == "p2"  # type: ignore[union-attr]
    refused = sm.apply_op(op(OpKind.DELIVER, "p1", receiver="late"))
    assert isinstance(refused, Refused) and refused.reason == "UOW_NOT_HELD"
    assert [u.id for u in sm.uows.pending_for(TOPIC, "a")] == ["p1", "p2"]


def test_each_subscriber_settles_for_itself_and_the_last_one_completes_the_publication() -> None:
    sm = StateMachine()
    for name in ("a", "b"):
        sm.apply_op(subscribe(name))
    publish(sm, "p")
    assert sm.uows.counts(STORE) == (1, 1, 2, 10)
    sm.apply_op(op(OpKind.DELIVER, "p", receiver="a"))
    sm.apply_op(op(OpKind.DELIVER, "p", receiver="b"))
    assert sm.apply_op(op(OpKind.RECEIVER_COMMIT, "p", receiver="a")).status == UowStatus.ACCEPTED  # type: ignore[union-attr]
    sm.apply_op(op(OpKind.RECEIVER_BACKOUT, "p", receiver="b"))
    assert readers(sm, "p") == {"a": (UowStatus.PROCESSED, 0), "b": (UowStatus.ACCEPTED, 1)}
    assert sm.uows.next_publication(TOPIC, "a", set()) is None
    assert sm.uows.next_publication(TOPIC, "b", set()).id == "p"  # type: ignore[union-attr]
    refused = sm.apply_op(op(OpKind.RECEIVER_COMMIT, "p", receiver="b"))
    assert isinstance(refused, Refused) and refused.reason == "UOW_NOT_HELD"
    sm.apply_op(op(OpKind.DELIVER, "p", receiver="b"))
    sm.apply_op(op(OpKind.RECEIVER_COMMIT, "p", receiver="b"))
    assert status(sm, "p") == UowStatus.PROCESSED
    assert sm.uows.counts(STORE)[1:] == (0, 0, 0)
    assert TOPIC not in sm.uows.queues


def test_a_publication_without_subscribers_completes_at_once_and_one_every_reader_cancelled_is_cancelled() -> None:
    sm = StateMachine()
    assert publish(sm, "nobody").status == UowStatus.PROCESSED
    sm.apply_op(subscribe("a"))
    publish(sm, "p")
    sm.apply_op(op(OpKind.DELIVER, "p", receiver="a"))
    sm.apply_op(op(OpKind.RECEIVER_CANCEL, "p", receiver="a"))
    assert status(sm, "p") == UowStatus.CANCELLED


def test_an_unused_subscription_expires_and_releases_its_publications() -> None:
    sm = StateMachine()
    sm.apply_op(subscribe("idle", clock=0.0, expiration=50.0))
    sm.apply_op(subscribe("busy", clock=0.0, expiration=50.0))
    publish(sm, "p", clock=1.0)
    sm.apply_op(op(OpKind.DELIVER, "p", receiver="busy", clock=40.0))  # used at 40
    assert [s.subscriber for s in sm.uows.due_subscriptions(60.0)] == ["idle"]
    early = sm.apply_op(op(OpKind.EXPIRE_SUBSCRIPTIONS, clock=49.0,
                           subscriptions=[s.to_state() for s in sm.uows.due_subscriptions(60.0)]))
    assert early == [] and ("news.topic", "idle") in sm.uows.subscriptions  # not due yet at 49
    ended = sm.apply_op(op(OpKind.EXPIRE_SUBSCRIPTIONS, clock=60.0,
                           subscriptions=[s.to_state() for s in sm.uows.due_subscriptions(60.0)]))
    assert [s.subscriber for s in ended] == ["idle"]  # type: ignore[union-attr]
    assert set(readers(sm, "p")) == {"busy"} and status(sm, "p") == UowStatus.ACCEPTED
    sm.apply_op(op(OpKind.RECEIVER_COMMIT, "p", receiver="busy", clock=61.0))
    assert status(sm, "p") == UowStatus.PROCESSED
    released = sm.apply_op(subscribe("busy", kind=OpKind.UNSUBSCRIBE))
    assert released == 0 and not sm.uows.subscriptions
    refused = sm.apply_op(subscribe("busy", kind=OpKind.UNSUBSCRIBE))
    assert isinstance(refused, Refused) and refused.reason == "NOT_SUBSCRIBED"


def test_unsubscribing_the_last_pending_reader_completes_the_publication() -> None:
    sm = StateMachine()
    sm.apply_op(subscribe("a"))
    publish(sm, "p")
    assert sm.apply_op(subscribe("a", kind=OpKind.UNSUBSCRIBE)) == 1
    assert status(sm, "p") == UowStatus.PROCESSED and sm.uows.counts(STORE)[2] == 0


def test_a_publication_times_out_only_while_no_subscriber_holds_it() -> None:
    sm = StateMachine()
    sm.apply_op(subscribe("a", expiration=1000.0))
    sm.apply_op(subscribe("b", expiration=1000.0))
    publish(sm, "p", lifetime=10.0)
    sm.apply_op(op(OpKind.DELIVER, "p", receiver="a", clock=5.0))
    refused = sm.apply_op(op(OpKind.SENDER_CANCEL, "p", clock=6.0))
    assert isinstance(refused, Refused) and refused.reason == "UOW_STATE"
    assert OpKind.TIMEOUT not in sm.uows.due(20.0)
    assert sm.apply_op(op(OpKind.TIMEOUT, "p", clock=20.0)) == []
    # a's conversation (30 s) times out: it loses the publication, which then times out.
    assert sm.uows.due(40.0)[OpKind.RELEASE] == ["p"]
    sm.apply_op(op(OpKind.RELEASE, "p", clock=40.0))
    assert readers(sm, "p")["a"] == (UowStatus.ACCEPTED, 1)
    assert sm.uows.due(40.0)[OpKind.TIMEOUT] == ["p"]
    sm.apply_op(op(OpKind.TIMEOUT, "p", clock=40.0))
    assert status(sm, "p") == UowStatus.TIMEOUT


def test_with_the_event_log_on_subscriptions_apply_and_only_publications_are_noted() -> None:
    sm = StateMachine()
    sm.events = []
    sm.apply_op(subscribe("a", expiration=5.0))
    publish(sm, "p")
    ended = sm.apply_op(op(OpKind.EXPIRE_SUBSCRIPTIONS, clock=10.0,
                           subscriptions=[s.to_state() for s in sm.uows.due_subscriptions(10.0)]))
    assert [s.subscriber for s in ended] == ["a"]  # type: ignore[union-attr]
    noted = [(r[2], r[5]) for r in sm.events]
    assert noted == [("p", "ACCEPTED")]
