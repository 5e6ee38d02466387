"""What a realm version decides about durables (static durables, reachability), and the state
machine's side of it: a suspended durable takes nothing new and keeps its backlog, a deleted one
releases what it held. In-process; the cluster side is tests/integration/test_realm_durables.py."""

from __future__ import annotations

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import replication_pb2 as rpb
from strongroom.errors import RealmInvalid
from strongroom.events.records import RecordKind
from strongroom.events.schema import EventKind
from strongroom.persistence.durables import (
    durable_expiry,
    expires_in,
    is_endpoint_route,
    is_static,
    reach_changes,
    static_durable_ops,
    unreachable_reason,
    use_changes,
)
from strongroom.persistence.snapshots import restore_bytes, snapshot_bytes
from strongroom.persistence.state import (
    DeleteResult,
    Durable,
    StateMachine,
    content_durable_key,
    durable_key,
)
from strongroom.realm.model import Realm, parse_realm

BASE = """\
clusters:
  - name: c
    members: [{{name: m1}}]
stores:
  - name: s
    cluster: c
{durables}
  - name: lv
    cluster: c
destinations:
{destinations}
  - name: "*.queue"
    kind: queue
    store: s
  - name: "*"
    store: s
durable_templates:
  - name: latest
    kind: last-value
    key_field: sym
  - name: std
    kind: standard
endpoints:
  - name: prices
    store: lv
    template: latest
{endpoints}
"""


def realm(durables: str = "", destinations: str = "", endpoints: str = "") -> Realm:
    return parse_realm(BASE.format(durables=durables, destinations=destinations, endpoints=endpoints))


def durable(destination: str, name: str, *, queue: bool = False, content: bool = False,
            kind: int = cpb.DURABLE_KIND_STANDARD, store: str = "s") -> Durable:
    key = content_durable_key(store, name) if content else durable_key(destination, name)
    return Durable(key=key, store=store, destination=destination, name=name, kind=kind, queue=queue, content=content)


# --- reachability ------------------------------------------------------------------------------


def test_a_topic_durable_is_unreachable_once_its_name_is_an_endpoint_and_reachable_again_after() -> None:
    board = durable("quotes", "board")
    assert unreachable_reason(board, realm(), "c") == ""
    moved = realm(endpoints="  - name: quotes\n    store: s\n    template: std")
    assert unreachable_reason(board, moved, "c") == "'quotes' is now an endpoint"
    (op,) = reach_changes([board], moved, "c")
    assert op.suspend_durables.suspended and list(op.suspend_durables.durable_keys) == [board.key]
    board.suspend(True)
    (op,) = reach_changes([board], realm(), "c")
    assert not op.suspend_durables.suspended and list(op.suspend_durables.durable_keys) == [board.key]
    board.suspend(False)
    assert reach_changes([board], realm(), "c") == []


ROUTED = """\
clusters:
  - {name: c, members: [{name: m1}], router: {address: "127.0.0.1:7101"}}
  - {name: d, members: [{name: m1}], router: {address: "127.0.0.1:7102"}}
zones:
  - {name: z, clusters: [c, d]}
stores:
  - {name: wide, routed: true, zones: [z]}
  - {name: s, cluster: c}
durable_templates:
  - {name: latest, kind: last-value, key_field: sym}
endpoints:
  - {name: quotes, store: wide, template: latest}
  - {name: local, store: s, template: latest}
destinations:
  - {name: "*", store: s}
"""


def test_a_route_durable_on_an_endpoint_of_a_routed_store_is_a_reachable_standard_durable_of_it() -> None:
    """A router's route durable on an endpoint holds that endpoint's messages (standard, keyed
    by endpoint and name), whatever the endpoint's template; only on a routed store."""
    routed = parse_realm(ROUTED)
    assert is_endpoint_route(routed.route("quotes"), "sr.route.d")
    assert not is_endpoint_route(routed.route("quotes"), "desk")  # a content durable of the template
    assert not is_endpoint_route(routed.route("local"), "sr.route.d")  # not a routed store
    assert not is_endpoint_route(routed.route("x.y"), "sr.route.d")  # a topic: a topic durable anyway
    route = durable("quotes", "sr.route.d", store="wide")
    assert unreachable_reason(route, routed, "c") == ""
    assert reach_changes([route], routed, "c") == []
    assert unreachable_reason(durable("local", "sr.route.d"), routed, "c") == "'local' is now an endpoint"


def test_queue_and_topic_durables_follow_the_kind_of_their_rule() -> None:
    own = durable("jobs", "", queue=True)
    topic = durable("jobs", "worker")
    as_queue = realm(destinations="  - name: jobs\n    kind: queue\n    store: s")
    assert unreachable_reason(own, as_queue, "c") == ""
    assert unreachable_reason(topic, as_queue, "c") == "'jobs' is now a queue"
    assert unreachable_reason(own, realm(), "c") == "'jobs' is now a topic"
    assert unreachable_reason(topic, realm(), "c") == ""


def test_a_rule_gone_or_moved_to_another_cluster_leaves_the_durable_unreachable() -> None:
    text = BASE.format(durables="", endpoints="", destinations="").replace(
        '  - name: "*"\n    store: s\n', "")
    assert unreachable_reason(durable("quotes", "board"), parse_realm(text), "c") == \
        "no rule of the realm maps 'quotes' any more"
    other = text.replace("clusters:\n", "clusters:\n  - name: d\n    members: [{name: n1}]\n").replace(
        "stores:\n", "stores:\n  - name: far\n    cluster: d\n").replace(
        "destinations:\n", "destinations:\n  - name: quotes\n    store: far\n")
    assert "cluster 'd'" in unreachable_reason(durable("quotes", "board"), parse_realm(other), "c")


def test_a_store_move_within_the_cluster_keeps_the_durable_reachable() -> None:
    moved = realm(destinations="  - name: quotes\n    store: lv")
    assert unreachable_reason(durable("quotes", "board"), moved, "c") == ""


def test_an_endpoint_durable_is_reachable_while_an_endpoint_of_its_store_makes_its_kind() -> None:
    board = durable("prices", "board", content=True, kind=cpb.DURABLE_KIND_LASTVALUE, store="lv")
    assert unreachable_reason(board, realm(), "c") == ""
    # Another endpoint of the store with the same kind reaches it too (content durables are store-wide).
    renamed = realm().model_copy(update={"endpoints": []})
    assert "no endpoint of store 'lv'" in unreachable_reason(board, renamed, "c")


# --- static durables ---------------------------------------------------------------------------


STATIC = """\
    durables:
      - name: board
        destination: ticker
        kind: last-value
        key_field: sym
      - name: audit
        destination: ticker
  - name: lv2
    cluster: c
    durables:
      - name: latest
        endpoint: prices2"""


def test_static_durables_become_creates_for_the_missing_ones_only() -> None:
    r = realm(durables=STATIC, endpoints="  - name: prices2\n    store: lv2\n    template: latest")
    ops = static_durable_ops(r, "c", {}, replicated=True)
    creates = {(op.create_durable.destination, op.create_durable.durable): op.create_durable for op in ops}
    assert set(creates) == {("ticker", "board"), ("ticker", "audit"), ("prices2", "latest")}
    board = creates["ticker", "board"]
    assert board.kind == cpb.DURABLE_KIND_LASTVALUE and board.key_field == "sym" and not board.content
    assert creates["ticker", "audit"].kind == cpb.DURABLE_KIND_STANDARD
    latest = creates["prices2", "latest"]
    assert latest.content and latest.store == "lv2" and latest.key_field == "sym"
    assert latest.kind == cpb.DURABLE_KIND_LASTVALUE
    sm = StateMachine()
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=ops))
    assert static_durable_ops(r, "c", sm.durables, replicated=True) == []
    assert static_durable_ops(r, "c", {}, replicated=False) == []


@pytest.mark.parametrize(("durables", "problem"), [
    ("    durables:\n      - name: x\n        destination: '*.queue'", "must be a topic name, not a pattern"),
    ("    durables:\n      - name: x\n        destination: jobs.queue", "is a queue"),
    ("    durables:\n      - name: x\n        destination: prices", "is an endpoint: write endpoint: prices"),
    ("    durables:\n      - name: x\n        endpoint: prices", "maps to store 'lv', not 's'"),
    ("    durables:\n      - name: x", "needs either destination (a topic) or endpoint, not neither"),
    ("    durables:\n      - name: x\n        destination: t\n        key_field: k", "only to last-value"),
    ("    durables:\n      - name: x\n        destination: t\n      - name: x\n        destination: t",
     "static durable 'x' appears twice"),
])
def test_static_durable_problems_are_located(durables: str, problem: str) -> None:
    with pytest.raises(RealmInvalid) as err:
        realm(durables=durables)
    assert problem in str(err.value)
    assert "realm.yaml:" in str(err.value)


# --- the state machine ----------------------------------------------------------------------------


def publish(dest: str, body: bytes, expires_at: float = 0.0, content: bool = False) -> rpb.Operation:
    return rpb.Operation(publish=rpb.PublishOp(store="s", destination=dest, message=cpb.Message(body=body),
                                               content=content, expires_at=expires_at))


def suspend(key: str, suspended: bool = True) -> rpb.Operation:
    return rpb.Operation(suspend_durables=rpb.SuspendDurablesOp(durable_keys=[key], suspended=suspended))


def test_a_suspended_durable_takes_nothing_new_keeps_its_backlog_and_resumes() -> None:
    sm = StateMachine()
    removed: list[tuple[str, str]] = []
    reset: list[str] = []
    sm.on_removed = lambda d, why: removed.append((d.key, why))
    sm.on_reset = lambda d: reset.append(d.key)
    key = durable_key("quotes", "board")
    create = rpb.CreateDurableOp(store="s", destination="quotes", durable="board", kind=cpb.DURABLE_KIND_STANDARD)
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[rpb.Operation(create_durable=create),
                                                        publish("quotes", b"a"), publish("quotes", b"b", 10.0)]))
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[suspend(key)]))
    assert removed == [(key, "DURABLE_UNREACHABLE")]
    # What an endpoint of the same name publishes (content) and a topic publish: neither is taken.
    (r1, r2) = sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[publish("quotes", b"c", content=True),
                                                                   publish("quotes", b"d")]))
    assert r1.message_seq == 0 and r2.message_seq == 0
    assert list(sm.durables[key].pending) == [1, 2] and sm.store_count["s"] == 2
    assert not sm.wants("s", "quotes", False, cpb.Message(body=b"e"))
    # An expiry still reaches it (it stays among its destination's durables).
    sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[rpb.Operation(expire=rpb.ExpireOp(message_seqs=[2], now=11))]))
    assert list(sm.durables[key].pending) == [1]
    # Suspension survives a snapshot.
    again = restore_bytes(snapshot_bytes(sm))
    assert again.durables[key].suspended and not again.durables[key].wants_all
    sm.apply_entry(rpb.LogEntry(index=5, epoch=1, ops=[suspend(key, False)]))
    assert reset == [key] and not sm.durables[key].suspended
    (r3,) = sm.apply_entry(rpb.LogEntry(index=6, epoch=1, ops=[publish("quotes", b"f")]))
    assert r3.message_seq and list(sm.durables[key].pending) == [1, r3.message_seq]


def test_deleting_a_durable_releases_its_messages_and_its_name() -> None:
    sm = StateMachine()
    removed: list[tuple[str, str]] = []
    sm.on_removed = lambda d, why: removed.append((d.key, why))
    ops = [rpb.Operation(create_durable=rpb.CreateDurableOp(store="s", destination="t", durable=name, kind=kind))
           for name, kind in (("a", cpb.DURABLE_KIND_STANDARD), ("b", cpb.DURABLE_KIND_STANDARD),
                              ("lv", cpb.DURABLE_KIND_LASTVALUE))]
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[*ops, publish("t", b"1"), publish("t", b"2")]))
    assert sm.store_count["s"] == 2
    delete_a = rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=durable_key("t", "a")))
    (result,) = sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[delete_a]))
    assert result == DeleteResult("s", 2) and removed == [(durable_key("t", "a"), "DURABLE_DELETED")]
    assert sm.store_count["s"] == 2  # b still holds both
    assert [d.name for d in sm.by_destination["t"]] == ["b", "lv"]
    delete_lv = rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=durable_key("t", "lv")))
    delete_b = rpb.Operation(delete_durable=rpb.DeleteDurableOp(durable_key=durable_key("t", "b")))
    r_lv, r_b, r_gone = sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[delete_lv, delete_b, delete_b]))
    assert r_lv == DeleteResult("s", 1) and r_b == DeleteResult("s", 2) and r_gone is None
    assert sm.store_count["s"] == 0 and not sm.messages and "t" not in sm.by_destination
    # The name is free: a new durable starts empty.
    sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[ops[0]]))
    assert not sm.durables[durable_key("t", "a")].pending


# --- use and expiry --------------------------------------------------------------------------------

EXPIRING = """\
  - name: "short.*"
    store: s
    durable_expiry_seconds: 3
  - name: "eph.*"
    store: s
    durable_expiry_seconds: 60"""


def test_a_durable_expires_after_its_rules_expiry_unless_static_a_queue_or_suspended() -> None:
    r = realm(durables="    durables:\n      - name: keep\n        destination: short.x", destinations=EXPIRING,
              endpoints="  - name: eph\n    store: lv\n    template: latest\n    durable_expiry_seconds: 5")
    assert durable_expiry(durable("short.x", "a"), r, "c") == 3.0
    assert durable_expiry(durable("other", "a"), r, "c") == 0.0  # the default: never
    # An endpoint durable takes the expiry of the endpoint it was created on.
    assert durable_expiry(durable("eph", "a", content=True, kind=cpb.DURABLE_KIND_LASTVALUE, store="lv"), r, "c") == 5.0
    # Static durables of the realm never expire, nor a queue's own durable, nor a suspended one.
    assert is_static(durable("short.x", "keep"), r) and durable_expiry(durable("short.x", "keep"), r, "c") == 0.0
    assert durable_expiry(durable("short.queue", "", queue=True), r, "c") == 0.0
    suspended = durable("short.x", "b")
    suspended.suspend(True)
    assert durable_expiry(suspended, r, "c") == 0.0


def test_a_queue_rule_may_not_set_a_durable_expiry() -> None:
    with pytest.raises(RealmInvalid) as err:
        realm(destinations="  - name: jobs.queue\n    kind: queue\n    store: s\n    durable_expiry_seconds: 10")
    (problem,) = err.value.problems
    # Line 14 of the document: the rule's durable_expiry_seconds.
    assert problem == ("realm.yaml:14:5: destinations[0].durable_expiry_seconds: 'jobs.queue' is a queue: its own "
                       "durable holds the queue's messages and never expires; durable_expiry_seconds applies to "
                       "topics and endpoints")


def test_the_leader_marks_use_and_expires_what_stayed_unused_long_enough() -> None:
    fresh = durable("t", "fresh")  # last use unknown (created before log format 5)
    busy = durable("t", "busy")
    busy.last_used = 10.0
    left = durable("t", "left")  # its subscriber went since the last look
    left.last_used, left.attached = 10.0, True
    quick = durable("t", "quick")  # a subscriber came and went between two looks
    quick.last_used = 10.0
    idle = durable("t", "idle")
    idle.last_used = 10.0
    recent = durable("t", "recent")
    recent.last_used = 12.0
    changes = use_changes([fresh, busy, left, quick, idle, recent], lambda key: key == busy.key, {quick.key},
                          lambda d: 3.0, clock=13.0)
    assert changes.attached == [busy.key]
    assert changes.released == [fresh.key, left.key, quick.key]
    assert changes.expired == [(idle.key, 3.0)]
    assert expires_in(recent, 3.0, False, 13.0) == 2.0 and expires_in(idle, 3.0, False, 13.0) == 0.0
    assert expires_in(idle, 0.0, False, 13.0) is None and expires_in(idle, 3.0, True, 13.0) is None
    assert expires_in(fresh, 3.0, False, 13.0) is None


def test_use_is_replicated_and_an_expiry_deletes_only_a_durable_still_unused() -> None:
    sm = StateMachine()
    sm.events = []
    removed: list[tuple[str, str]] = []
    sm.on_removed = lambda d, why: removed.append((d.key, why))
    key = durable_key("t", "a")
    create = rpb.CreateDurableOp(store="s", destination="t", durable="a", kind=cpb.DURABLE_KIND_STANDARD, clock=5.0)
    sm.apply_entry(rpb.LogEntry(index=1, epoch=1, ops=[rpb.Operation(create_durable=create), publish("t", b"1")]))
    assert (sm.durables[key].last_used, sm.clock) == (5.0, 5.0)
    # An acknowledgment is a use, at the leader's clock.
    sm.apply_entry(rpb.LogEntry(index=2, epoch=1, ops=[rpb.Operation(ack=rpb.AckOp(
        store="s", durable_key=key, message_seqs=[], clock=7.0))]))
    assert sm.durables[key].last_used == 7.0 and sm.clock == 7.0

    def expire(clock: float, unused_for: float = 3.0) -> rpb.Operation:
        return rpb.Operation(delete_durable=rpb.DeleteDurableOp(
            durable_key=key, expiry=rpb.DurableExpiry(clock=clock, unused_for=unused_for)))

    def use(clock: float, attached: bool) -> rpb.Operation:
        return rpb.Operation(durable_use=rpb.DurableUseOp(durable_keys=[key], clock=clock, attached=attached))

    # Not unused for long enough at the clock the leader decided: nothing changes.
    assert sm.apply_entry(rpb.LogEntry(index=3, epoch=1, ops=[expire(9.9)])) == [None]
    # A subscriber attached (in the log before the expiry): in use, whatever the clock says.
    assert sm.apply_entry(rpb.LogEntry(index=4, epoch=1, ops=[use(8.0, True), expire(100.0)])) == [None, None]
    assert sm.durables[key].attached and sm.durables[key].idle(1e9) == 0.0
    # Gone at 101: unused from then on.
    sm.apply_entry(rpb.LogEntry(index=5, epoch=1, ops=[use(101.0, False)]))
    assert (sm.durables[key].last_used, sm.durables[key].attached) == (101.0, False)
    # The use and attachment survive a snapshot.
    again = restore_bytes(snapshot_bytes(sm))
    assert (again.durables[key].last_used, again.durables[key].attached, again.clock) == (101.0, False, 101.0)
    assert sm.apply_entry(rpb.LogEntry(index=6, epoch=1, ops=[expire(103.9)])) == [None]
    sm.events = []
    (result,) = sm.apply_entry(rpb.LogEntry(index=7, epoch=1, ops=[expire(104.0)]))
    # Deleted as an operator's delete would: what it held is released, its subscriptions end.
    assert result == DeleteResult("s", 1) and key not in sm.durables and not sm.messages
    assert removed == [(key, "DURABLE_DELETED")]
    assert [(r[1], r[3], r[4]) for r in sm.events] == [(RecordKind.DURABLE, EventKind.DURABLE_EXPIRED,
                                                        "unused for 3 s")]
