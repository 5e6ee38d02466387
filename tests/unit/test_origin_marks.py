"""Exactly once across clusters, in-process: the mark rule every member applies to messages a
router forwarded (`PublishOp.forwarded`), the marks in snapshots and in the state on disk, and
what the leader's messaging front lets into the log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import (
    InvalidOrigin,
    LogFormatPending,
    NoInterest,
    OriginGap,
    StrongroomError,
)
from strongroom.persistence.diskinstall import install_parts
from strongroom.persistence.diskstate import STATE_COLUMN_FAMILIES, DiskStateMachine
from strongroom.persistence.membership import MemberRecord, Membership
from strongroom.persistence.messaging import MessagingFront
from strongroom.persistence.publishing import PublishOutcome, publish_outcome
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes, snapshot_parts
from strongroom.persistence.state import OriginMark, PublishResult, StateMachine, durable_key
from strongroom.persistence.storage import DiskStorage
from strongroom.persistence.term import LeaderTerm
from strongroom.realm.model import parse_realm


def origin(seq: int, prev: int, cluster: str = "rio", store: str = "wide") -> cpb.Origin:
    return cpb.Origin(cluster=cluster, store=store, sequence=seq, previous=prev)


def forwarded_msg(seq: int, prev: int, cluster: str = "rio", **kw: object) -> cpb.Message:
    return cpb.Message(body=f"{cluster}-{seq}".encode(), origin=origin(seq, prev, cluster), **kw)  # type: ignore[arg-type]


def forward(dest: str, seq: int, prev: int, cluster: str = "rio", at: float = 100.0, **kw: object) -> rpb.Operation:
    """A forwarded message as the leader writes it: PublishOp.forwarded set."""
    return rpb.Operation(publish=rpb.PublishOp(store="wide", destination=dest, message=forwarded_msg(seq, prev, cluster, **kw),
                                               forwarded=True, published_at=at))


def forward_batch(dest: str, messages: list[cpb.Message], at: float = 100.0) -> rpb.Operation:
    head = rpb.PublishOp(store="wide", destination=dest, forwarded=True, published_at=at)
    return rpb.Operation(publish_batch=rpb.PublishBatchOp(publish=head, messages=messages))


def local(dest: str, body: bytes, pid: str = "", seq: int = 0) -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="wide", destination=dest, published_at=50.0,
                                               message=cpb.Message(body=body, producer_id=pid, sequence=seq)))


def durable(dest: str, name: str = "d") -> rpb.Operation:
    return rpb.Operation(create_durable=rpb.CreateDurableOp(store="wide", destination=dest, durable=name,
                                                            kind=cpb.DURABLE_KIND_STANDARD))


class Applier:
    """Applies operations as entries of consecutive indexes."""

    def __init__(self, sm: StateMachine) -> None:
        self.sm = sm
        self.index = 0

    def __call__(self, *ops: rpb.Operation) -> list[PublishResult]:
        self.index += 1
        return self.sm.apply_entry(rpb.LogEntry(index=self.index, epoch=1, ops=list(ops)))  # type: ignore[return-value]


def mark(sm: StateMachine, dest: str, cluster: str = "rio") -> int:
    held = sm.origin_marks.get((cluster, dest))
    return held.sequence if held is not None else 0


def bodies(sm: StateMachine, dest: str, name: str = "d") -> list[bytes]:
    d = sm.durable(dest, name)
    assert d is not None
    return [sm.messages[seq].message.body for seq in d.pending]


def test_forwarded_messages_in_order_are_stored_with_their_origin_and_move_the_mark() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    apply(durable("p.a"))
    results = apply(forward("p.a", 1, 0, at=10.0), forward("p.a", 2, 1, at=10.0), forward("p.a", 3, 2, at=11.0))
    assert [(r.message_seq > 0, r.duplicate, r.gap) for r in results] == [(True, False, "")] * 3
    assert bodies(sm, "p.a") == [b"rio-1", b"rio-2", b"rio-3"]
    assert sm.origin_marks[("rio", "p.a")] == OriginMark("wide", 3, 11.0)
    stored = sm.messages[results[2].message_seq].message
    assert stored.origin == origin(3, 2)  # kept on the stored message, delivered with it
    # The router skipped messages nobody here wanted: `previous` names the last one it sent.
    (skipped,) = apply(forward("p.a", 9, 3))
    assert skipped.message_seq and mark(sm, "p.a") == 9


def test_a_resent_message_at_or_below_the_mark_is_a_duplicate_and_stores_nothing() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    apply(durable("p.a"))
    apply(forward("p.a", 1, 0), forward("p.a", 2, 1), forward("p.a", 3, 2))
    count, index = sm.store_count["wide"], sm.next_seq
    again = apply(forward("p.a", 2, 1), forward("p.a", 3, 2), forward("p.a", 1, 0))
    assert all(r.duplicate and r.message_seq == 0 and not r.gap for r in again)
    assert sm.store_count["wide"] == count and sm.next_seq == index and mark(sm, "p.a") == 3
    # The publisher is told "duplicate", not "nobody wanted it".
    outcome = publish_outcome(again[0], forwarded_msg(2, 1), 7)
    assert outcome == PublishOutcome(0, True, True, 7, False)


def test_a_gap_is_refused_and_stores_nothing_until_the_missing_message_comes() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    apply(durable("p.a"))
    apply(forward("p.a", 1, 0), forward("p.a", 2, 1))
    (gap,) = apply(forward("p.a", 4, 3))
    assert gap.message_seq == 0 and not gap.duplicate and "up to 2" in gap.gap
    assert bodies(sm, "p.a") == [b"rio-1", b"rio-2"] and mark(sm, "p.a") == 2
    err = publish_outcome(gap, forwarded_msg(4, 3), 9)
    assert isinstance(err, OriginGap) and err.retriable and err.reason == "ORIGIN_GAP"
    assert "not stored" in err.message
    # The first message of an origin must name 0 before it.
    (first,) = apply(forward("p.a", 5, 4, cluster="tokyo"))
    assert first.gap and ("tokyo", "p.a") not in sm.origin_marks
    results = apply(forward("p.a", 3, 2), forward("p.a", 4, 3))
    assert all(r.message_seq for r in results)
    assert bodies(sm, "p.a") == [b"rio-1", b"rio-2", b"rio-3", b"rio-4"] and mark(sm, "p.a") == 4


def test_a_store_limit_refusal_does_not_move_the_mark() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    apply(rpb.Operation(configure_store=rpb.ConfigureStoreOp(store="wide", max_messages=1,
                                                             policy=cpb.LIMIT_POLICY_REJECT)))
    apply(durable("p.a"))
    (first,) = apply(forward("p.a", 1, 0))
    (refused,) = apply(forward("p.a", 2, 1))
    assert refused.rejected and refused.message_seq == 0 and mark(sm, "p.a") == 1
    # Once there is room, the retry of the same message is stored (not taken for a duplicate).
    apply(rpb.Operation(ack=rpb.AckOp(store="wide", durable_key=durable_key("p.a", "d"),
                                      message_seqs=[first.message_seq])))
    (retry,) = apply(forward("p.a", 2, 1))
    assert retry.message_seq and not retry.duplicate and mark(sm, "p.a") == 2


def test_a_message_no_durable_wants_is_not_stored_but_moves_the_mark() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    (res,) = apply(forward("p.a", 1, 0))
    assert res.message_seq == 0 and not res.duplicate and mark(sm, "p.a") == 1
    assert not sm.messages
    outcome = publish_outcome(res, forwarded_msg(1, 0), 3)
    assert isinstance(outcome, PublishOutcome) and outcome.no_interest and not outcome.duplicate
    # The next one follows it, and a re-send of it is a duplicate.
    apply(durable("p.a"))
    again, following = apply(forward("p.a", 1, 0), forward("p.a", 2, 1))
    assert again.duplicate and following.message_seq and bodies(sm, "p.a") == [b"rio-2"]


def test_a_batch_with_several_origins_and_destinations_keeps_a_mark_per_origin_and_destination() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    apply(durable("p.a"), durable("p.b"))
    results = apply(forward_batch("p.a", [
        forwarded_msg(1, 0, "rio"), forwarded_msg(7, 0, "tokyo"), forwarded_msg(2, 1, "rio"),
        forwarded_msg(2, 1, "rio"),    # a duplicate inside the batch
        forwarded_msg(9, 8, "tokyo"),  # a gap: tokyo's mark is 7
        forwarded_msg(8, 7, "tokyo"), forwarded_msg(9, 8, "tokyo")]),
        forward("p.b", 4, 0, "rio"))
    outcomes = [("dup" if r.duplicate else "gap" if r.gap else "stored") for r in results]
    assert outcomes == ["stored", "stored", "stored", "dup", "gap", "stored", "stored", "stored"]
    assert bodies(sm, "p.a") == [b"rio-1", b"tokyo-7", b"rio-2", b"tokyo-8", b"tokyo-9"]
    assert {k: m.sequence for k, m in sm.origin_marks.items()} == {
        ("rio", "p.a"): 2, ("tokyo", "p.a"): 9, ("rio", "p.b"): 4}


def test_a_store_limit_refusal_inside_a_batch_stops_the_mark_at_the_message_before() -> None:
    """The marks of one operation are set after its last message: what a refused message
    leaves behind is what one operation per message would have left."""
    sm = StateMachine()
    apply = Applier(sm)
    apply(rpb.Operation(configure_store=rpb.ConfigureStoreOp(store="wide", max_messages=2,
                                                             policy=cpb.LIMIT_POLICY_REJECT)))
    apply(durable("p.a"))
    results = apply(forward_batch("p.a", [forwarded_msg(1, 0), forwarded_msg(2, 1), forwarded_msg(3, 2),
                                          forwarded_msg(4, 3), forwarded_msg(7, 0, "tokyo")], at=12.0))
    outcomes = [("dup" if r.duplicate else "gap" if r.gap else "limit" if r.rejected else "stored") for r in results]
    assert outcomes == ["stored", "stored", "limit", "gap", "limit"]
    assert sm.origin_marks == {("rio", "p.a"): OriginMark("wide", 2, 12.0)}
    assert bodies(sm, "p.a") == [b"rio-1", b"rio-2"]


def test_the_marks_of_a_batch_are_written_through_with_indexes_on_disk(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path / "a", sync=False, state_families=STATE_COLUMN_FAMILIES)
    try:
        disk = DiskStateMachine.open(storage)
        apply = Applier(disk)
        apply(durable("p.a"))
        apply(forward_batch("p.a", [forwarded_msg(1, 0), forwarded_msg(5, 0, "tokyo"), forwarded_msg(2, 1),
                                    forwarded_msg(3, 2)], at=9.0))
        expected = {("rio", "p.a"): OriginMark("wide", 3, 9.0), ("tokyo", "p.a"): OriginMark("wide", 5, 9.0)}
        assert disk.origin_marks == expected
        assert DiskStateMachine.open(storage).origin_marks == expected
    finally:
        storage.close()


def test_a_forwarded_message_is_not_deduplicated_by_its_producer_id() -> None:
    """Its origin cluster deduplicated it; here the mark does. Forwarded messages of one
    producer reach a cluster on several routes (one per destination) in any order, so a
    producer window here would take one for a retry or refuse it as outside the window."""
    sm = StateMachine()
    apply = Applier(sm)
    apply(durable("p.a"), durable("p.b"))
    (far,) = apply(forward("p.a", 70000, 0, producer_id="pub", sequence=70000))
    (near,) = apply(forward("p.b", 5, 0, producer_id="pub", sequence=5))
    assert far.message_seq and near.message_seq and not near.outside_window
    assert "pub" not in sm.producers
    (mine,) = apply(local("p.a", b"local", pid="pub", seq=5))
    assert mine.message_seq and not mine.duplicate
    assert sm.messages[near.message_seq].message.producer_id == "pub"  # kept as forwarded


def test_a_dead_letter_copy_of_a_forwarded_message_carries_no_origin() -> None:
    sm = StateMachine()
    apply = Applier(sm)
    apply(durable("p.a"), rpb.Operation(create_durable=rpb.CreateDurableOp(
        store="wide", destination="dlq", durable="", kind=cpb.DURABLE_KIND_SHARED, queue=True)))
    (res,) = apply(forward("p.a", 1, 0))
    apply(rpb.Operation(dead_letter=rpb.DeadLetterOp(durable_key=durable_key("p.a", "d"), message_seq=res.message_seq,
                                                     deliveries=3, target_store="wide", target_destination="dlq",
                                                     target_queue=True)))
    dlq = sm.durable("dlq", "")
    assert dlq is not None and len(dlq.pending) == 1
    copy = sm.messages[next(iter(dlq.pending))].message
    assert not copy.HasField("origin") and copy.body == b"rio-1"


def _marked_state(sm: StateMachine) -> Applier:
    apply = Applier(sm)
    apply(durable("p.a"))
    apply(forward("p.a", 1, 0, at=5.0), forward("p.a", 2, 1, at=5.0), forward("p.a", 3, 0, "tokyo", at=6.0),
          forward("p.b", 1, 0, at=7.0))
    return apply


def test_the_marks_travel_with_a_snapshot() -> None:
    sm = StateMachine()
    _marked_state(sm)
    copy = restore_bytes(snapshot_bytes(sm))
    assert copy.origin_marks == sm.origin_marks and snapshot_bytes(copy) == snapshot_bytes(sm)
    assert copy.origin_marks[("tokyo", "p.a")] == OriginMark("wide", 3, 6.0)
    apply = Applier(copy)
    apply.index = copy.applied_index
    dup, nxt = apply(forward("p.a", 2, 1), forward("p.a", 3, 2))
    assert dup.duplicate and nxt.message_seq and mark(copy, "p.a") == 3


def test_the_marks_survive_a_restart_and_a_snapshot_install_with_indexes_on_disk(tmp_path: Path, driver: str) -> None:
    storage = DiskStorage(tmp_path / "a", sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    other = DiskStorage(tmp_path / "b", sync=False, state_families=STATE_COLUMN_FAMILIES, driver=driver)
    try:
        mem = StateMachine()
        _marked_state(mem)
        disk = DiskStateMachine.open(storage)
        apply = _marked_state(disk)
        assert disk.origin_marks == mem.origin_marks
        reopened = DiskStateMachine.open(storage)
        assert reopened.origin_marks == mem.origin_marks
        # A re-send after the restart is a duplicate; the mark moves on and is written through.
        apply.sm = reopened
        dup, nxt = apply(forward("p.a", 2, 1), forward("p.a", 3, 2, at=8.0))
        assert dup.duplicate and nxt.message_seq
        assert DiskStateMachine.open(storage).origin_marks[("rio", "p.a")] == OriginMark("wide", 3, 8.0)
        # The snapshot a leader sends carries them; an empty member installs it.
        fresh = DiskStateMachine.open(other)
        install_parts(fresh, snapshot_parts(reopened))
        assert fresh.origin_marks == reopened.origin_marks
        assert DiskStateMachine.open(other).origin_marks == reopened.origin_marks
        assert restore_bytes(snapshot_bytes(reopened)).origin_marks == reopened.origin_marks
    finally:
        storage.close()
        other.close()


# --- the leader's messaging front ------------------------------------------------------------

REALM = parse_realm("""\
clusters:
  - name: rio
    members: [{name: m1}, {name: m2}, {name: m3}]
    router: {address: "127.0.0.1:7101"}
  - name: london
    members: [{name: m1}]
    router: {address: "127.0.0.1:7102"}
  - name: tokyo
    members: [{name: m1}]
    router: {address: "127.0.0.1:7103"}
zones:
  - {name: z1, clusters: [rio, london]}
stores:
  - {name: wide, routed: true, zones: [z1]}
  - {name: single, routed: true, cluster: rio}
  - {name: plain, cluster: rio}
endpoints:
  - {name: wide-ep, store: wide, template: t}
durable_templates:
  - {name: t, kind: standard}
destinations:
  - {name: "p.*", store: wide, require_interest: true}
  - {name: "one.*", store: single}
  - {name: "*", store: plain}
""")


class _Term:
    """What the publish path reads of a LeaderTerm; operations are collected, never committed."""

    epoch = 1
    lifetimes_clock = LeaderTerm.lifetimes_clock

    def __init__(self, peer_format: int) -> None:
        cluster = REALM.cluster("rio")
        assert cluster is not None
        self.membership = Membership(None, cluster, "m1", "127.0.0.1:1")  # type: ignore[arg-type]
        for name in ("m2", "m3"):
            self.membership.note(name, MemberRecord("127.0.0.1:2", log_format=peer_format).to_bytes())
        self.state = StateMachine()
        self.local_state = StateMachine()
        self.ops: list[rpb.Operation] = []

    def clock(self) -> float:
        return 1.0

    def state_for(self, replicated: bool) -> StateMachine:
        return self.state

    def producing_refusal(self) -> None:
        return None  # the persistent store available

    def submit_raw(self, ops: list[bytes], want_result: bool = True,
                   results: int | None = None) -> asyncio.Future[object] | None:
        self.ops += [rpb.Operation.FromString(op) for op in ops]
        return asyncio.get_running_loop().create_future() if want_result else None


class _Routes:
    cluster_name = "rio"
    realm = REALM

    def __init__(self, peer_format: int = 6) -> None:
        self.term = _Term(peer_format)

    def require_leader(self) -> _Term:
        return self.term

    def name_leader(self, err: StrongroomError) -> StrongroomError:
        return err


def _submit(requests: list[mpb.PublishRequest], peer_format: int = 6) -> tuple[list[object], _Term]:
    routes = _Routes(peer_format)
    pending = MessagingFront(routes).submit_publishes(requests, None, [])  # type: ignore[arg-type]
    return list(pending._outcomes), routes.term


def _request(destination: str, o: cpb.Origin | None, mode: int = mpb.PUBLISH_MODE_STORE_SEND_NOCONFIRM) -> mpb.PublishRequest:
    msg = cpb.Message(body=b"x")
    if o is not None:
        msg.origin.CopyFrom(o)
    return mpb.PublishRequest(destination=destination, message=msg, mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize(("destination", "o", "why"), [
    ("x.plain", origin(1, 0, "london"), "not routed to another cluster"),
    ("one.a", origin(1, 0, "london", "single"), "not routed to another cluster"),
    ("p.a", origin(1, 0, "rio"), "origin cluster 'rio' is not another cluster of routed store 'wide' (london)"),
    ("p.a", origin(1, 0, "tokyo"), "origin cluster 'tokyo' is not another cluster"),
    ("p.a", origin(1, 0, "london", "plain"), "origin store 'plain' is not 'wide'"),
    ("p.a", origin(0, 0, "london"), "sequence is 1 or more"),
    ("p.a", origin(3, 3, "london"), "previous 3 is not below its sequence 3"),
])
async def test_an_origin_that_cannot_be_meant_is_refused_before_the_log(destination: str, o: cpb.Origin,
                                                                        why: str) -> None:
    (outcome,), term = _submit([_request(destination, o)])
    assert isinstance(outcome, InvalidOrigin) and outcome.code == "INVALID_ARGUMENT", outcome
    assert why in outcome.message
    assert term.ops == []


async def test_the_origin_is_checked_per_message_though_the_realm_is_asked_once_per_origin() -> None:
    """Within one batch the realm is asked once per destination and origin; every message's
    own sequence is still checked, and another origin or store of the same batch is judged on
    its own."""
    requests = [_request("p.a", origin(1, 0, "london")), _request("p.a", origin(2, 2, "london")),
                _request("p.a", origin(0, 0, "london")), _request("p.a", origin(1, 0, "london", "plain")),
                _request("p.a", origin(1, 0, "tokyo")), _request("p.a", origin(3, 1, "london"))]
    outcomes, term = _submit(requests)
    assert outcomes[0] is None and outcomes[5] is None
    whys = ["previous 2 is not below its sequence 2", "sequence is 1 or more", "origin store 'plain' is not",
            "origin cluster 'tokyo' is not another cluster"]
    for outcome, why in zip(outcomes[1:5], whys):
        assert isinstance(outcome, InvalidOrigin) and why in outcome.message, outcome
    (op,) = term.ops
    assert [m.origin.sequence for m in op.publish_batch.messages] == [1, 3]


async def test_a_forwarded_message_to_an_endpoint_goes_to_the_log_as_the_endpoints() -> None:
    """Routers forward the messages of endpoints too (content durables are interest): one to an
    endpoint of the routed store goes to the log flagged, as a publish to that endpoint."""
    (outcome,), term = _submit([_request("wide-ep", origin(1, 0, "london"))])
    assert outcome is None  # waiting for the commit
    (op,) = term.ops
    head = op.publish_batch.publish
    assert head.forwarded and head.content and head.destination == "wide-ep" and head.store == "wide"
    assert [m.origin.sequence for m in op.publish_batch.messages] == [1]


async def test_forwarded_messages_go_to_the_log_flagged_and_confirmed_past_require_interest() -> None:
    """p.* requires interest and nobody wants p.a: a local message is refused with NO_INTEREST,
    a forwarded one goes to the log (the mark must move), as its own run, always confirmed."""
    requests = [_request("p.a", origin(1, 0, "london")), _request("p.a", origin(2, 1, "london")),
                _request("p.a", None), _request("p.a", origin(3, 2, "london"))]
    outcomes, term = _submit(requests)
    # None: waiting for the commit, though the requests asked for no confirmation.
    assert outcomes[:2] == [None, None] and isinstance(outcomes[2], NoInterest) and outcomes[3] is None
    heads = [op.publish_batch.publish for op in term.ops]
    assert [h.forwarded for h in heads] == [True] and len(term.ops[0].publish_batch.messages) == 3
    assert [m.origin.sequence for m in term.ops[0].publish_batch.messages] == [1, 2, 3]
    # A local message in between splits the runs: one head with the flag, one without.
    _, term = _submit([_request("p.a", origin(1, 0, "london")), _request("x.plain", None),
                       _request("p.a", origin(2, 1, "london"))])
    assert [op.publish_batch.publish.forwarded for op in term.ops] == [True, False, True]


async def test_a_forwarded_message_waits_for_every_member_to_read_log_format_6() -> None:
    (outcome, local_one), term = _submit([_request("p.a", origin(1, 0, "london")),
                                          _request("x.plain", None)], peer_format=5)
    assert isinstance(outcome, LogFormatPending) and "log format 6" in outcome.message
    assert isinstance(local_one, PublishOutcome) and not local_one.confirmed  # sent, not waited for
    assert len(term.ops) == 1 and not term.ops[0].publish_batch.publish.forwarded
