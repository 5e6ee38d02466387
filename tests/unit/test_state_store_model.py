"""The state machine's store model, in-process: matchers, keyed last-value, limits, expiry,
dead-lettering, replay, and snapshots that carry all of it."""

from __future__ import annotations

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.persistence.matcher import compile_matcher, key_of, matcher_text
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes
from strongroom.persistence.state import (
    PublishResult,
    StateMachine,
    content_durable_key,
    durable_key,
)


def msg(body: str, **fields: object) -> cpb.Message:
    m = cpb.Message(body=body.encode())
    for k, v in fields.items():
        if isinstance(v, bool):
            m.fields[k].bool_value = v
        elif isinstance(v, int):
            m.fields[k].int_value = v
        elif isinstance(v, float):
            m.fields[k].float_value = v
        elif isinstance(v, bytes):
            m.fields[k].bytes_value = v
        else:
            m.fields[k].string_value = str(v)
    return m


def matcher(**conds: object) -> cpb.ContentMatcher:
    out = cpb.ContentMatcher()
    for k, v in conds.items():
        if v == "PRESENT":
            out.fields[k].test = cpb.FIELD_TEST_PRESENT
        elif v == "ABSENT":
            out.fields[k].test = cpb.FIELD_TEST_ABSENT
        else:
            out.fields[k].equals.CopyFrom(msg("", x=v).fields["x"])
    return out


def publish(sm: StateMachine, dest: str, m: cpb.Message, store: str = "s", **kw: object) -> PublishResult:
    result = sm.apply_op(rpb.Operation(publish=rpb.PublishOp(store=store, destination=dest, message=m, **kw)))
    assert isinstance(result, PublishResult)
    return result


def create(sm: StateMachine, dest: str, name: str, store: str = "s", **kw: object) -> None:
    kw.setdefault("kind", cpb.DURABLE_KIND_STANDARD)
    sm.apply_op(rpb.Operation(create_durable=rpb.CreateDurableOp(store=store, destination=dest, durable=name, **kw)))


def bodies(sm: StateMachine, key: str) -> list[bytes]:
    return [sm.messages[s].message.body for s in sm.durables[key].pending]


def test_matcher_is_typed_and_combines_conditions() -> None:
    m = compile_matcher(matcher(sym="A", qty=5, px="PRESENT", gone="ABSENT"))
    assert m is not None
    assert m(msg("", sym="A", qty=5, px=1.0))
    assert not m(msg("", sym="A", qty=5.0, px=1.0))  # float is not int
    assert not m(msg("", sym="A", qty="5", px=1.0))  # string is not int
    assert not m(msg("", sym="A", qty=5))  # px absent
    assert not m(msg("", sym="A", qty=5, px=1.0, gone=True))
    assert compile_matcher(cpb.ContentMatcher()) is None
    nan = compile_matcher(matcher(x=float("nan")))
    assert nan is not None and not nan(msg("", x=float("nan")))
    assert matcher_text(matcher(sym="A", px="PRESENT")) == 'px:present sym="A"'
    assert key_of(msg("", k=1).fields["k"]) != key_of(msg("", k="1").fields["k"])


def test_content_durables_see_the_whole_store_by_matcher() -> None:
    sm = StateMachine()
    create(sm, "ep1", "d", content=True, matcher=matcher(sym="A"))
    publish(sm, "ep1", msg("a1", sym="A"), content=True)
    publish(sm, "ep2", msg("a2", sym="A"), content=True)  # another endpoint of the store
    publish(sm, "ep1", msg("b1", sym="B"), content=True)
    publish(sm, "ep1", msg("other-store", sym="A"), store="t", content=True)
    assert bodies(sm, content_durable_key("s", "d")) == [b"a1", b"a2"]
    assert len(sm.messages) == 2  # nobody wanted b1 or the other store's message


def test_keyed_last_value_keeps_one_message_per_key() -> None:
    sm = StateMachine()
    create(sm, "q", "lv", kind=cpb.DURABLE_KIND_LASTVALUE, key_field="sym", content=True)
    for body, sym in (("a1", "A"), ("b1", "B"), ("a2", "A")):
        publish(sm, "q", msg(body, sym=sym), content=True)
    publish(sm, "q", msg("nokey"), content=True)
    d = sm.durables[content_durable_key("s", "lv")]
    slots = {k: sm.messages[v].message.body for k, v in d.last_values.items()}
    assert slots == {key_of(msg("", x="A").fields["x"]): b"a2", key_of(msg("", x="B").fields["x"]): b"b1"}
    assert len(sm.messages) == 2
    again = restore_bytes(snapshot_bytes(sm))
    assert again.durables[d.key].last_values == d.last_values and len(again.messages) == 2


def configure(sm: StateMachine, **kw: object) -> None:
    sm.apply_op(rpb.Operation(configure_store=rpb.ConfigureStoreOp(store="s", **kw)))


def test_reject_policy_stores_nothing_and_leaves_dedup_open() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    configure(sm, max_messages=2, policy=cpb.LIMIT_POLICY_REJECT)
    for i in range(2):
        assert publish(sm, "t", msg(f"m{i}")).message_seq
    m = msg("m2")
    m.producer_id, m.sequence = "p", 1
    res = publish(sm, "t", m)
    assert res.rejected and "2 messages" in res.limit and res.message_seq == 0
    sm.apply_op(rpb.Operation(ack=rpb.AckOp(store="s", durable_key=durable_key("t", "d"), message_seqs=[1])))
    res = publish(sm, "t", m)  # the retry is stored, not reported as a duplicate
    assert res.message_seq and not res.duplicate


def test_discard_oldest_removes_from_every_durable() -> None:
    sm = StateMachine()
    create(sm, "t", "d1")
    create(sm, "t", "d2")
    configure(sm, max_messages=3, policy=cpb.LIMIT_POLICY_DISCARD_OLDEST)
    for i in range(5):
        publish(sm, "t", msg(f"m{i}"))
    for name in ("d1", "d2"):
        assert bodies(sm, durable_key("t", name)) == [b"m2", b"m3", b"m4"]
    assert sm.store_count["s"] == 3 and list(sm.store_seqs["s"]) == [3, 4, 5]
    again = restore_bytes(snapshot_bytes(sm))
    assert again.store_configs["s"].max_messages == 3
    publish(again, "t", msg("m5"))
    assert bodies(again, durable_key("t", "d1")) == [b"m3", b"m4", b"m5"]


def test_expiry_and_retention() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    publish(sm, "t", msg("short"), published_at=100.0, expires_at=110.0)
    publish(sm, "t", msg("kept"), published_at=100.0)
    publish(sm, "r", msg("retained"), published_at=100.0, retain_until=120.0)  # no durable on r
    assert sm.due(105.0) == []
    due = sm.due(111.0)
    assert due == [1] and sm.due(111.0) == [1]  # timers stay until applied
    sm.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=111.0)))
    assert bodies(sm, durable_key("t", "d")) == [b"kept"] and 1 not in sm.messages
    assert sm.due(111.0) == []
    assert 3 in sm.messages
    due = sm.due(121.0)
    sm.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=121.0)))
    assert 3 not in sm.messages


def test_a_time_to_live_on_the_pseudo_clock_ends_on_the_pseudo_clock_only() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    assert not sm.timed()
    publish(sm, "t", msg("pseudo"), published_at=100.0, expires_clock=15.0)
    # Measured on the pseudo-clock: the leader then writes it every second.
    assert sm.timed()
    # Whatever the wall clock says, it is not due before the pseudo-clock reaches its end.
    assert sm.due(1e12) == [] and sm.due(1e12, 14.9) == []
    assert sm.next_timer() == 0.0 and sm.next_clock_timer() == 15.0
    due = sm.due(0.0, 15.0)
    assert due == [1]
    # An ExpireOp whose pseudo-clock is short of the end expires nothing (the decision is in it).
    sm.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=1e12, clock=14.0)))
    assert 1 in sm.messages and sm.clock == 14.0
    sm.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=due, now=0.0, clock=15.0)))
    assert 1 not in sm.messages and bodies(sm, durable_key("t", "d")) == []
    # The state's pseudo-clock moved on with the operation; nothing is measured on it any more.
    assert sm.clock == 15.0 and not sm.timed()


def test_a_wall_clock_time_to_live_of_an_older_version_keeps_expiring_on_the_wall_clock() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    # As every version before log format 5 wrote it (and a rule with ttl_clock: wall does).
    publish(sm, "t", msg("wall"), published_at=100.0, expires_at=110.0)
    assert not sm.timed()
    assert sm.due(109.0, 1e9) == [] and sm.due(110.0) == [1]
    # An ExpireOp of a pseudo-clock far past 110 does not expire it before the wall clock does.
    sm.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=[1], now=105.0, clock=1e9)))
    assert 1 in sm.messages
    sm.apply_op(rpb.Operation(expire=rpb.ExpireOp(message_seqs=[1], now=110.0)))
    assert 1 not in sm.messages


def test_a_snapshot_keeps_which_clock_each_time_to_live_runs_on() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    publish(sm, "t", msg("wall"), published_at=100.0, expires_at=110.0)
    publish(sm, "t", msg("pseudo"), published_at=100.0, expires_clock=20.0)
    sm.advance_clock(5.0)
    again = restore_bytes(snapshot_bytes(sm))
    assert [(m.expires_at, m.expires_clock) for m in again.messages.values()] == [(110.0, 0.0), (0.0, 20.0)]
    assert again.timed() and again.clock == 5.0
    assert again.due(110.0) == [1] and again.due(0.0, 20.0) == [2]


def test_replay_repositions_within_what_is_stored() -> None:
    sm = StateMachine()
    for i in range(6):
        publish(sm, "t", msg(f"m{i}"), published_at=float(100 + i), retain_until=1000.0)
    create(sm, "t", "late")
    sm.apply_op(rpb.Operation(replay=rpb.ReplayOp(durable_key=durable_key("t", "late"), sequence=3)))
    assert bodies(sm, durable_key("t", "late")) == [b"m2", b"m3", b"m4", b"m5"]
    create(sm, "t", "bytime")
    sm.apply_op(rpb.Operation(replay=rpb.ReplayOp(durable_key=durable_key("t", "bytime"), time=104.0)))
    assert bodies(sm, durable_key("t", "bytime")) == [b"m4", b"m5"]
    sm.apply_op(rpb.Operation(replay=rpb.ReplayOp(durable_key=durable_key("t", "bytime"), sequence=1)))
    assert bodies(sm, durable_key("t", "bytime")) == [f"m{i}".encode() for i in range(6)]
    # Moving forward drops the earlier ones from the durable but not from the store.
    sm.apply_op(rpb.Operation(replay=rpb.ReplayOp(durable_key=durable_key("t", "bytime"), sequence=6)))
    assert bodies(sm, durable_key("t", "bytime")) == [b"m5"]
    assert len(sm.messages) == 6
    refs = {s: m.refs for s, m in sm.messages.items()}
    again = restore_bytes(snapshot_bytes(sm))
    assert {s: m.refs for s, m in again.messages.items()} == refs


def test_dead_letter_moves_a_copy_and_releases_the_original() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    m = msg("poison", k=1)
    m.producer_id, m.sequence = "p", 7
    seq = publish(sm, "t", m).message_seq
    moved = sm.apply_op(rpb.Operation(dead_letter=rpb.DeadLetterOp(
        durable_key=durable_key("t", "d"), message_seq=seq, deliveries=3, target_store="s",
        target_destination="dlq", target_queue=True, published_at=200.0)))
    assert moved is True
    assert not sm.durables[durable_key("t", "d")].pending and seq not in sm.messages
    (dl,) = sm.durables[durable_key("dlq", "")].pending
    copy = sm.messages[dl].message
    assert copy.body == b"poison" and copy.fields["k"].int_value == 1 and not copy.producer_id
    assert copy.fields["sr.dead_letter.deliveries"].int_value == 3
    assert copy.fields["sr.dead_letter.seq"].int_value == seq
    # A full dead-letter store leaves the message where it is.
    seq2 = publish(sm, "t", msg("second")).message_seq
    configure(sm, max_messages=2, policy=cpb.LIMIT_POLICY_REJECT)
    moved = sm.apply_op(rpb.Operation(dead_letter=rpb.DeadLetterOp(
        durable_key=durable_key("t", "d"), message_seq=seq2, deliveries=3, target_store="s",
        target_destination="dlq", target_queue=True)))
    assert moved is False and seq2 in sm.durables[durable_key("t", "d")].pending


def test_followers_drop_timers_of_messages_already_gone() -> None:
    sm = StateMachine()
    create(sm, "t", "d")
    key = durable_key("t", "d")
    for i in range(5000):
        seq = publish(sm, "t", msg(f"m{i}"), published_at=1.0, expires_at=1e9).message_seq
        sm.apply_op(rpb.Operation(ack=rpb.AckOp(store="s", durable_key=key, message_seqs=[seq])))
    assert not sm.messages
    assert len(sm._timers) <= 2 * 1024 + 2  # rebuilt, not one timer per message ever published


def test_refused_publish_leaves_no_trace() -> None:
    sm = StateMachine()
    configure(sm, max_messages=1, policy=cpb.LIMIT_POLICY_REJECT)
    create(sm, "t", "d")
    publish(sm, "t", msg("fill"))
    m = msg("q")
    m.producer_id, m.sequence = "new-producer", 1
    assert publish(sm, "jobs", m, queue=True).rejected
    assert durable_key("jobs", "") not in sm.durables and "new-producer" not in sm.producers
